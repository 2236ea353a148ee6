"""Roles and grants through the native API against a real node with auth on: a grant
applies from the next request and a revoke likewise, refusals are 403 in the Iceberg
error shape and write nothing, listings show only what the caller may see, records
bind to the ids of what they link, and only tenant admins hand out ``tenant_admin``."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

from harness.node import NodeProcess
from tests.native.access_support import ROOT, Admin, login, secured_env, seg, tenant_path
from tests.native.support import TIMEOUT, Api, assert_error, assert_status, unique


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    root = tmp_path_factory.mktemp("grants")
    process = NodeProcess(root / "data", log_path=root / "node.log", env=secured_env())
    with process:
        yield process
    log = process.log_path.read_text(errors="replace")
    assert "Traceback" not in log, f"the node logged an unhandled error:\n{process.log_tail(60)}"


@pytest.fixture
async def api(secured: NodeProcess) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        yield Api(session, secured.url)


@pytest.fixture
async def admin(api: Api) -> Admin:
    caller = await login(api, *ROOT)
    return Admin(api, caller.token, caller.name)


@pytest.fixture
async def tenant(admin: Admin) -> str:
    """A fresh tenant with catalog ``c`` holding namespace ``sales``."""
    name = unique("t")
    await admin.tenant(name)
    await admin.catalog(name, "c")
    await admin.ok(
        "POST", f"{tenant_path(name)}/catalogs/c/namespaces", {"namespace": ["sales"]}, 201
    )
    return name


def catalog(tenant: str) -> str:
    return f"{tenant_path(tenant)}/catalogs/c"


async def head(admin: Admin, tenant: str) -> str:
    return str((await admin.ok("GET", catalog(tenant) + "/ref"))["head"])


async def test_no_grant_is_403_and_writes_nothing(admin: Admin, tenant: str) -> None:
    ana = await admin.login_as(tenant, "ana")
    before = await head(admin, tenant)
    reply = await ana.call("POST", catalog(tenant) + "/namespaces", {"namespace": ["hr"]})
    error = assert_error(reply, 403, "ForbiddenException")
    assert "NAMESPACE_CREATE" in error["message"], error
    assert await head(admin, tenant) == before
    assert_error(await ana.call("GET", catalog(tenant) + "/namespaces"), 403)
    assert_error(await ana.call("GET", f"{catalog(tenant)}/namespaces/{seg('sales')}"), 403)


async def test_a_grant_applies_from_the_next_request_and_a_revoke_too(
    admin: Admin, tenant: str
) -> None:
    ana = await admin.login_as(tenant, "ana")
    await admin.principal_role(tenant, "eng", "ana")
    grant = ("TABLE_CREATE", "namespace", ["sales"])
    await admin.catalog_role(tenant, "c", "makers", [grant], "eng")
    tables = f"{catalog(tenant)}/namespaces/{seg('sales')}/tables"
    assert_status(await ana.call("POST", tables, {"name": "orders"}), 201)
    # the grant is on sales: not on another namespace
    await admin.ok("POST", catalog(tenant) + "/namespaces", {"namespace": ["hr"]}, 201)
    other = f"{catalog(tenant)}/namespaces/{seg('hr')}/tables"
    assert_error(await ana.call("POST", other, {"name": "orders"}), 403)
    revoke = {"privilege": grant[0], "securable": {"kind": grant[1], "path": grant[2]}}
    path = f"{catalog(tenant)}/catalog-roles/makers/grants/revoke"
    assert_status(await admin.call("POST", path, revoke), 204)
    assert_error(await ana.call("POST", tables, {"name": "customers"}), 403)
    # the tenant's history names who granted and revoked what
    history = await admin.ok("GET", f"{tenant_path(tenant)}/commits")
    operations = [(c["principal"], c["operation"]) for c in history["commits"]]
    assert ("root", "revoke TABLE_CREATE") in operations
    assert ("root", "grant TABLE_CREATE") in operations
    assert ("root", "give principal role") in operations


async def test_listings_show_only_what_the_caller_holds_something_on(
    admin: Admin, tenant: str
) -> None:
    sales = f"{catalog(tenant)}/namespaces/{seg('sales')}"
    for name in ("orders", "customers"):
        await admin.ok("POST", f"{sales}/tables", {"name": name}, 201)
    await admin.ok("POST", catalog(tenant) + "/namespaces", {"namespace": ["hr"]}, 201)
    await admin.catalog(tenant, "other")
    ana = await admin.login_as(tenant, "ana")
    await admin.principal_role(tenant, "eng", "ana")
    grant = ("TABLE_READ_DATA", "table", ["sales", "orders"])
    await admin.catalog_role(tenant, "c", "one", [grant], "eng")
    listed = await ana.ok("GET", catalog(tenant) + "/namespaces")
    assert [n["namespace"] for n in listed["namespaces"]] == [["sales"]]
    listed = await ana.ok("GET", f"{sales}/tables")
    assert [t["name"] for t in listed["tables"]] == ["orders"]
    assert (await ana.ok("GET", f"{sales}/tables/orders"))["name"] == "orders"
    assert_error(await ana.call("GET", f"{sales}/tables/customers"), 403)
    catalogs = await ana.ok("GET", f"{tenant_path(tenant)}/catalogs")
    assert [c["name"] for c in catalogs["catalogs"]] == ["c"]
    tenants = await ana.ok("GET", "/api/v1/tenants")
    assert [t["name"] for t in tenants["tenants"]] == [tenant]
    # with TABLE_LIST on the namespace every table shows
    listing = ("TABLE_LIST", "namespace", ["sales"])
    await admin.catalog_role(tenant, "c", "lister", [listing], "eng")
    listed = await ana.ok("GET", f"{sales}/tables")
    assert sorted(t["name"] for t in listed["tables"]) == ["customers", "orders"]


async def test_native_commit_checks_every_change(admin: Admin, tenant: str) -> None:
    ana = await admin.login_as(tenant, "ana")
    await admin.principal_role(tenant, "eng", "ana")
    await admin.catalog_role(
        tenant, "c", "makers", [("TABLE_CREATE", "namespace", ["sales"])], "eng"
    )
    before = await head(admin, tenant)
    body = {
        "changes": [
            {"action": "create", "entity": {"kind": "table", "path": ["sales", "a"]}},
            {"action": "create", "entity": {"kind": "namespace", "path": ["sales", "eu"]}},
        ]
    }
    error = assert_error(await ana.call("POST", catalog(tenant) + "/commit", body), 403)
    assert "NAMESPACE_CREATE" in error["message"]
    assert await head(admin, tenant) == before
    body["changes"] = body["changes"][:1]
    assert_status(await ana.call("POST", catalog(tenant) + "/commit", body), 200)


async def test_tenant_admin_manages_its_tenant_only(admin: Admin, tenant: str) -> None:
    boss = await admin.login_as(tenant, "boss")
    await admin.principal_role(tenant, "tenant_admin", "boss")
    await boss.ok("POST", f"{tenant_path(tenant)}/catalogs", {"name": "c2"}, 201)
    await boss.ok("POST", f"{tenant_path(tenant)}/principal-roles", {"name": "eng"}, 201)
    assert_error(await boss.call("GET", f"{tenant_path('default')}/catalogs/default"), 403)
    assert_error(await boss.call("POST", "/api/v1/tenants", {"name": unique("t")}), 403)
    # a principal managing access may not hand out tenant_admin; the tenant admin may
    ana = await admin.login_as(tenant, "ana")
    await boss.ok(
        "POST", f"{tenant_path(tenant)}/principal-roles/eng/principals", {"principal": "ana"}, 201
    )
    await boss.ok(
        "POST",
        f"{tenant_path(tenant)}/principal-roles/eng/grants",
        {"privilege": "TENANT_MANAGE_ACCESS"},
        201,
    )
    await admin.principal(tenant, "eve")
    give = {"principal": "eve"}
    members = f"{tenant_path(tenant)}/principal-roles/tenant_admin/principals"
    assert_error(await ana.call("POST", members, give), 403)
    assert_status(await boss.call("POST", members, give), 201)


async def test_a_principal_created_again_gets_none_of_the_old_roles(
    admin: Admin, tenant: str
) -> None:
    ana = await admin.login_as(tenant, "ana")
    await admin.principal_role(tenant, "eng", "ana")
    await admin.catalog_role(
        tenant, "c", "readers", [("NAMESPACE_READ_PROPERTIES", "catalog", [])], "eng"
    )
    sales = f"{catalog(tenant)}/namespaces/{seg('sales')}"
    assert_status(await ana.call("GET", sales), 200)
    await admin.ok("DELETE", f"{tenant_path(tenant)}/principals/ana", None, 204)
    again = await admin.login_as(tenant, "ana")
    assert_error(await again.call("GET", sales), 403)
    members = await admin.ok("GET", f"{tenant_path(tenant)}/principal-roles/eng/principals")
    assert members["principals"] == []


async def test_a_catalog_created_again_gets_none_of_the_old_catalog_roles(
    admin: Admin, tenant: str
) -> None:
    ana = await admin.login_as(tenant, "ana")
    await admin.principal_role(tenant, "eng", "ana")
    await admin.catalog(tenant, "c2")
    await admin.catalog_role(
        tenant, "c2", "readers", [("CATALOG_READ_PROPERTIES", "catalog", [])], "eng"
    )
    path = f"{tenant_path(tenant)}/catalogs/c2"
    assert_status(await ana.call("GET", path), 200)
    await admin.ok("DELETE", path, None, 204)
    await admin.catalog(tenant, "c2")
    assert_error(await ana.call("GET", path), 403)
    roles = await admin.ok("GET", path + "/catalog-roles")
    assert roles["catalog-roles"] == []
    # creating the role again replaces the old one and its links
    await admin.ok("POST", path + "/catalog-roles", {"name": "readers"}, 201)
    assert (await admin.ok("GET", path + "/catalog-roles/readers/grants"))["grants"] == []
    assert_error(await ana.call("GET", path), 403)


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"privilege": "TABLE_EAT", "securable": {"kind": "catalog"}}, "no such privilege"),
        ({"privilege": "TENANT_CREATE", "securable": {"kind": "catalog"}}, "service admins"),
        (
            {"privilege": "TABLE_READ_DATA", "securable": {"kind": "view", "path": ["s", "v"]}},
            "cannot be granted on a view",
        ),
        ({"privilege": "TABLE_READ_DATA", "securable": {"kind": "tenant"}}, "not on the tenant"),
        (
            {"privilege": "TABLE_READ_DATA", "securable": {"kind": "table", "path": ["t"]}},
            "namespace and a name",
        ),
        ({"privilege": "TABLE_READ_DATA"}, "names its securable"),
        (
            {"privilege": "TABLE_READ_DATA", "securable": {"kind": "table"}, "x": 1},
            "invalid request",
        ),
    ],
)
async def test_bad_grants_are_400_and_write_nothing(
    admin: Admin, tenant: str, body: dict[str, object], fragment: str
) -> None:
    await admin.ok("POST", f"{catalog(tenant)}/catalog-roles", {"name": "r"}, 201)
    before = await admin.system_head(tenant)
    reply = await admin.call("POST", f"{catalog(tenant)}/catalog-roles/r/grants", body)
    error = assert_error(reply, 400)
    assert fragment in error["message"], error
    assert await admin.system_head(tenant) == before


async def test_missing_roles_grants_and_duplicates(admin: Admin, tenant: str) -> None:
    roles = f"{tenant_path(tenant)}/principal-roles"
    assert_error(await admin.call("GET", f"{roles}/nope"), 404, "NoSuchRoleException")
    assert_error(await admin.call("POST", roles, {"name": "tenant_admin"}), 409)
    await admin.ok("POST", roles, {"name": "eng"}, 201)
    assert_error(await admin.call("POST", roles, {"name": "eng"}), 409)
    assert_error(await admin.call("POST", f"{roles}/eng/principals", {"principal": "nobody"}), 404)
    revoke = {"privilege": "CATALOG_CREATE"}
    assert_error(
        await admin.call("POST", f"{roles}/eng/grants/revoke", revoke), 404, "NoSuchGrantException"
    )
    bad = {"name": "eng", "properties": {"metastore.catalog-id": "1"}}
    assert_error(await admin.call("POST", f"{catalog(tenant)}/catalog-roles", bad), 400)
    assert_error(await admin.call("DELETE", f"{roles}/tenant_admin"), 400)
    # granting twice is one grant
    await admin.ok("POST", f"{roles}/eng/grants", revoke, 201)
    await admin.ok("POST", f"{roles}/eng/grants", revoke, 200)
    assert len((await admin.ok("GET", f"{roles}/eng/grants"))["grants"]) == 1


async def test_a_retried_grant_with_an_idempotency_key_writes_once(
    admin: Admin, tenant: str
) -> None:
    roles = f"{tenant_path(tenant)}/principal-roles"
    key = {"Idempotency-Key": unique("k")}
    first = await admin.call("POST", roles, {"name": "eng"}, headers=key)
    again = await admin.call("POST", roles, {"name": "eng"}, headers=key)
    assert assert_status(first, 201)["name"] == assert_status(again, 201)["name"] == "eng"


async def test_deleting_a_role_takes_every_privilege_it_gave(admin: Admin, tenant: str) -> None:
    ana = await admin.login_as(tenant, "ana")
    await admin.principal_role(tenant, "eng", "ana")
    await admin.tenant_grant(tenant, "eng", "CATALOG_LIST")
    await admin.catalog_role(
        tenant, "c", "readers", [("NAMESPACE_READ_PROPERTIES", "catalog", [])], "eng"
    )
    sales = f"{catalog(tenant)}/namespaces/{seg('sales')}"
    assert_status(await ana.call("GET", sales), 200)
    await admin.ok("DELETE", f"{tenant_path(tenant)}/principal-roles/eng", None, 204)
    assert_error(await ana.call("GET", sales), 403)
    await admin.ok("POST", f"{tenant_path(tenant)}/principal-roles", {"name": "eng"}, 201)
    assert_error(await ana.call("GET", sales), 403)
    assert (await ana.ok("GET", f"{tenant_path(tenant)}/catalogs"))["catalogs"] == []


async def test_callers_see_their_own_roles_and_record(admin: Admin, tenant: str) -> None:
    ana = await admin.login_as(tenant, "ana")
    await admin.principal_role(tenant, "eng", "ana")
    await admin.principal_role(tenant, "ops")
    roles = await ana.ok("GET", f"{tenant_path(tenant)}/principal-roles")
    assert [r["name"] for r in roles["principal-roles"]] == ["eng"]
    assert_status(await ana.call("GET", f"{tenant_path(tenant)}/principal-roles/eng"), 200)
    assert_error(await ana.call("GET", f"{tenant_path(tenant)}/principal-roles/ops"), 403)
    principals = await ana.ok("GET", f"{tenant_path(tenant)}/principals")
    assert [p["name"] for p in principals["principals"]] == ["ana"]
    assert_status(await ana.call("GET", f"{tenant_path(tenant)}/principals/ana"), 200)
    await admin.principal(tenant, "bo")
    assert_error(await ana.call("GET", f"{tenant_path(tenant)}/principals/bo"), 403)


def token_names(token: str) -> bytes:
    """What a page token carries (base64 JSON whose "k" is the base64 of the last key)."""
    payload = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    return base64.urlsafe_b64decode(payload["k"])


async def test_page_tokens_carry_only_names_the_caller_was_shown(admin: Admin, tenant: str) -> None:
    sales = f"{catalog(tenant)}/namespaces/{seg('sales')}"
    names = ["a-shown", "b-hidden", "c-hidden", "d-shown", "e-hidden"]
    for name in names:
        await admin.ok("POST", f"{sales}/tables", {"name": name}, 201)
    ana = await admin.login_as(tenant, "ana")
    await admin.principal_role(tenant, "eng", "ana")
    grants = [("TABLE_READ_DATA", "table", ["sales", n]) for n in names if "shown" in n]
    await admin.catalog_role(tenant, "c", "some", grants, "eng")
    for path, key in (
        (f"{sales}/tables", "tables"),
        (f"/v1/{tenant}~c/namespaces/sales/tables", "identifiers"),
    ):
        seen: list[str] = []
        token: str | None = None
        while True:
            params: dict[str, str | int] = {"pageSize": 1} | ({"pageToken": token} if token else {})
            page = assert_status(await ana.call("GET", path, params=params), 200)
            seen += [item["name"] for item in page[key]]
            token = page["next-page-token"]
            if not token:
                break
            assert b"hidden" not in token_names(token), token_names(token)
        assert seen == ["a-shown", "d-shown"]


async def test_a_principal_pages_through_its_own_record_only(admin: Admin, tenant: str) -> None:
    for name in ("a-hidden", "c-hidden"):
        await admin.principal(tenant, name)
    ana = await admin.login_as(tenant, "b-ana")
    page = await ana.ok("GET", f"{tenant_path(tenant)}/principals?pageSize=1")
    assert [p["name"] for p in page["principals"]] == ["b-ana"]
    assert page["next-page-token"] is None  # nothing more it may see: no token naming one


async def test_only_a_service_admin_names_storage_on_an_unbounded_node(
    admin: Admin, tenant: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A catalog's storage decides what the server reads, writes and purges: without
    METASTORE_STORAGE_ROOTS a tenant admin may create catalogs, but only on the
    node's seeded storage."""
    boss = await admin.login_as(tenant, "boss")
    await admin.principal_role(tenant, "tenant_admin", "boss")
    elsewhere = tmp_path_factory.mktemp("elsewhere").resolve().as_uri()
    named = {"name": "mine", "storage": {"root": elsewhere}}
    catalogs = f"{tenant_path(tenant)}/catalogs"
    assert_error(await boss.call("POST", catalogs, named), 403, "ForbiddenException")
    assert_error(await boss.call("GET", f"{catalogs}/mine"), 404)  # nothing written
    storage = (await boss.ok("POST", catalogs, {"name": "seeded"}, 201))["storage"]
    del storage["version"]
    update = {"storage": {**storage, "root": elsewhere, "allowed-locations": [elsewhere]}}
    before = await boss.ok("GET", f"{catalogs}/seeded")
    assert_error(await boss.call("POST", f"{catalogs}/seeded/storage", update), 403)
    assert await boss.ok("GET", f"{catalogs}/seeded") == before
    await admin.ok("POST", catalogs, {**named, "name": "by-admin"}, 201)


async def test_a_diff_shows_an_iceberg_summary_only_to_who_may_load_the_table(
    admin: Admin, tenant: str
) -> None:
    """A table's summary in a diff names its metadata file, schema and snapshot: what a
    load shows (``TABLE_READ_DATA``), not what its properties show."""
    iceberg = f"/v1/{tenant}~c/namespaces/sales/tables"
    schema = {
        "type": "struct",
        "fields": [{"id": 1, "name": "x", "type": "long", "required": False}],
    }
    await admin.ok("POST", iceberg, {"name": "s", "schema": schema, "properties": {"pii": "yes"}})
    commit = await head(admin, tenant)
    ana = await admin.login_as(tenant, "ana")
    await admin.principal_role(tenant, "audit", "ana")
    grants = [
        ("CATALOG_READ_HISTORY", "catalog", []),
        ("TABLE_READ_PROPERTIES", "table", ["sales", "s"]),
    ]
    await admin.catalog_role(tenant, "c", "auditors", grants, "audit")
    assert_error(await ana.call("GET", f"{iceberg}/s"), 403)
    diff = await ana.ok("GET", f"{catalog(tenant)}/commits/{commit}/diff")
    (change,) = [c for c in diff["changes"] if c["kind"] == "table"]
    assert change["after"]["properties"]["pii"] == "yes", change
    assert "iceberg" not in change["after"], change
    await admin.catalog_role(
        tenant, "c", "loaders", [("TABLE_READ_DATA", "table", ["sales", "s"])], "audit"
    )
    diff = await ana.ok("GET", f"{catalog(tenant)}/commits/{commit}/diff")
    (change,) = [c for c in diff["changes"] if c["kind"] == "table"]
    assert change["after"]["iceberg"]["metadata-location"].endswith(".metadata.json"), change


async def test_a_listing_shows_properties_only_where_a_read_of_them_would(
    admin: Admin, tenant: str
) -> None:
    """LIST (or holding something below) shows an item; its properties and location need
    what a read of them needs, item by item."""
    sales = f"{catalog(tenant)}/namespaces/{seg('sales')}"
    await admin.ok(
        "POST", f"{tenant_path(tenant)}/catalogs/c/properties", {"updates": {"billing": "x"}}
    )
    for name in ("open", "secret"):
        await admin.ok("POST", f"{sales}/tables", {"name": name, "properties": {"pii": name}}, 201)
    ana = await admin.login_as(tenant, "ana")
    await admin.principal_role(tenant, "eng", "ana")
    grants = [("TABLE_LIST", "catalog", []), ("NAMESPACE_LIST", "catalog", [])]
    await admin.catalog_role(tenant, "c", "listers", grants, "eng")
    listed = await ana.ok("GET", f"{sales}/tables")
    assert [t["name"] for t in listed["tables"]] == ["open", "secret"]
    assert all("properties" not in t and "location" not in t for t in listed["tables"]), listed
    namespaces = await ana.ok("GET", catalog(tenant) + "/namespaces")
    assert all("properties" not in n for n in namespaces["namespaces"]), namespaces
    (listed_catalog,) = (await ana.ok("GET", f"{tenant_path(tenant)}/catalogs"))["catalogs"]
    assert "properties" not in listed_catalog, listed_catalog
    (listed_tenant,) = (await ana.ok("GET", "/api/v1/tenants"))["tenants"]
    assert "properties" not in listed_tenant, listed_tenant
    read = [("TABLE_READ_PROPERTIES", "table", ["sales", "open"])]
    await admin.catalog_role(tenant, "c", "readers", read, "eng")
    listed = await ana.ok("GET", f"{sales}/tables")
    shown = {t["name"]: t.get("properties") for t in listed["tables"]}
    assert shown == {"open": {"pii": "open"}, "secret": None}, listed
    assert (await admin.ok("GET", f"{sales}/tables"))["tables"][1]["properties"] == {
        "pii": "secret"
    }


async def test_taking_a_dropped_tables_location_needs_its_read_privilege(
    admin: Admin, tenant: str
) -> None:
    """A create answers credentials for its location and a register the metadata it
    names: at a dropped table's location, one who may create in its namespace but may
    not read it would get its files."""
    iceberg = f"/v1/{tenant}~c/namespaces/sales/tables"
    schema = {
        "type": "struct",
        "fields": [{"id": 1, "name": "x", "type": "long", "required": False}],
    }
    created = await admin.ok("POST", iceberg, {"name": "s", "schema": schema})
    location, metadata_location = created["metadata"]["location"], created["metadata-location"]
    assert_status(await admin.call("DELETE", f"{iceberg}/s"), 204)  # kept for undrop
    ana = await admin.login_as(tenant, "ana")
    await admin.principal_role(tenant, "eng", "ana")
    await admin.catalog_role(
        tenant, "c", "makers", [("TABLE_CREATE", "namespace", ["sales"])], "eng"
    )
    register = f"/v1/{tenant}~c/namespaces/sales/register"
    # a create is also a commit asserting that the table does not exist yet (what a
    # staged create ends with, and what a client may send without staging first), of one
    # table or in a transaction; ana may read the table she would make, not the dropped one
    own = [(p, "table", ["sales", "grab"]) for p in ("TABLE_READ_DATA", "TABLE_WRITE_DATA")]
    await admin.catalog_role(tenant, "c", "own", own, "eng")
    created_by_commit = {"requirements": [{"type": "assert-create"}], "updates": _create(location)}
    transaction = {
        "table-changes": [
            {"identifier": {"namespace": ["sales"], "name": "grab"}, **created_by_commit}
        ]
    }
    for method, path, body in (
        ("POST", iceberg, {"name": "grab", "schema": schema, "location": location}),
        (
            "POST",
            iceberg,
            {"name": "grab", "schema": schema, "location": location, "stage-create": True},
        ),
        ("POST", register, {"name": "grab", "metadata-location": metadata_location}),
        ("POST", f"{iceberg}/grab", created_by_commit),
        ("POST", f"/v1/{tenant}~c/transactions/commit", transaction),
    ):
        error = assert_error(await ana.call(method, path, body), 403, "ForbiddenException")
        assert "TABLE_READ_DATA" in error["message"] and "sales.s" in error["message"], error
    # the native API's creates: a native table dropped at the location would become its
    # holder, which an Iceberg create or register then asked about instead of the owner
    native = f"{catalog(tenant)}/namespaces/sales/tables"
    atomic = {
        "changes": [
            {
                "action": "create",
                "entity": {"kind": "table", "path": ["sales", "grab"]},
                "location": location,
            }
        ]
    }
    for path, body in (
        (native, {"name": "grab", "location": location}),
        (f"{catalog(tenant)}/commit", atomic),
    ):
        error = assert_error(await ana.call("POST", path, body), 403, "ForbiddenException")
        assert "TABLE_READ_DATA" in error["message"] and "sales.s" in error["message"], error
    assert_status(await admin.call("GET", f"{iceberg}/grab"), 404)  # none of them wrote it
    assert_status(await admin.call("GET", f"{native}/grab"), 404)
    # a dropped table that took the location (here the admin's, who may read everything)
    # is asked about, and so is every kept one that yielded the location to it
    await admin.ok("POST", native, {"name": "decoy", "location": location}, 201)
    assert_status(await admin.call("DELETE", f"{native}/decoy"), 204)  # kept, holds it now
    await admin.catalog_role(
        tenant, "c", "decoys", [("TABLE_READ_DATA", "table", ["sales", "decoy"])], "eng"
    )
    grab = {"name": "grab", "schema": schema, "location": location}
    error = assert_error(await ana.call("POST", iceberg, grab), 403, "ForbiddenException")
    assert "TABLE_READ_DATA" in error["message"] and "sales.s" in error["message"], error
    elsewhere = {"requirements": [{"type": "assert-create"}], "updates": _create(location + "x")}
    assert_status(await ana.call("POST", f"{iceberg}/grab", elsewhere))  # not the kept one
    # nor may her own table move there
    move = {"updates": [{"action": "set-location", "location": location}]}
    error = assert_error(await ana.call("POST", f"{iceberg}/grab", move), 403, "ForbiddenException")
    assert "TABLE_READ_DATA" in error["message"] and "sales.s" in error["message"], error
    kept = await admin.ok("GET", f"{iceberg}/grab")
    assert kept["metadata"]["location"] == location + "x"
    assert_status(await admin.call("DELETE", f"{iceberg}/grab?purgeRequested=true"), 204)
    reader = [("TABLE_READ_DATA", "table", ["sales", "s"])]
    await admin.catalog_role(tenant, "c", "readers", reader, "eng")
    assert_status(await ana.call("POST", f"{iceberg}/grab", created_by_commit))
    taken = await admin.ok("GET", f"{iceberg}/grab")
    assert taken["metadata"]["location"] == location


async def test_a_commit_cannot_hand_a_kept_location_back_and_take_it(
    admin: Admin, tenant: str
) -> None:
    """A location a dropped table yielded goes back to it when the table that took it
    lets it go: a commit that lets it go and takes it again in a later change is asked
    about the dropped table on the state it builds, not only on the HEAD before it."""
    iceberg = f"/v1/{tenant}~c/namespaces/sales/tables"
    native = f"{catalog(tenant)}/namespaces/sales/tables"
    schema = {
        "type": "struct",
        "fields": [{"id": 1, "name": "x", "type": "long", "required": False}],
    }
    kept = await admin.ok("POST", iceberg, {"name": "k", "schema": schema})
    location = kept["metadata"]["location"]
    assert_status(await admin.call("DELETE", f"{iceberg}/k"), 204)  # kept for undrop
    await admin.ok("POST", native, {"name": "t", "location": location}, 201)  # yielded to t
    await admin.ok("POST", iceberg, {"name": "u", "schema": schema, "location": location + "u"})
    ana = await admin.login_as(tenant, "ana")
    await admin.principal_role(tenant, "eng", "ana")
    grants = [("TABLE_CREATE", "namespace", ["sales"])]
    grants += [(p, "table", ["sales", n]) for n in ("t", "u", "grab") for p in (
        "TABLE_DROP", "TABLE_READ_DATA", "TABLE_WRITE_DATA", "TABLE_WRITE_PROPERTIES")]  # fmt: skip
    await admin.catalog_role(tenant, "c", "makers", grants, "eng")
    grab = {"action": "create", "entity": {"kind": "table", "path": ["sales", "grab"]}}
    # a delete leaves the table's files and frees its location: it needs their read
    # privilege, which ana holds on t (and the commit is then asked about k, below)
    doomed = await admin.ok("POST", iceberg, {"name": "doomed", "schema": schema})
    await admin.catalog_role(
        tenant, "c", "doomers", [("TABLE_DROP", "table", ["sales", "doomed"])], "eng"
    )
    delete = {"action": "delete", "entity": {"kind": "table", "path": ["sales", "doomed"]}}
    reply = await ana.call("POST", f"{catalog(tenant)}/commit", {"changes": [delete]})
    error = assert_error(reply, 403, "ForbiddenException")
    assert "TABLE_READ_DATA" in error["message"] and "doomed" in error["message"], error
    assert (await admin.ok("GET", f"{iceberg}/doomed"))["metadata"] == doomed["metadata"]
    for first in (
        {"action": "delete", "entity": {"kind": "table", "path": ["sales", "t"]}},
        {
            "action": "update",
            "entity": {"kind": "table", "path": ["sales", "t"]},
            "location": location + "-moved",
        },
    ):
        body = {"changes": [first, {**grab, "location": location}]}
        reply = await ana.call("POST", f"{catalog(tenant)}/commit", body)
        error = assert_error(reply, 403, "ForbiddenException")
        assert "TABLE_READ_DATA" in error["message"] and "sales.k" in error["message"], error
    # an Iceberg transaction: a table that took a kept location moved away, and a new
    # one made there
    other = await admin.ok("POST", iceberg, {"name": "k2", "schema": schema})
    location = other["metadata"]["location"]
    assert_status(await admin.call("DELETE", f"{iceberg}/k2"), 204)
    move = [{"action": "set-location", "location": location}]
    assert_status(await admin.call("POST", f"{iceberg}/u", {"updates": move}))  # yielded to u
    away = {"identifier": {"namespace": ["sales"], "name": "u"}, "updates": [
        {"action": "set-location", "location": location + "u"}]}  # fmt: skip
    make = {
        "identifier": {"namespace": ["sales"], "name": "grab"},
        "requirements": [{"type": "assert-create"}],
        "updates": _create(location, str(uuid.uuid4())),
    }
    reply = await ana.call(
        "POST", f"/v1/{tenant}~c/transactions/commit", {"table-changes": [away, make]}
    )
    error = assert_error(reply, 403, "ForbiddenException")
    assert "TABLE_READ_DATA" in error["message"] and "sales.k2" in error["message"], error
    assert (await admin.ok("GET", f"{iceberg}/u"))["metadata"]["location"] == location
    assert_status(await admin.call("GET", f"{iceberg}/grab"), 404)


async def test_a_commit_that_makes_a_table_needs_the_create_privilege(
    admin: Admin, tenant: str
) -> None:
    """A commit asserting that its table is new makes it, alone or in a transaction: it
    needs ``TABLE_CREATE`` in the namespace as a create does, not only the right to write
    the table it makes."""
    iceberg = f"/v1/{tenant}~c/namespaces/sales/tables"
    schema = {
        "type": "struct",
        "fields": [{"id": 1, "name": "x", "type": "long", "required": False}],
    }
    probe = await admin.ok("POST", iceberg, {"name": "probe", "schema": schema})
    folder = probe["metadata"]["location"].rsplit("/", 1)[0]  # the namespace's folder
    wanda = await admin.login_as(tenant, "wanda")
    await admin.principal_role(tenant, "writers", "wanda")
    writes = [("TABLE_WRITE_DATA", "namespace", ["sales"])]
    await admin.catalog_role(tenant, "c", "writes", writes, "writers")

    def making(name: str) -> dict[str, Any]:
        updates = _create(f"{folder}/{name}", str(uuid.uuid4()))
        return {"requirements": [{"type": "assert-create"}], "updates": updates}

    def transaction(*names: str) -> dict[str, Any]:
        changes = [{"identifier": {"namespace": ["sales"], "name": n}, **making(n)} for n in names]
        return {"table-changes": changes}

    commit = f"/v1/{tenant}~c/transactions/commit"
    for path, body in ((f"{iceberg}/a", making("a")), (commit, transaction("b0", "b1"))):
        error = assert_error(await wanda.call("POST", path, body), 403, "ForbiddenException")
        assert "TABLE_CREATE" in error["message"], error
    listed = await admin.ok("GET", iceberg)
    assert [i["name"] for i in listed["identifiers"]] == ["probe"]  # nothing was made
    creates = [("TABLE_CREATE", "namespace", ["sales"])]
    await admin.catalog_role(tenant, "c", "creates", creates, "writers")
    assert_status(await wanda.call("POST", f"{iceberg}/a", making("a")))
    assert_status(await wanda.call("POST", commit, transaction("b0", "b1")), 204)
    names = sorted(i["name"] for i in (await admin.ok("GET", iceberg))["identifiers"])
    assert names == ["a", "b0", "b1", "probe"]


def _create(
    location: str, uuid: str = "9c12d441-03fe-4693-9a96-a0705ddf69c1"
) -> list[dict[str, Any]]:
    """The updates that make a new table at ``location`` in a commit (as PyIceberg's
    staged create sends them)."""
    schema = {
        "type": "struct",
        "schema-id": 0,
        "fields": [{"id": 1, "name": "x", "type": "long", "required": False}],
    }
    return [
        {"action": "assign-uuid", "uuid": uuid},
        {"action": "upgrade-format-version", "format-version": 2},
        {"action": "add-schema", "schema": schema},
        {"action": "set-current-schema", "schema-id": -1},
        {"action": "add-spec", "spec": {"spec-id": 0, "fields": []}},
        {"action": "set-default-spec", "spec-id": -1},
        {"action": "add-sort-order", "sort-order": {"order-id": 0, "fields": []}},
        {"action": "set-default-sort-order", "sort-order-id": -1},
        {"action": "set-location", "location": location},
    ]


async def _snapshot(admin: Admin, tenant: str, table: str, snapshot_id: int) -> None:
    """An append of no files to an Iceberg table (its manifest list is never read)."""
    path = f"/v1/{tenant}~c/namespaces/sales/tables/{table}"
    location = (await admin.ok("GET", path))["metadata"]["location"]
    snapshot = {
        "snapshot-id": snapshot_id,
        "sequence-number": 1,
        "timestamp-ms": 1_700_000_000_000,
        "manifest-list": f"{location}/metadata/snap-{snapshot_id}.avro",
        "summary": {"operation": "append"},
        "schema-id": 0,
    }
    updates = [
        {"action": "add-snapshot", "snapshot": snapshot},
        {
            "action": "set-snapshot-ref",
            "ref-name": "main",
            "type": "branch",
            "snapshot-id": snapshot_id,
        },
    ]
    await admin.ok("POST", path, {"updates": updates})


async def test_the_feed_shows_a_snapshot_only_to_who_may_load_the_table(
    admin: Admin, tenant: str
) -> None:
    """A table's event names its new snapshot and its operation, what a load shows: a
    caller that may only list the table sees that it changed, not the snapshot."""
    schema = {
        "type": "struct",
        "fields": [{"id": 1, "name": "x", "type": "long", "required": False}],
    }
    await admin.ok(
        "POST", f"/v1/{tenant}~c/namespaces/sales/tables", {"name": "payroll", "schema": schema}
    )
    await _snapshot(admin, tenant, "payroll", 4242)
    ana = await admin.login_as(tenant, "ana")
    await admin.principal_role(tenant, "eng", "ana")
    listing = [("TABLE_LIST", "catalog", []), ("NAMESPACE_LIST", "catalog", [])]
    await admin.catalog_role(tenant, "c", "listers", listing, "eng")

    async def snapshots() -> list[Any]:
        page = await ana.ok("GET", f"{catalog(tenant)}/events?limit=100")
        tables = [e for e in page["events"] if e["kind"] == "table"]
        assert tables, page
        return [e.get("snapshot-id") for e in tables]

    assert set(await snapshots()) == {None}
    read = [("TABLE_READ_DATA", "table", ["sales", "payroll"])]
    await admin.catalog_role(tenant, "c", "readers", read, "eng")
    assert 4242 in await snapshots()


async def test_a_stream_ends_when_its_caller_may_no_longer_read_the_feed(
    api: Api, admin: Admin, tenant: str
) -> None:
    """An open stream went on announcing each commit's position (its sequence and
    timing) after every grant was revoked: now the next commit ends it with a 403."""
    ana = await admin.login_as(tenant, "ana")
    await admin.principal_role(tenant, "eng", "ana")
    listing = [("TABLE_LIST", "catalog", []), ("NAMESPACE_LIST", "catalog", [])]
    await admin.catalog_role(tenant, "c", "listers", listing, "eng")
    url = f"{api.base_url}{catalog(tenant)}/events"
    headers = {"Accept": "text/event-stream", "Authorization": f"Bearer {ana.token}"}
    timeout = aiohttp.ClientTimeout(total=60)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(url, headers=headers) as response,
    ):
        assert response.status == 200, await response.text()
        await response.content.readline()  # the stream is open
        member = f"{tenant_path(tenant)}/principal-roles/eng/principals/ana"
        assert_status(await admin.call("DELETE", member), 204)
        namespaces = f"{catalog(tenant)}/namespaces"
        await admin.ok("POST", namespaces, {"namespace": ["after"]}, 201)
        rest = (await response.content.read()).decode()
    assert '"code":403' in rest, rest
    assert '"namespace":["after"]' not in rest and '"name":["after"]' not in rest, rest
