"""The change feed shows a caller only the events of entities it may list (auth on)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

from harness.node import NodeProcess
from tests.native.access_support import ROOT, Admin, Caller, login, secured_env, tenant_path
from tests.native.support import TIMEOUT, Api, assert_error, assert_status, unique
from tests.native.test_events import Stream

pytestmark = pytest.mark.asyncio


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    root = tmp_path_factory.mktemp("events-authz")
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


async def names(caller: Caller, path: str) -> list[tuple[str, list[str]]]:
    page = assert_status(await caller.call("GET", path), 200)
    return [(e["operation"], e["name"]) for e in page["events"]]


async def test_a_principal_sees_only_events_of_what_it_may_list(admin: Admin) -> None:
    tenant = unique("t")
    cat = f"{tenant_path(tenant)}/catalogs/c"
    await admin.tenant(tenant)
    await admin.catalog(tenant, "c")
    for namespace in ("sales", "hr"):
        await admin.ok("POST", f"{cat}/namespaces", {"namespace": [namespace]}, 201)
    await admin.ok("POST", f"{cat}/namespaces/sales/tables", {"name": "orders"}, 201)
    await admin.ok("POST", f"{cat}/namespaces/hr/tables", {"name": "salaries"}, 201)
    ana = await admin.login_as(tenant, "ana")
    bob = await admin.login_as(tenant, "bob")
    await admin.principal_role(tenant, "sellers", "ana")
    grants = [("TABLE_READ_PROPERTIES", "namespace", ["sales"])]
    await admin.catalog_role(tenant, "c", "readers", grants, "sellers")

    assert await names(ana, f"{cat}/events") == [
        ("create", ["c"]),
        ("create", ["sales"]),
        ("create", ["sales", "orders"]),
    ]
    everything = await names(admin, f"{cat}/events")
    assert ("create", ["hr", "salaries"]) in everything and len(everything) == 5
    # a caller holding nothing in the catalog is refused, like listing its namespaces
    assert_error(await bob.call("GET", f"{cat}/events"), 403, "ForbiddenException")
    # the cursor after a hidden event is the same for everyone: ana resumes past it
    await admin.ok("POST", f"{cat}/namespaces/hr/tables", {"name": "bonus"}, 201)
    await admin.ok("POST", f"{cat}/namespaces/sales/tables", {"name": "returns"}, 201)
    page = assert_status(await ana.call("GET", f"{cat}/events"), 200)
    rest = assert_status(
        await ana.call("GET", f"{cat}/events", params={"after": page["events"][2]["id"]}), 200
    )
    assert [e["name"] for e in rest["events"]] == [["sales", "returns"]]


async def test_a_stream_ends_when_its_principal_is_disabled(api: Api, admin: Admin) -> None:
    tenant = unique("t")
    cat = f"{tenant_path(tenant)}/catalogs/c"
    await admin.tenant(tenant)
    await admin.catalog(tenant, "c")
    ana = await admin.login_as(tenant, "ana")
    await admin.principal_role(tenant, "tenant_admin", "ana")
    headers = ana.headers({"Accept": "text/event-stream"})
    url = f"{api.base_url}{cat}/events"
    params = {"heartbeat": "0.05"}
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session,
        session.get(url, headers=headers, params=params) as response,
    ):
        assert response.status == 200, await response.text()
        stream = Stream(response)
        first: dict[str, Any] | None = await stream.next_event()
        assert first is not None and first["name"] == ["c"]
        await admin.ok("POST", f"{tenant_path(tenant)}/principals/ana/disable")
        while await stream.next_event() is not None:
            pass  # ends once the node checks the token again
        assert response.content.at_eof()
