"""Per-tenant quotas on a real node: request rate and entity counts, 429
``TooManyRequestsException`` with ``Retry-After`` and nothing written; only service
admins set a tenant's ``quota.*`` properties.

Rates are set so low (0.001 requests a second) that no token comes back while a test
runs, so no assertion depends on how fast the machine is.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest

from harness.node import NodeProcess
from tests.native.access_support import ROOT, Admin, Caller, login, secured_env, tenant_path
from tests.native.support import TIMEOUT, Api, Reply, assert_error, unique

SLOW = {"quota.requests-per-second": "0.001", "quota.burst": "3"}


def _node(root: Path, env: dict[str, str]) -> Iterator[NodeProcess]:
    process = NodeProcess(root / "data", log_path=root / "node.log", env=env)
    with process:
        yield process
    log = process.log_path.read_text(errors="replace")
    assert "Traceback" not in log, f"the node logged an unhandled error:\n{process.log_tail(60)}"


@pytest.fixture(scope="module")
def open_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """Authentication off; the node's defaults allow every tenant one view."""
    env = {"METASTORE_AUTH": "off", "METASTORE_QUOTA_MAX_VIEWS": "1"}
    yield from _node(tmp_path_factory.mktemp("quotas-open"), env)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    yield from _node(tmp_path_factory.mktemp("quotas-secured"), secured_env())


@pytest.fixture
async def api(open_node: NodeProcess) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        yield Api(session, open_node.url)


@pytest.fixture
async def secured_api(secured: NodeProcess) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        yield Api(session, secured.url)


async def new_tenant(api: Api, properties: dict[str, str] | None = None) -> str:
    """A tenant with catalogs ``c`` and ``d``, each holding namespace ``db``."""
    tenant = unique("t")
    await api.create_tenant(tenant, properties)
    for catalog in ("c", "d"):
        created = await api.create_catalog(tenant, catalog)
        await created.create_namespace("db")
    return tenant


def _retry_after(reply: Reply) -> int:
    assert_error(reply, 429, "TooManyRequestsException")
    seconds = reply.headers.get("Retry-After", "")
    assert seconds.isdigit() and int(seconds) >= 1, reply.headers
    return int(seconds)


def catalog(tenant: str, name: str = "c") -> str:
    return f"{tenant_path(tenant)}/catalogs/{name}"


# --- entity counts ------------------------------------------------------------------------


async def test_a_tenant_over_its_table_quota_gets_429_and_nothing_is_written(
    api: Api, open_node: NodeProcess
) -> None:
    tenant = await new_tenant(api, {"quota.max-tables": "2"})
    c, d = catalog(tenant), catalog(tenant, "d")
    await api.ok("POST", f"{c}/namespaces/db/tables", {"name": "a"}, 201)
    iceberg = f"/v1/{tenant}~d/namespaces/db/tables"  # the Iceberg API counts alike
    await api.ok("POST", iceberg, {"name": "b", "schema": {"type": "struct", "fields": []}})
    heads = [(await api.ok("GET", f"{x}/ref"))["head"] for x in (c, d)]
    for path, body in (
        (f"{c}/namespaces/db/tables", {"name": "x"}),
        (iceberg, {"name": "x", "schema": {"type": "struct", "fields": []}}),
        (f"{c}/commit", {"changes": [{"action": "create", "entity": _table("db", "x")}]}),
    ):
        refused = await api.call("POST", path, json_body=body)
        assert _retry_after(refused) == 60, refused.describe()
        assert "quota.max-tables" in refused.body["error"]["message"]
    assert [(await api.ok("GET", f"{x}/ref"))["head"] for x in (c, d)] == heads
    assert_error(await api.get(f"{c}/namespaces/db/tables/x"), 404)
    assert_error(await api.get(f"{d}/namespaces/db/tables/x"), 404)
    tables = open_node.data_dir / "warehouse" / tenant / "d" / "db"
    refused_files = [p for p in (tables / "x").rglob("*") if p.is_file()]
    assert refused_files == [], refused_files  # the refused create's metadata file is gone
    # views are not tables; a rename is no creation; a drop makes room
    await api.ok("POST", f"{c}/namespaces/db/views", {"name": "v"}, 201)
    rename = {"source": _table("db", "a"), "destination": _table("db", "a2")}
    await api.ok("POST", f"{c}/rename", rename, 204)
    await api.ok("DELETE", f"/v1/{tenant}~d/namespaces/db/tables/b", status=204)
    await api.ok("POST", f"{c}/namespaces/db/tables", {"name": "x"}, 201)


async def test_a_reset_that_brings_back_tables_past_the_quota_gets_429(api: Api) -> None:
    """A reset moves HEAD back, and the tables it held come back: in each catalog in turn,
    a tenant could fill its quota, drop everything and reset, holding catalogs x quota."""
    tenant = await new_tenant(api, {"quota.max-tables": "2"})
    c, d = catalog(tenant), catalog(tenant, "d")
    for name in ("a", "b"):
        await api.ok("POST", f"{c}/namespaces/db/tables", {"name": name}, 201)
    full = (await api.ok("GET", f"{c}/ref"))["head"]
    for name in ("a", "b"):
        await api.ok("DELETE", f"{c}/namespaces/db/tables/{name}", status=204)
    await api.ok("POST", f"{d}/namespaces/db/tables", {"name": "x"}, 201)
    emptied = (await api.ok("GET", f"{c}/ref"))["head"]
    refused = await api.call("POST", f"{c}/ref/reset", json_body={"to": full})
    _retry_after(refused)
    assert "quota.max-tables" in refused.body["error"]["message"]
    assert (await api.ok("GET", f"{c}/ref"))["head"] == emptied  # nothing written
    assert_error(await api.get(f"{c}/namespaces/db/tables/a"), 404)
    await api.ok("DELETE", f"{d}/namespaces/db/tables/x", status=204)
    reset = await api.ok("POST", f"{c}/ref/reset", {"to": full})  # room again: a reset as ever
    assert reset["head"] == full
    await api.ok("GET", f"{c}/namespaces/db/tables/a")


def _table(*path: str) -> dict[str, object]:
    return {"kind": "table", "path": list(path)}


async def test_node_defaults_apply_until_a_tenant_has_its_own_quota(api: Api) -> None:
    tenant = await new_tenant(api)
    c = catalog(tenant)
    await api.ok("POST", f"{c}/namespaces/db/views", {"name": "v1"}, 201)
    second = await api.call("POST", f"{c}/namespaces/db/views", json_body={"name": "v2"})
    _retry_after(second)
    raised = {"updates": {"quota.max-views": "2"}}
    await api.ok("POST", f"{tenant_path(tenant)}/properties", raised)
    await api.ok("POST", f"{catalog(tenant, 'd')}/namespaces/db/views", {"name": "v2"}, 201)
    third = await api.call("POST", f"{c}/namespaces/db/views", json_body={"name": "v3"})
    _retry_after(third)
    unlimited = {"updates": {"quota.max-views": "0"}}
    await api.ok("POST", f"{tenant_path(tenant)}/properties", unlimited)
    await api.ok("POST", f"{c}/namespaces/db/views", {"name": "v3"}, 201)


@pytest.mark.parametrize(
    "properties",
    [{"quota.max-tables": "many"}, {"quota.max-table": "1"}, {"quota.burst": "-1"}],
)
async def test_malformed_quotas_are_refused_and_change_nothing(
    api: Api, properties: dict[str, str]
) -> None:
    tenant = await new_tenant(api)
    before = await api.ok("GET", tenant_path(tenant))
    reply = await api.call(
        "POST", f"{tenant_path(tenant)}/properties", json_body={"updates": properties}
    )
    assert_error(reply, 400, "BadRequestException")
    assert await api.ok("GET", tenant_path(tenant)) == before
    created = await api.call(
        "POST", "/api/v1/tenants", json_body={"name": unique("t"), "properties": properties}
    )
    assert_error(created, 400, "BadRequestException")


# --- request rate (authentication off: the tenant a request names spends it) ------------


async def test_a_tenant_over_its_request_rate_gets_429_and_others_do_not(api: Api) -> None:
    tenant = await new_tenant(api)
    other = await new_tenant(api)
    await api.ok("POST", f"{tenant_path(tenant)}/properties", {"updates": SLOW})
    for _ in range(3):  # the burst
        await api.ok("GET", f"{catalog(tenant)}/namespaces")
    refused = await api.call(
        "POST", f"{tenant_path(tenant)}/properties", json_body={"updates": {"x": "y"}}
    )
    assert _retry_after(refused) > 100  # one request per 1,000 s
    iceberg = await api.call("GET", f"/v1/{tenant}~c/namespaces")
    _retry_after(iceberg)
    for _ in range(5):  # another tenant, and requests naming no tenant, are not held back
        await api.ok("GET", f"{catalog(other)}/namespaces")
    listed = await api.ok("GET", "/api/v1/tenants", None)
    mine = [t for t in listed["tenants"] if t["name"] == tenant]
    assert mine and "x" not in mine[0]["properties"], mine  # the refused update wrote nothing


# --- authentication on: the caller's tenant; quotas are a service admin's ---------------


@pytest.fixture
async def root(secured_api: Api) -> Admin:
    caller = await login(secured_api, *ROOT)
    return Admin(secured_api, caller.token, caller.name)


async def tenant_admin(root: Admin, tenant: str) -> Caller:
    await root.tenant(tenant)
    await root.catalog(tenant, "c")
    owner = await root.login_as(tenant, "owner")
    await root.principal_role(tenant, "tenant_admin", "owner")
    return owner


async def test_only_a_service_admin_sets_a_tenants_quota(root: Admin) -> None:
    tenant = unique("t")
    owner = await tenant_admin(root, tenant)
    path = f"{tenant_path(tenant)}/properties"
    await owner.ok("POST", path, {"updates": {"team": "data"}})  # its other properties: fine
    before = await root.ok("GET", tenant_path(tenant))
    for body in (
        {"updates": {"quota.max-tables": "1000000"}},
        {"removals": ["quota.max-tables"]},
        {"updates": {"quota.requests-per-second": "0"}},
    ):
        refused = await owner.call("POST", path, body)
        error = assert_error(refused, 403, "ForbiddenException")
        assert "service admin" in error["message"], refused.describe()
    assert await root.ok("GET", tenant_path(tenant)) == before
    await root.ok("POST", path, {"updates": {"quota.max-namespaces": "1"}})
    await owner.ok("POST", f"{catalog(tenant)}/namespaces", {"namespace": ["a"]}, 201)
    second = await owner.call("POST", f"{catalog(tenant)}/namespaces", {"namespace": ["b"]})
    _retry_after(second)
    created = {"name": unique("t"), "properties": {"quota.max-tables": "5"}}
    assert_error(await owner.call("POST", "/api/v1/tenants", created), 403)
    await root.ok("POST", "/api/v1/tenants", created, 201)


async def test_the_callers_tenant_spends_its_rate_and_a_refusal_writes_nothing(
    root: Admin,
) -> None:
    tenant, other = unique("t"), unique("t")
    owner = await tenant_admin(root, tenant)
    neighbour = await tenant_admin(root, other)
    await root.ok("POST", f"{tenant_path(tenant)}/properties", {"updates": SLOW})
    for _ in range(3):
        await owner.ok("GET", f"{catalog(tenant)}/namespaces")
    head = (await root.ok("GET", f"{catalog(tenant)}/ref"))["head"]
    refused = await owner.call("POST", f"{catalog(tenant)}/namespaces", {"namespace": ["late"]})
    _retry_after(refused)
    _retry_after(await owner.call("GET", "/api/v1/whoami"))  # its tenant's, wherever it goes
    # an intruder's requests to the tenant's paths spend the intruder's own tenant's rate
    for _ in range(5):
        assert_error(await neighbour.call("GET", f"{catalog(tenant)}/namespaces"), 403)
    await neighbour.ok("GET", f"{catalog(other)}/namespaces")
    # a service admin (another tenant) is not held back, and sees nothing written
    assert (await root.ok("GET", f"{catalog(tenant)}/ref"))["head"] == head
    assert_error(await root.call("GET", f"{catalog(tenant)}/namespaces/late"), 404)
    await root.ok("POST", f"{tenant_path(tenant)}/properties", {"removals": list(SLOW)})
    await owner.ok("POST", f"{catalog(tenant)}/namespaces", {"namespace": ["late"]}, 201)
