"""Ids a client sends inside parameters never cross tenants or catalogs.

Two tenants on one real node, authentication off and on (each tenant then has its own
tenant admin, and each sends its requests to its own tenant's paths): a page token,
an ``?at=`` commit id, a ``ref/reset`` target or an ``Idempotency-Key`` taken from one
tenant (or another catalog) is refused in the other, or means nothing there: 4xx,
nothing written, and the answer is the one an id that never existed gets, so it tells
nothing about the other tenant. Consistency tokens are a cluster's: see
``tests/cluster/test_tenancy.py``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from harness.node import NodeProcess
from metastore.engine.paging import PageToken, encode_token, fingerprint
from metastore.model.keys import Kind, kind_prefix
from tests.native.access_support import ROOT, Admin, Caller, login, secured_env, tenant_path
from tests.native.support import TIMEOUT, Api, Reply, assert_error, assert_status, unique

MADE_UP = "1234567890123456789"  # a commit id no catalog has


@pytest.fixture(scope="module", params=["auth-off", "auth-on"])
def tenancy_node(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[NodeProcess, bool]]:
    """A node with authentication off or on; True iff on."""
    root = tmp_path_factory.mktemp(request.param)
    auth = request.param == "auth-on"
    env = secured_env() if auth else {"METASTORE_AUTH": "off"}
    process = NodeProcess(root / "data", log_path=root / "node.log", env=env)
    with process:
        yield process, auth
    log = process.log_path.read_text(errors="replace")
    assert "Traceback" not in log, f"the node logged an unhandled error:\n{process.log_tail(60)}"


@dataclass(frozen=True)
class Tenant:
    name: str
    caller: Caller  # its tenant admin (auth on), or an anonymous caller (auth off)

    def catalog(self, name: str = "c") -> str:
        return f"{tenant_path(self.name)}/catalogs/{name}"

    def iceberg(self, name: str = "c") -> str:
        return f"/v1/{self.name}~{name}"

    async def head(self, catalog: str = "c") -> str:
        return str((await self.caller.ok("GET", self.catalog(catalog) + "/ref"))["head"])

    async def ref(self, catalog: str = "c") -> Any:
        return await self.caller.ok("GET", self.catalog(catalog) + "/ref")


@dataclass(frozen=True)
class World:
    auth: bool
    a: Tenant
    b: Tenant


@pytest.fixture
async def world(tenancy_node: tuple[NodeProcess, bool]) -> AsyncIterator[World]:
    """Tenants A and B, each with catalogs ``c`` and ``d``, namespaces ``n0``-``n2`` in
    ``c`` and a table ``n0.t0``; with auth on each is driven by its own tenant admin."""
    node, auth = tenancy_node
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        api = Api(session, node.url)
        setup = Admin(api, (await login(api, *ROOT)).token) if auth else Admin(api, None)
        tenants = []
        for _ in range(2):
            name = unique("t")
            await setup.tenant(name)
            props = {"updates": {"team": "data"}}  # a second commit of the tenant's history
            await setup.ok("POST", f"{tenant_path(name)}/properties", props)
            caller: Caller = setup
            if auth:
                caller = await setup.login_as(name, "owner")
                await setup.principal_role(name, "tenant_admin", "owner")
            tenant = Tenant(name, caller)
            for catalog in ("c", "d"):
                await caller.ok("POST", f"{tenant_path(name)}/catalogs", {"name": catalog}, 201)
            for i in range(3):
                body = {"namespace": [f"n{i}"]}
                await caller.ok("POST", tenant.catalog() + "/namespaces", body, 201)
            table = {"name": "t0", "properties": {}}
            await caller.ok("POST", tenant.catalog() + "/namespaces/n0/tables", table, 201)
            tenants.append(tenant)
        yield World(auth, *tenants)


def _message(reply: Reply, *names: str) -> str:
    """The refusal's message with the ids it names blanked (to compare two refusals)."""
    message = str(assert_error(reply, reply.status)["message"])
    for name in names:
        message = message.replace(name, "<id>")
    return message


async def _token(caller: Caller, path: str) -> str:
    page = await caller.ok("GET", path + ("&" if "?" in path else "?") + "pageSize=1")
    token = page["next-page-token"]
    assert token, f"{path} has a single page: {page}"
    return str(token)


# --- page tokens --------------------------------------------------------------------------


async def test_page_tokens_of_another_tenant_or_catalog_are_refused(world: World) -> None:
    a, b = world.a, world.b
    listings = [  # (a listing's path in a tenant, its twin in another catalog of it)
        ("{c}/namespaces", "{d}/namespaces"),
        ("{c}/commits", "{d}/commits"),
        ("{ice}/namespaces", "{iced}/namespaces"),
        ("{t}/catalogs", None),
        ("{t}/commits", None),
    ]

    def path(template: str, tenant: Tenant) -> str:
        return template.format(
            c=tenant.catalog(),
            d=tenant.catalog("d"),
            ice=tenant.iceberg(),
            iced=tenant.iceberg("d"),
            t=tenant_path(tenant.name),
        )

    heads = (await b.head(), await a.head("d"))
    for listing, twin in listings:
        token = await _token(a.caller, path(listing, a))
        mine = await b.caller.call("GET", path(listing, b), params={"pageToken": token})
        error = assert_error(mine, 400, "BadRequestException")
        assert a.name not in error["message"], mine.describe()
        if twin is not None:
            other = await a.caller.call("GET", path(twin, a), params={"pageToken": token})
            assert_error(other, 400, "BadRequestException")
    assert (await b.head(), await a.head("d")) == heads


async def test_a_forged_page_token_names_no_commit_of_another_tenant(world: World) -> None:
    """A token made for B's own listing but naming A's commit: the commit is looked up
    in B's catalog only, so it reads like a commit that never existed."""
    a, b = world.a, world.b
    listing = fingerprint(b.name, "c", kind_prefix((), Kind.NAMESPACE))

    def forged(commit: int) -> str:
        return encode_token(PageToken(commit, b""), listing)

    path = b.catalog() + "/namespaces"
    foreign = await b.caller.call("GET", path, params={"pageToken": forged(int(await a.head()))})
    unknown = await b.caller.call("GET", path, params={"pageToken": forged(int(MADE_UP))})
    assert _message(foreign) == _message(unknown), (foreign.describe(), unknown.describe())
    assert foreign.status == 400
    genuine = await b.caller.call("GET", path, params={"pageToken": forged(int(await b.head()))})
    assert assert_status(genuine)["namespaces"], genuine.describe()  # the format is right


async def test_listing_tenants_shows_and_pages_only_what_the_caller_may_see(world: World) -> None:
    if not world.auth:
        pytest.skip("with auth off every caller sees every tenant")
    b = world.b
    seen: list[str] = []
    token: str | None = None
    while True:
        params: dict[str, str | int] = {"pageSize": 1}
        if token:
            params["pageToken"] = token
        page = assert_status(await b.caller.call("GET", "/api/v1/tenants", params=params))
        seen += [t["name"] for t in page["tenants"]]
        token = page["next-page-token"]
        if token:  # a token carries the last name shown, and only that
            decoded = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
            assert base64.urlsafe_b64decode(decoded["k"]).decode() in seen, decoded
        else:
            break
    assert seen == [b.name]


# --- commit ids -----------------------------------------------------------------------------


async def test_commit_ids_of_another_tenant_or_catalog_are_unknown_here(world: World) -> None:
    a, b = world.a, world.b
    for foreign in (await a.head(), await b.head("d")):  # another tenant's, another catalog's
        for path in (
            b.catalog() + "/namespaces/n0",
            b.catalog() + "/namespaces",
            b.catalog() + "/namespaces/n0/tables",
            b.catalog() + "/namespaces/n0/tables/t0",
        ):
            used = await b.caller.call("GET", path, params={"at": foreign})
            unknown = await b.caller.call("GET", path, params={"at": MADE_UP})
            assert used.status == unknown.status == 404, (used.describe(), unknown.describe())
            assert_error(used, 404, "NoSuchCommitException")
            assert _message(used, foreign) == _message(unknown, MADE_UP)
        commit = await b.caller.call("GET", f"{b.catalog()}/commits/{foreign}")
        unknown = await b.caller.call("GET", f"{b.catalog()}/commits/{MADE_UP}")
        assert_error(commit, 404, "NoSuchCommitException")
        assert _message(commit, foreign) == _message(unknown, MADE_UP)
    own = await b.caller.call("GET", b.catalog() + "/namespaces/n0", params={"at": await b.head()})
    assert_status(own)


async def test_a_ref_reset_to_another_tenants_commit_is_refused(world: World) -> None:
    a, b = world.a, world.b
    await a.caller.ok("POST", a.catalog() + "/namespaces", {"namespace": ["moved"]}, 201)
    before = await b.ref()
    for foreign in [await a.head(), *(await a.ref())["recent-heads"], await b.head("d")]:
        reset = await b.caller.call("POST", b.catalog() + "/ref/reset", {"to": foreign})
        unknown = await b.caller.call("POST", b.catalog() + "/ref/reset", {"to": MADE_UP})
        assert_error(reset, 400, "BadRequestException")
        assert _message(reset, str(foreign)) == _message(unknown, MADE_UP)
    assert await b.ref() == before


# --- idempotency keys -----------------------------------------------------------------------


async def test_an_idempotency_key_belongs_to_its_tenants_catalog(world: World) -> None:
    a, b = world.a, world.b
    key = {"Idempotency-Key": unique("k")}
    body = {"namespace": ["keyed"]}
    first = await a.caller.call("POST", a.catalog() + "/namespaces", body, headers=key)
    created = assert_status(first, 201)
    a_head = await a.head()

    # the same key in B (and in A's other catalog): a request of its own, never A's outcome
    for tenant, catalog in ((b, "c"), (a, "d")):
        path = tenant.catalog(catalog) + "/namespaces"
        mine = assert_status(await tenant.caller.call("POST", path, body, headers=key), 201)
        assert mine["entity-id"] != created["entity-id"], (mine, created)
        again = assert_status(await tenant.caller.call("POST", path, body, headers=key), 201)
        assert again == mine  # its own record replays
    iceberg = {"namespace": ["ice-keyed"]}
    key = {"Idempotency-Key": unique("k")}
    for tenant in (a, b):
        path = tenant.iceberg() + "/namespaces"
        assert_status(await tenant.caller.call("POST", path, iceberg, headers=key))
    assert_status(await b.caller.call("GET", b.catalog() + "/namespaces/ice-keyed"))
    assert await a.head() != a_head  # A's Iceberg namespace
    a_head = await a.head()

    if world.auth:  # B's principal with A's key on A's path: refused, nothing replayed
        stolen = await b.caller.call("POST", a.catalog() + "/namespaces", body, headers=key)
        assert_error(stolen, 403, "ForbiddenException")
    assert await a.head() == a_head
