"""The principals API against a real node with auth on: secrets shown once and never
stored in the clear, rotation and disabling revoking tokens at once, deletion,
idempotent retries, the tenant's history naming the caller, paging, bad input, and
the token signing key rotated without refusing the tokens already issued."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import jwt
import pytest

from harness.node import NodeProcess
from tests.native.support import TIMEOUT, Api, Reply, assert_error, assert_status, unique

ROOT = ("root", "root-secret-1")  # a service admin (METASTORE_AUTH_ADMINS)
OPS_TENANT = "opsland"  # its principal ops is a service admin too, once someone creates it
PLAIN = ("plain", "plain-secret-1")  # no role at all
HIDDEN = ("salt", "hash", "generation", "properties")  # never part of a principal's JSON


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    root = tmp_path_factory.mktemp("principals")
    env = {
        "METASTORE_AUTH": "on",
        "METASTORE_AUTH_CLIENTS": ",".join(f"{c}:{s}" for c, s in (ROOT, PLAIN)),
        "METASTORE_AUTH_ADMINS": f"root,ops@{OPS_TENANT}",
    }
    process = NodeProcess(root / "data", log_path=root / "node.log", env=env)
    with process:
        yield process
    log = process.log_path.read_text(errors="replace")
    assert "Traceback" not in log, f"the node logged an unhandled error:\n{process.log_tail(60)}"


class Caller:
    """Requests to the node as one principal (its bearer token)."""

    def __init__(self, api: Api, token: str) -> None:
        self.api = api
        self.token = token

    async def call(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> Reply:
        sent = {"Authorization": f"Bearer {self.token}", **(headers or {})}
        if body is None:
            return await self.api.call(method, path, headers=sent)
        return await self.api.call(method, path, json_body=body, headers=sent)


async def token_for(api: Api, client_id: str, secret: str) -> Reply:
    form = {"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret}
    return await api.call("POST", "/v1/oauth/tokens", data=form)


async def login(api: Api, client_id: str, secret: str) -> Caller:
    reply = await token_for(api, client_id, secret)
    assert reply.status == 200, reply.describe()
    return Caller(api, reply.body["access_token"])


@pytest.fixture
async def api(secured: NodeProcess) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        yield Api(session, secured.url)


@pytest.fixture
async def root(api: Api) -> Caller:
    return await login(api, *ROOT)


@pytest.fixture
async def tenant(root: Caller) -> str:
    name = unique("t")
    assert_status(await root.call("POST", "/api/v1/tenants", {"name": name}), 201)
    return name


def principals(tenant: str) -> str:
    return f"/api/v1/tenants/{tenant}/principals"


def assert_nothing_hidden(body: Any) -> None:
    text = json.dumps(body)
    for word in HIDDEN:
        assert f'"{word}"' not in text, body


async def whoami(caller: Caller) -> Reply:
    return await caller.call("GET", "/api/v1/whoami")


# --- create, read, list ------------------------------------------------------------------


async def test_a_generated_secret_is_shown_once_and_never_again(
    api: Api, root: Caller, tenant: str
) -> None:
    created = assert_status(await root.call("POST", principals(tenant), {"name": "etl"}), 201)
    secret = created["client-secret"]
    assert isinstance(secret, str) and len(secret) >= 32, created
    assert created["id"] == f"etl@{tenant}" and created["tenant"] == tenant, created
    assert created["type"] == "service" and created["disabled"] is False, created
    assert created["created-by"] == "root", created
    assert_nothing_hidden(created)
    got = assert_status(await root.call("GET", f"{principals(tenant)}/etl"))
    listed = assert_status(await root.call("GET", principals(tenant)))
    for body in (got, *listed["principals"]):
        assert "client-secret" not in body and secret not in json.dumps(body), body
        assert_nothing_hidden(body)
    assert [p["name"] for p in listed["principals"]] == ["etl"], listed
    etl = await login(api, f"etl@{tenant}", secret)
    me = assert_status(await whoami(etl))
    assert me == {
        "id": f"etl@{tenant}",
        "tenant": tenant,
        "name": "etl",
        "kind": "service",
        "roles": [],
        "service-admin": False,
    }, me


async def test_a_given_secret_is_used_and_users_have_none(
    api: Api, root: Caller, tenant: str
) -> None:
    body = {"name": "loader", "secret": "loader-secret-1"}
    created = assert_status(await root.call("POST", principals(tenant), body), 201)
    assert created["client-secret"] == "loader-secret-1", created
    await login(api, f"loader@{tenant}", "loader-secret-1")
    user = {"name": "ana", "type": "user"}
    created = assert_status(await root.call("POST", principals(tenant), user), 201)
    assert created["type"] == "user" and "client-secret" not in created, created
    # a user signs in at its identity provider: no client credentials
    refused = await token_for(api, f"ana@{tenant}", "whatever-secret")
    assert refused.status == 401 and refused.body["error"] == "invalid_client", refused.describe()


async def test_the_list_is_paged_in_name_order_and_holds_only_principals(
    root: Caller, tenant: str
) -> None:
    names = [f"p{i:02d}" for i in range(7)]
    for name in reversed(names):
        assert_status(await root.call("POST", principals(tenant), {"name": name}), 201)
    seen: list[str] = []
    token = ""
    while True:
        path = principals(tenant) + "?pageSize=3" + (f"&pageToken={token}" if token else "")
        page = assert_status(await root.call("GET", path))
        assert len(page["principals"]) <= 3, page
        seen += [p["name"] for p in page["principals"]]
        token = page["next-page-token"]
        if not token:
            break
    assert seen == names  # the tenant record and idempotency records are not listed


async def test_the_tenant_history_names_who_changed_which_principal(
    root: Caller, tenant: str
) -> None:
    assert_status(await root.call("POST", principals(tenant), {"name": "etl"}), 201)
    assert_status(await root.call("POST", f"{principals(tenant)}/etl/rotate"), 200)
    assert_status(await root.call("POST", f"{principals(tenant)}/etl/disable"), 200)
    assert_status(await root.call("POST", f"{principals(tenant)}/etl/enable"), 200)
    assert (await root.call("DELETE", f"{principals(tenant)}/etl")).status == 204
    history = assert_status(await root.call("GET", f"/api/v1/tenants/{tenant}/commits"))
    recent = [(c["operation"], c["principal"], c["changes"]) for c in history["commits"][:5]]
    expected = [
        ("delete principal", "delete"),
        ("enable principal", "update"),
        ("disable principal", "update"),
        ("rotate principal secret", "update"),
        ("create principal", "create"),
    ]
    change = {"kind": "system", "path": ["principal:etl"]}
    assert recent == [
        (operation, "root", [{**change, "action": action}]) for operation, action in expected
    ], history


# --- revocation --------------------------------------------------------------------------


async def test_rotating_a_secret_revokes_the_earlier_tokens_at_once(
    api: Api, root: Caller, tenant: str
) -> None:
    created = assert_status(await root.call("POST", principals(tenant), {"name": "etl"}), 201)
    etl = await login(api, f"etl@{tenant}", created["client-secret"])
    assert_status(await whoami(etl))
    rotated = assert_status(await root.call("POST", f"{principals(tenant)}/etl/rotate"))
    assert rotated["client-secret"] != created["client-secret"], rotated
    assert_nothing_hidden(rotated)
    assert_error(await whoami(etl), 401, "NotAuthorizedException")
    refused = await token_for(api, f"etl@{tenant}", created["client-secret"])
    assert refused.status == 401, refused.describe()
    assert_status(await whoami(await login(api, f"etl@{tenant}", rotated["client-secret"])))
    given = {"secret": "chosen-secret-2"}
    assert_status(await root.call("POST", f"{principals(tenant)}/etl/rotate", given))
    await login(api, f"etl@{tenant}", "chosen-secret-2")


async def test_disabling_refuses_tokens_and_credentials_and_enabling_needs_a_new_token(
    api: Api, root: Caller, tenant: str
) -> None:
    created = assert_status(await root.call("POST", principals(tenant), {"name": "etl"}), 201)
    secret = created["client-secret"]
    etl = await login(api, f"etl@{tenant}", secret)
    disabled = assert_status(await root.call("POST", f"{principals(tenant)}/etl/disable"))
    assert disabled["disabled"] is True, disabled
    assert_error(await whoami(etl), 401, "NotAuthorizedException")
    refused = await token_for(api, f"etl@{tenant}", secret)
    assert refused.status == 401 and refused.body["error"] == "invalid_client", refused.describe()
    enabled = assert_status(await root.call("POST", f"{principals(tenant)}/etl/enable"))
    assert enabled["disabled"] is False, enabled
    assert_error(await whoami(etl), 401, "NotAuthorizedException")  # revoked for good
    assert_status(await whoami(await login(api, f"etl@{tenant}", secret)))


async def test_a_deleted_principal_loses_its_tokens_and_a_new_one_of_its_name_gets_none(
    api: Api, root: Caller, tenant: str
) -> None:
    body = {"name": "etl", "secret": "etl-secret-1"}
    assert_status(await root.call("POST", principals(tenant), body), 201)
    etl = await login(api, f"etl@{tenant}", "etl-secret-1")
    assert (await root.call("DELETE", f"{principals(tenant)}/etl")).status == 204
    assert_error(await whoami(etl), 401, "NotAuthorizedException")
    assert_error(
        await root.call("GET", f"{principals(tenant)}/etl"), 404, "NoSuchPrincipalException"
    )
    assert_status(await root.call("POST", principals(tenant), body), 201)  # same secret
    assert_error(await whoami(etl), 401, "NotAuthorizedException")  # another generation


# --- who may change an admin ------------------------------------------------------------


async def desk_clerk(api: Api, root: Caller, tenant: str) -> Caller:
    """``desk@tenant``: every principal privilege of its tenant, and nothing else."""
    secret = "desk-secret-1"
    assert_status(
        await root.call("POST", principals(tenant), {"name": "desk", "secret": secret}), 201
    )
    roles = f"/api/v1/tenants/{tenant}/principal-roles"
    assert_status(await root.call("POST", roles, {"name": "helpdesk"}), 201)
    for privilege in (
        "PRINCIPAL_CREATE",
        "PRINCIPAL_ROTATE_CREDENTIALS",
        "PRINCIPAL_WRITE_PROPERTIES",
        "PRINCIPAL_DROP",
    ):
        grant = {"privilege": privilege}
        assert_status(await root.call("POST", f"{roles}/helpdesk/grants", grant), 201)
    member = {"principal": "desk"}
    assert_status(await root.call("POST", f"{roles}/helpdesk/principals", member), 201)
    return await login(api, f"desk@{tenant}", secret)


async def test_only_admins_rotate_disable_or_delete_admins(
    api: Api, root: Caller, tenant: str
) -> None:
    """A rotate hands the caller the target's tokens: a holder of the principal
    privileges may not become a tenant admin (by rotating one) nor lock the admins out,
    while it still manages everyone else."""
    desk = await desk_clerk(api, root, tenant)
    boss = {"name": "boss", "secret": "boss-secret-1"}
    assert_status(await root.call("POST", principals(tenant), boss), 201)
    admins = f"/api/v1/tenants/{tenant}/principal-roles/tenant_admin/principals"
    assert_status(await root.call("POST", admins, {"principal": "boss"}), 201)
    for method, path, body in (
        ("POST", "boss/rotate", {"secret": "taken-over-secret"}),
        ("POST", "boss/rotate", None),
        ("POST", "boss/disable", None),
        ("DELETE", "boss", None),
    ):
        refused = await desk.call(method, f"{principals(tenant)}/{path}", body)
        assert_error(refused, 403, "ForbiddenException")
        assert "only tenant admins may" in refused.body["error"]["message"], refused.describe()
    assert_status(await whoami(await login(api, f"boss@{tenant}", "boss-secret-1")))
    # the clerk still does its job on everyone else, itself included
    assert_status(await desk.call("POST", principals(tenant), {"name": "etl"}), 201)
    assert_status(await desk.call("POST", f"{principals(tenant)}/etl/rotate"))
    assert_status(await desk.call("POST", f"{principals(tenant)}/etl/disable"))
    assert (await desk.call("DELETE", f"{principals(tenant)}/etl")).status == 204
    # a tenant admin manages its fellow admins (and itself)
    boss_caller = await login(api, f"boss@{tenant}", "boss-secret-1")
    assert_status(await boss_caller.call("POST", f"{principals(tenant)}/boss/rotate"))


async def test_only_service_admins_create_rotate_or_delete_service_admins(
    api: Api, root: Caller
) -> None:
    """A service admin holds every tenant: no one else may create the principal an admin
    id names (it would be one), nor rotate, disable or delete one, tenant admins
    included."""
    default_desk = await desk_clerk(api, root, "default")
    for method, path in (("POST", "root/rotate"), ("POST", "root/disable"), ("DELETE", "root")):
        refused = await default_desk.call(method, f"{principals('default')}/{path}")
        assert_error(refused, 403, "ForbiddenException")
        assert "only service admins may" in refused.body["error"]["message"], refused.describe()
    assert_status(await root.call("POST", "/api/v1/tenants", {"name": OPS_TENANT}), 201)
    desk = await desk_clerk(api, root, OPS_TENANT)
    boss = {"name": "boss", "secret": "boss-secret-1"}
    assert_status(await root.call("POST", principals(OPS_TENANT), boss), 201)
    admins = f"/api/v1/tenants/{OPS_TENANT}/principal-roles/tenant_admin/principals"
    assert_status(await root.call("POST", admins, {"principal": "boss"}), 201)
    tenant_admin = await login(api, f"boss@{OPS_TENANT}", "boss-secret-1")
    ops = {"name": "ops", "secret": "ops-secret-chosen"}
    for caller in (desk, tenant_admin):
        refused = await caller.call("POST", principals(OPS_TENANT), ops)
        assert_error(refused, 403, "ForbiddenException")
    assert_error(
        await root.call("GET", f"{principals(OPS_TENANT)}/ops"), 404, "NoSuchPrincipalException"
    )
    assert_status(await root.call("POST", principals(OPS_TENANT), ops), 201)
    ops_caller = await login(api, f"ops@{OPS_TENANT}", "ops-secret-chosen")
    assert assert_status(await whoami(ops_caller))["service-admin"] is True
    for caller in (desk, tenant_admin):
        for method, path in (("POST", "ops/rotate"), ("POST", "ops/disable"), ("DELETE", "ops")):
            refused = await caller.call(method, f"{principals(OPS_TENANT)}/{path}")
            assert_error(refused, 403, "ForbiddenException")
    assert_status(await whoami(ops_caller))  # its token still holds
    assert_status(await ops_caller.call("POST", f"{principals(OPS_TENANT)}/ops/rotate"))


# --- retries and bad input ---------------------------------------------------------------


async def test_retried_mutations_with_an_idempotency_key_replay_without_the_secret(
    root: Caller, tenant: str
) -> None:
    key = {"Idempotency-Key": unique("k")}
    first = await root.call("POST", principals(tenant), {"name": "etl"}, key)
    again = await root.call("POST", principals(tenant), {"name": "etl"}, key)
    assert_status(first, 201)
    assert_status(again, 201)
    assert "client-secret" in first.body and "client-secret" not in again.body, again.body
    assert {k: v for k, v in first.body.items() if k != "client-secret"} == again.body
    other = await root.call("POST", principals(tenant), {"name": "etl2"}, key)
    assert_error(other, 400)  # the key belongs to the first request
    key = {"Idempotency-Key": unique("k")}
    path = f"{principals(tenant)}/etl/disable"
    once = assert_status(await root.call("POST", path, None, key))
    assert assert_status(await root.call("POST", path, None, key)) == once
    key = {"Idempotency-Key": unique("k")}
    gone = await root.call("DELETE", f"{principals(tenant)}/etl", None, key)
    again = await root.call("DELETE", f"{principals(tenant)}/etl", None, key)
    assert gone.status == again.status == 204, again.describe()
    history = assert_status(await root.call("GET", f"/api/v1/tenants/{tenant}/commits"))
    operations = [c["operation"] for c in history["commits"]]
    assert operations.count("create principal") == 1 and operations.count("delete principal") == 1


async def test_a_key_on_a_request_carrying_its_own_secret_is_refused(
    root: Caller, tenant: str
) -> None:
    """An idempotency record keeps a digest of the body: never of a body holding a secret."""
    key = {"Idempotency-Key": unique("k")}
    body = {"name": "etl", "secret": "chosen-secret-1"}
    assert_error(await root.call("POST", principals(tenant), body, key), 400)
    assert assert_status(await root.call("GET", principals(tenant)))["principals"] == []
    assert_status(await root.call("POST", principals(tenant), body), 201)
    rotate = f"{principals(tenant)}/etl/rotate"
    assert_error(await root.call("POST", rotate, {"secret": "chosen-secret-2"}, key), 400)
    assert_status(await root.call("POST", rotate, None, key))  # a server-chosen secret is fine


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"name": "bad name"}, 400),
        ({"name": "x" * 129}, 400),
        ({"name": "a@b"}, 400),
        ({"name": "anonymous"}, 400),
        ({"name": "system"}, 400),
        ({"name": "ok", "type": "robot"}, 400),
        ({"name": "ok", "secret": "short"}, 400),
        ({"name": "ok", "secret": " padded-secret "}, 400),
        ({"name": "ok", "type": "user", "secret": "user-secret-1"}, 400),
        ({"name": "ok", "extra": 1}, 400),
        ({"name": 7}, 400),
    ],
)
async def test_bad_principals_are_400_and_write_nothing(
    root: Caller, tenant: str, body: dict[str, Any], status: int
) -> None:
    assert_error(await root.call("POST", principals(tenant), body), status)
    assert assert_status(await root.call("GET", principals(tenant)))["principals"] == []


async def test_missing_and_duplicate_principals(root: Caller, tenant: str) -> None:
    assert_status(await root.call("POST", principals(tenant), {"name": "etl"}), 201)
    assert_error(await root.call("POST", principals(tenant), {"name": "etl"}), 409)
    for method, suffix in (("GET", ""), ("DELETE", ""), ("POST", "/rotate"), ("POST", "/disable")):
        reply = await root.call(method, f"{principals(tenant)}/nobody{suffix}")
        assert_error(reply, 404, "NoSuchPrincipalException")
    assert_error(await root.call("GET", principals(unique("t"))), 404, "NoSuchTenantException")
    created = {"name": "ana", "type": "user"}
    assert_status(await root.call("POST", principals(tenant), created), 201)
    assert_error(await root.call("POST", f"{principals(tenant)}/ana/rotate"), 400)
    bad = await root.call("POST", f"{principals(tenant)}/etl/rotate", {"secret": 1})
    assert_error(bad, 400)


# --- the signing key ---------------------------------------------------------------------


async def test_rotating_the_signing_key_keeps_earlier_tokens_valid(api: Api, root: Caller) -> None:
    plain = await login(api, *PLAIN)
    before = jwt.get_unverified_header(plain.token)["kid"]
    rotated = assert_status(await root.call("POST", "/api/v1/token-keys/rotate"))
    assert rotated["current"] != before and rotated["dropped"] == [], rotated
    assert_status(await whoami(plain))  # signed by a retired key: still good
    fresh = await login(api, *PLAIN)
    assert jwt.get_unverified_header(fresh.token)["kid"] == rotated["current"]
    assert_status(await whoami(fresh))
    assert_error(await plain.call("POST", "/api/v1/token-keys/rotate"), 403, "ForbiddenException")
    history = assert_status(await root.call("GET", "/api/v1/tenants/default/commits"))
    latest = [c for c in history["commits"] if c["operation"] == "rotate token signing key"]
    assert latest and latest[0]["principal"] == "root", history
