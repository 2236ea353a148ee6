"""The native API end to end against a real node: CRUD, paging, commits, history, reset."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from harness.node import NodeProcess
from tests.native.support import (
    Api,
    Catalog,
    assert_error,
    assert_serial_chain,
    assert_status,
    entity_ref,
    unique,
)

TENANTS = "/api/v1/tenants"


@pytest.fixture
def place(node: NodeProcess, catalog: Catalog) -> Callable[[str], str]:
    """A location inside the catalog's warehouse, where its tables and views must lie."""
    root = (node.data_dir.resolve() / "warehouse" / catalog.tenant / catalog.name).as_uri()
    return lambda path: f"{root}/{path}"


async def walk(api: Api, path: str, key: str, page_size: int) -> list[list[dict[str, Any]]]:
    """All pages of a listing; asserts that only the last page lacks a token."""
    pages: list[list[dict[str, Any]]] = []
    token: str | None = None
    while True:
        params: dict[str, str | int] = {"pageSize": page_size}
        if token:
            params["pageToken"] = token
        reply = await api.call("GET", path, params=params)
        body = assert_status(reply, 200)
        assert len(body[key]) <= page_size, reply.describe()
        pages.append(body[key])
        token = body["next-page-token"]
        if token is None:
            return pages
        assert len(body[key]) == page_size, f"short page with a token: {reply.describe()}"
        assert len(pages) < 10_000


# --- health ----------------------------------------------------------------------------


async def test_health_and_metrics(api: Api) -> None:
    health = assert_status(await api.get("/health"), 200)
    assert health["status"] == "ok" and health["writable"] is True, health
    assert isinstance(health["node-id"], int), health
    metrics = await api.get("/metrics")
    assert metrics.status == 200, metrics.describe()
    assert "# TYPE metastore_commits_total counter" in metrics.text, metrics.text
    values = {  # the histograms' samples are floats (counts too: "2.0")
        line.split()[0]: float(line.split()[1])
        for line in metrics.text.splitlines()
        if line and not line.startswith("#")
    }
    assert values["metastore_commits_total"] >= 2, values  # the bootstrap tenant and catalog
    # an embedded node with fsync on (the default): commits share WAL fsyncs, never more
    assert 1 <= values["metastore_wal_syncs_total"] <= values["metastore_commits_total"], values


# --- tenants and catalogs ---------------------------------------------------------------


async def test_tenant_crud_and_paging(api: Api) -> None:
    prefix = unique("pg")
    names = [f"{prefix}-{i}" for i in range(5)]
    for name in names:
        created = await api.create_tenant(name, {"owner": name})
        assert created["name"] == name and created["version"] == 1, created
    assert_error(await api.post(TENANTS, {"name": names[0]}), 409, "AlreadyExistsException")

    pages = await walk(api, TENANTS, "tenants", 2)
    listed = [t["name"] for page in pages for t in page]
    assert len(listed) == len(set(listed)), listed
    assert listed == sorted(listed), listed
    assert [n for n in listed if n.startswith(prefix)] == names, listed
    (single,) = await walk(api, TENANTS, "tenants", 1000)
    assert [t["name"] for t in single] == listed

    tenant = f"{TENANTS}/{names[1]}"
    got = assert_status(await api.get(tenant), 200)
    assert got["properties"] == {"owner": names[1]}, got
    updated = await api.ok(
        "POST", tenant + "/properties", {"updates": {"tier": "gold"}, "expected-version": 1}
    )
    assert updated["version"] == 2 and updated["properties"] == {"owner": names[1], "tier": "gold"}
    stale = await api.post(tenant + "/properties", {"updates": {"x": "y"}, "expected-version": 1})
    assert_error(stale, 409, "CommitFailedException")
    removed = await api.ok("POST", tenant + "/properties", {"removals": ["owner"]})
    assert removed["version"] == 3 and removed["properties"] == {"tier": "gold"}, removed

    # A tenant with a catalog cannot be deleted; an empty one can.
    await api.create_catalog(names[1], "c")
    assert_error(await api.delete(tenant), 409, "NamespaceNotEmptyException")
    assert_status(await api.delete(f"{tenant}/catalogs/c"), 204)
    assert_status(await api.delete(tenant), 204)
    assert_error(await api.get(tenant), 404, "NoSuchTenantException")
    assert_error(await api.delete(tenant), 404, "NoSuchTenantException")
    (after,) = await walk(api, TENANTS, "tenants", 1000)
    assert names[1] not in [t["name"] for t in after]
    recreated = await api.create_tenant(names[1])
    assert recreated["version"] == 1 and recreated["properties"] == {}, recreated


async def test_catalog_crud_and_paging(api: Api, catalog: Catalog) -> None:
    catalogs = f"{TENANTS}/{catalog.tenant}/catalogs"
    for i in range(5):
        await api.create_catalog(catalog.tenant, f"cat{i}", {"n": str(i)})
    assert_error(await api.post(catalogs, {"name": "cat0"}), 409, "AlreadyExistsException")

    pages = await walk(api, catalogs, "catalogs", 2)
    assert [len(p) for p in pages] == [2, 2, 2], pages
    assert [c["name"] for p in pages for c in p] == ["c", "cat0", "cat1", "cat2", "cat3", "cat4"]
    assert pages[0][1]["properties"] == {"n": "0"}, pages

    cat = f"{catalogs}/cat3"
    got = assert_status(await api.get(cat), 200)
    assert got["name"] == "cat3" and got["version"] == 1, got
    updated = await api.ok(
        "POST", cat + "/properties", {"updates": {"n": "three"}, "expected-version": 1}
    )
    assert updated["version"] == 2 and updated["properties"] == {"n": "three"}, updated
    stale = await api.post(cat + "/properties", {"updates": {"n": "x"}, "expected-version": 1})
    assert_error(stale, 409, "CommitFailedException")

    assert_status(await api.delete(cat), 204)
    assert_error(await api.get(cat), 404, "NoSuchWarehouseException")
    assert_error(await api.get(cat + "/ref"), 404, "NoSuchWarehouseException")
    assert_error(await api.delete(cat), 404)
    (listed,) = await walk(api, catalogs, "catalogs", 1000)
    assert [c["name"] for c in listed] == ["c", "cat0", "cat1", "cat2", "cat4"], listed


async def test_catalog_delete_while_non_empty(catalog: Catalog) -> None:
    api = catalog.api
    await catalog.create_namespace("ns")
    head = await catalog.head()
    assert_error(await api.delete(catalog.path), 409, "NamespaceNotEmptyException")
    assert await catalog.head() == head
    assert_status(await api.delete(catalog.ns("ns")), 204)
    assert_status(await api.delete(catalog.path), 204)
    assert_error(await api.get(catalog.path), 404, "NoSuchWarehouseException")


async def test_unknown_tenant(api: Api) -> None:
    ghost = f"{TENANTS}/{unique('ghost')}"
    assert_error(await api.get(ghost), 404, "NoSuchTenantException")
    assert_error(await api.get(ghost + "/catalogs"), 404, "NoSuchTenantException")
    assert_error(await api.post(ghost + "/catalogs", {"name": "c"}), 404, "NoSuchTenantException")
    assert_error(await api.get(ghost + "/catalogs/c"), 404, "NoSuchTenantException")
    assert_error(await api.get(ghost + "/catalogs/c/ref"), 404, "NoSuchTenantException")
    assert_error(await api.get(ghost + "/catalogs/c/namespaces"), 404, "NoSuchTenantException")
    create = {"namespace": ["ns"]}
    assert_error(
        await api.post(ghost + "/catalogs/c/namespaces", create), 404, "NoSuchTenantException"
    )
    change = {"changes": [{"action": "create", "entity": entity_ref("namespace", "ns")}]}
    assert_error(await api.post(ghost + "/catalogs/c/commit", change), 404, "NoSuchTenantException")


# --- namespaces -------------------------------------------------------------------------


async def test_nested_namespaces(catalog: Catalog) -> None:
    api = catalog.api
    for levels in (("a",), ("a", "b"), ("a", "b", "c"), ("a", "b", "d"), ("a", "x"), ("z",)):
        created = await catalog.create_namespace(*levels, properties={"depth": str(len(levels))})
        assert created["namespace"] == list(levels) and created["version"] == 1, created

    async def children(parent: str | None) -> list[list[str]]:
        params = {"parent": parent} if parent is not None else {}
        body = assert_status(await api.call("GET", catalog.path + "/namespaces", params=params))
        return [n["namespace"] for n in body["namespaces"]]

    assert await children(None) == [["a"], ["z"]]
    assert await children("a") == [["a", "b"], ["a", "x"]]
    assert await children("a\x1fb") == [["a", "b", "c"], ["a", "b", "d"]]
    assert await children("a\x1fb\x1fc") == []
    # The raw %1F form of the query string, as an Iceberg REST client sends it.
    raw = assert_status(await api.call("GET", catalog.path + "/namespaces?parent=a%1Fb"))
    assert [n["namespace"] for n in raw["namespaces"]] == [["a", "b", "c"], ["a", "b", "d"]]

    got = assert_status(await api.get(catalog.ns("a", "b", "c")))
    assert got["namespace"] == ["a", "b", "c"] and got["properties"] == {"depth": "3"}, got
    raw_get = await api.get(catalog.path + "/namespaces/a%1Fb%1Fc")
    assert assert_status(raw_get)["entity-id"] == got["entity-id"]

    assert_error(await api.get(catalog.ns("a", "q")), 404, "NoSuchNamespaceException")
    missing_parent = await api.post(catalog.path + "/namespaces", {"namespace": ["m", "n"]})
    assert_error(missing_parent, 404, "NoSuchNamespaceException")
    duplicate = await api.post(catalog.path + "/namespaces", {"namespace": ["a", "b"]})
    assert_error(duplicate, 409, "AlreadyExistsException")
    listing = await api.call("GET", catalog.path + "/namespaces", params={"parent": "nope"})
    assert_error(listing, 404, "NoSuchNamespaceException")


async def test_namespace_properties_with_expected_version(catalog: Catalog) -> None:
    api = catalog.api
    await catalog.create_namespace("ns", properties={"a": "1", "b": "2"})
    props = catalog.ns("ns") + "/properties"
    first = await api.ok("POST", props, {"updates": {"a": "10"}, "expected-version": 1})
    assert first["version"] == 2 and first["properties"] == {"a": "10", "b": "2"}, first
    head = await catalog.head()
    stale = await api.post(props, {"updates": {"a": "lost"}, "expected-version": 1})
    error = assert_error(stale, 409, "CommitFailedException")
    assert "version" in error["message"], error
    assert await catalog.head() == head, "a failed requirement must not write"
    second = await api.ok("POST", props, {"removals": ["b"], "expected-version": 2})
    assert second["version"] == 3 and second["properties"] == {"a": "10"}, second
    unconditional = await api.ok("POST", props, {"updates": {"c": "3"}})
    assert unconditional["version"] == 4, unconditional
    got = assert_status(await api.get(catalog.ns("ns")))
    assert got["properties"] == {"a": "10", "c": "3"} and got["version"] == 4, got


async def test_delete_non_empty_namespace(catalog: Catalog) -> None:
    api = catalog.api
    await catalog.create_namespace("ns")
    await catalog.create_namespace("ns", "child")
    await catalog.create(("ns", "child"), "t")
    assert_error(await api.delete(catalog.ns("ns")), 409, "NamespaceNotEmptyException")
    assert_error(await api.delete(catalog.ns("ns", "child")), 409, "NamespaceNotEmptyException")
    assert_status(await api.delete(catalog.entity(("ns", "child"), "t")), 204)
    assert_status(await api.delete(catalog.ns("ns", "child")), 204)
    assert_status(await api.delete(catalog.ns("ns")), 204)
    assert_error(await api.get(catalog.ns("ns")), 404, "NoSuchNamespaceException")
    assert_error(await api.delete(catalog.ns("ns")), 404, "NoSuchNamespaceException")


# --- tables and views -------------------------------------------------------------------


async def test_tables_and_views_crud(catalog: Catalog, place: Callable[[str], str]) -> None:
    api = catalog.api
    await catalog.create_namespace("ns")
    table = await catalog.create(("ns",), "t", {"format": "parquet"}, location=place("t"))
    assert table == {**table, "kind": "table", "namespace": ["ns"], "name": "t", "version": 1}
    assert table["location"] == place("t") and table["properties"] == {"format": "parquet"}
    assert isinstance(table["entity-id"], str) and table["entity-id"].isdigit(), table
    got = assert_status(await api.get(catalog.entity(("ns",), "t")))
    assert got == table

    updated = await api.ok(
        "POST",
        catalog.entity(("ns",), "t"),
        {"updates": {"owner": "me"}, "removals": ["format"], "location": place("t2")},
    )
    assert updated["version"] == 2 and updated["entity-id"] == table["entity-id"], updated
    assert updated["properties"] == {"owner": "me"} and updated["location"] == place("t2")
    stale = await api.post(catalog.entity(("ns",), "t"), {"updates": {}, "expected-version": 1})
    assert_error(stale, 409, "CommitFailedException")

    view = await catalog.create(("ns",), "v", {"sql": "select 1"}, kind="views")
    assert view["kind"] == "view" and view["name"] == "v", view
    # A table and a view share one name space inside a namespace.
    clash = await api.post(catalog.ns("ns") + "/views", {"name": "t"})
    assert_error(clash, 409, "AlreadyExistsException")
    clash = await api.post(catalog.ns("ns") + "/tables", {"name": "v"})
    assert_error(clash, 409, "AlreadyExistsException")
    assert_error(await api.post(catalog.ns("ns") + "/tables", {"name": "t"}), 409)
    assert_error(await api.get(catalog.entity(("ns",), "t", "views")), 404, "NoSuchViewException")
    assert_error(await api.get(catalog.entity(("ns",), "v")), 404, "NoSuchTableException")

    tables = assert_status(await api.get(catalog.ns("ns") + "/tables"))
    assert [t["name"] for t in tables["tables"]] == ["t"], tables
    views = assert_status(await api.get(catalog.ns("ns") + "/views"))
    assert [v["name"] for v in views["views"]] == ["v"], views

    assert_status(await api.delete(catalog.entity(("ns",), "t")), 204)
    assert_error(await api.get(catalog.entity(("ns",), "t")), 404, "NoSuchTableException")
    assert_error(await api.delete(catalog.entity(("ns",), "t")), 404, "NoSuchTableException")
    assert_status(await api.delete(catalog.entity(("ns",), "v", "views")), 204)
    for kind in ("tables", "views"):
        empty = assert_status(await api.get(catalog.ns("ns") + f"/{kind}"))
        assert empty == {kind: [], "next-page-token": None}, empty
    # The name is free again, and a new table is a new entity.
    again = await catalog.create(("ns",), "t")
    assert again["entity-id"] != table["entity-id"] and again["version"] == 1, again
    assert_error(await api.get(catalog.ns("nope") + "/tables"), 404, "NoSuchNamespaceException")
    missing_ns = await api.post(catalog.ns("nope") + "/tables", {"name": "t"})
    assert_error(missing_ns, 404, "NoSuchNamespaceException")


async def test_table_listing_pages(catalog: Catalog) -> None:
    await catalog.create_namespace("ns")
    names = [f"t{i:02d}" for i in range(7)]
    for name in names:
        await catalog.create(("ns",), name)
    await catalog.create(("ns",), "view", kind="views")
    pages = await walk(catalog.api, catalog.ns("ns") + "/tables", "tables", 3)
    assert [len(p) for p in pages] == [3, 3, 1], pages
    assert [t["name"] for p in pages for t in p] == names


async def test_rename_across_namespaces(catalog: Catalog, place: Callable[[str], str]) -> None:
    api = catalog.api
    await catalog.create_namespace("src")
    await catalog.create_namespace("dst")
    table = await catalog.create(("src",), "t", {"k": "v"}, location=place("x"))
    await catalog.create(("dst",), "taken")
    await catalog.create(("src",), "v", kind="views")

    rename = {
        "source": entity_ref("table", "src", "t"),
        "destination": entity_ref("table", "dst", "u"),
    }
    assert_status(await api.post(catalog.path + "/rename", rename), 200, 204)
    assert_error(await api.get(catalog.entity(("src",), "t")), 404, "NoSuchTableException")
    moved = assert_status(await api.get(catalog.entity(("dst",), "u")))
    assert moved["entity-id"] == table["entity-id"], moved
    assert moved["properties"] == {"k": "v"} and moved["location"] == place("x"), moved
    assert moved["namespace"] == ["dst"] and moved["name"] == "u", moved
    last = (await catalog.history())[0]
    assert sorted((c["path"], c["action"]) for c in last["changes"]) == [
        (["dst", "u"], "create"),
        (["src", "t"], "delete"),
    ], last

    head = await catalog.head()
    onto = {
        "source": entity_ref("table", "dst", "u"),
        "destination": entity_ref("table", "dst", "taken"),
    }
    assert_error(await api.post(catalog.path + "/rename", onto), 409, "AlreadyExistsException")
    gone = {
        "source": entity_ref("table", "src", "t"),
        "destination": entity_ref("table", "dst", "w"),
    }
    assert_error(await api.post(catalog.path + "/rename", gone), 404, "NoSuchTableException")
    nowhere = {
        "source": entity_ref("table", "dst", "u"),
        "destination": entity_ref("table", "no", "u"),
    }
    assert_error(await api.post(catalog.path + "/rename", nowhere), 404, "NoSuchNamespaceException")
    kinds = {
        "source": entity_ref("view", "src", "v"),
        "destination": entity_ref("table", "dst", "v"),
    }
    assert_error(await api.post(catalog.path + "/rename", kinds), 400)
    assert await catalog.head() == head, "failed renames must not write"


# --- atomic multi-entity commits --------------------------------------------------------


async def test_atomic_commit_with_failing_requirement_writes_nothing(catalog: Catalog) -> None:
    api = catalog.api
    await catalog.create_namespace("ns")
    await catalog.create(("ns",), "existing")
    history = await catalog.history()
    ref = await catalog.ref()
    creates = [
        {"action": "create", "entity": entity_ref("namespace", "new")},
        {"action": "create", "entity": entity_ref("table", "new", "t1"), "properties": {"a": "b"}},
        {"action": "create", "entity": entity_ref("view", "ns", "v1")},
        {"action": "create", "entity": entity_ref("table", "ns", "t2")},
    ]
    failing = [
        # The requirement is checked against the current state and fails.
        [{"type": "assert-not-exists", "entity": entity_ref("table", "ns", "existing")}],
        [{"type": "assert-version", "entity": entity_ref("table", "ns", "existing"), "version": 7}],
        [{"type": "assert-exists", "entity": entity_ref("table", "ns", "absent")}],
        [{"type": "assert-empty", "namespace": ["ns"]}],
    ]
    for requirements in failing:
        reply = await catalog.commit({"requirements": requirements, "changes": creates})
        assert_error(reply, 409, "CommitFailedException")
    # A change that fails after others applied: all or nothing, too.
    late = [*creates, {"action": "create", "entity": entity_ref("table", "nope", "t3")}]
    assert_error(await catalog.commit({"changes": late}), 404, "NoSuchNamespaceException")
    late = [*creates, {"action": "create", "entity": entity_ref("table", "ns", "existing")}]
    assert_error(await catalog.commit({"changes": late}), 409, "AlreadyExistsException")

    assert_error(await api.get(catalog.ns("new")), 404, "NoSuchNamespaceException")
    assert_error(await api.get(catalog.entity(("new",), "t1")), 404)
    assert_error(await api.get(catalog.entity(("ns",), "v1", "views")), 404, "NoSuchViewException")
    assert_error(await api.get(catalog.entity(("ns",), "t2")), 404, "NoSuchTableException")
    assert await catalog.history() == history
    assert await catalog.ref() == ref


async def test_atomic_commit_success(catalog: Catalog, place: Callable[[str], str]) -> None:
    api = catalog.api
    await catalog.create_namespace("ns")
    await catalog.create(("ns",), "existing", {"x": "1"})
    await catalog.create(("ns",), "doomed")
    before = await catalog.history()
    body = {
        "operation": "etl batch 7",
        "requirements": [
            {
                "type": "assert-version",
                "entity": entity_ref("table", "ns", "existing"),
                "version": 1,
            },
            {"type": "assert-not-exists", "entity": entity_ref("namespace", "m")},
            {"type": "assert-exists", "entity": entity_ref("table", "ns", "doomed")},
        ],
        "changes": [
            {"action": "create", "entity": entity_ref("namespace", "m"), "properties": {"p": "q"}},
            {"action": "create", "entity": entity_ref("table", "m", "a"), "location": place("a")},
            {"action": "create", "entity": entity_ref("view", "m", "b")},
            {
                "action": "update",
                "entity": entity_ref("table", "ns", "existing"),
                "updates": {"x": "2"},
            },
            {"action": "delete", "entity": entity_ref("table", "ns", "doomed")},
        ],
    }
    reply = await catalog.commit(body)
    outcome = assert_status(reply, 200)
    assert outcome["seq"] == before[0]["seq"] + 1, reply.describe()
    by_path = {tuple(c["path"]): c for c in outcome["changes"]}
    assert set(by_path) == {("m",), ("m", "a"), ("m", "b"), ("ns", "existing"), ("ns", "doomed")}
    assert by_path[("ns", "doomed")]["deleted"] is True, reply.describe()
    assert by_path[("ns", "existing")]["entity"]["version"] == 2, reply.describe()

    assert await catalog.head() == outcome["commit-id"]
    after = await catalog.history()
    assert after[1:] == before and after[0]["id"] == outcome["commit-id"], after[0]
    commit = assert_status(await api.get(f"{catalog.path}/commits/{outcome['commit-id']}"))
    assert commit == after[0]
    assert commit["operation"] == "etl batch 7" and commit["parent"] == before[0]["id"], commit
    assert sorted((tuple(c["path"]), c["kind"], c["action"]) for c in commit["changes"]) == [
        (("m",), "namespace", "create"),
        (("m", "a"), "table", "create"),
        (("m", "b"), "view", "create"),
        (("ns", "doomed"), "table", "delete"),
        (("ns", "existing"), "table", "update"),
    ], commit

    assert assert_status(await api.get(catalog.ns("m")))["properties"] == {"p": "q"}
    assert assert_status(await api.get(catalog.entity(("m",), "a")))["location"] == place("a")
    assert_status(await api.get(catalog.entity(("m",), "b", "views")))
    assert assert_status(await api.get(catalog.entity(("ns",), "existing")))["version"] == 2
    assert_error(await api.get(catalog.entity(("ns",), "doomed")), 404)


async def test_history_paging(catalog: Catalog) -> None:
    api = catalog.api
    await catalog.create_namespace("ns")
    for i in range(6):
        await catalog.create(("ns",), f"t{i}")
    full = await catalog.history(page_size=1000)
    assert len(full) == 8, full  # create catalog, create namespace, six tables
    assert_serial_chain(full)
    assert full[-1]["operation"] == "create catalog" and full[0]["operation"] == "create table"

    pages = await walk(api, catalog.path + "/commits", "commits", 3)
    assert [len(p) for p in pages] == [3, 3, 2], pages
    assert [c for p in pages for c in p] == full

    # A token pins where the walk resumes: commits made meanwhile do not shift pages.
    first = assert_status(await api.get(catalog.path + "/commits", pageSize=3))
    await catalog.create(("ns",), "late")
    rest = assert_status(
        await api.get(catalog.path + "/commits", pageSize=1000, pageToken=first["next-page-token"])
    )
    assert first["commits"] + rest["commits"] == full


# --- point in time, ref, reset ------------------------------------------------------------


async def test_point_in_time_reads(catalog: Catalog) -> None:
    api = catalog.api
    before_ns = await catalog.head()
    await catalog.create_namespace("ns")
    await catalog.create(("ns",), "t", {"v": "1"})
    c1 = await catalog.head()
    await api.ok("POST", catalog.entity(("ns",), "t"), {"updates": {"v": "2"}})
    c2 = await catalog.head()
    await catalog.create(("ns",), "t2")
    c3 = await catalog.head()
    assert_status(await api.delete(catalog.entity(("ns",), "t")), 204)

    at1 = assert_status(await api.get(catalog.entity(("ns",), "t"), at=c1))
    assert at1["version"] == 1 and at1["properties"] == {"v": "1"}, at1
    at2 = assert_status(await api.get(catalog.entity(("ns",), "t"), at=c2))
    assert at2["version"] == 2 and at2["properties"] == {"v": "2"}, at2
    assert_error(await api.get(catalog.entity(("ns",), "t")), 404, "NoSuchTableException")

    async def tables(**at: str) -> list[str]:
        body = assert_status(await api.get(catalog.ns("ns") + "/tables", **at))
        return [t["name"] for t in body["tables"]]

    assert await tables(at=c2) == ["t"]
    assert await tables(at=c3) == ["t", "t2"]
    assert await tables() == ["t2"]
    namespaces = assert_status(await api.get(catalog.path + "/namespaces", at=before_ns))
    assert namespaces["namespaces"] == [], namespaces
    assert_error(await api.get(catalog.ns("ns"), at=before_ns), 404, "NoSuchNamespaceException")
    assert_error(await api.get(catalog.ns("ns") + "/tables", at=before_ns), 404)


async def test_ref_recent_heads_and_reset(catalog: Catalog) -> None:
    api = catalog.api
    heads = [await catalog.head()]
    await catalog.create_namespace("ns")
    heads.append(await catalog.head())
    await catalog.create(("ns",), "t", {"v": "1"})
    heads.append(await catalog.head())
    await api.ok("POST", catalog.entity(("ns",), "t"), {"updates": {"v": "2"}})
    heads.append(await catalog.head())
    await catalog.create(("ns",), "later")
    heads.append(await catalog.head())

    ref = await catalog.ref()
    assert ref["name"] == "main" and ref["head"] == heads[-1], ref
    assert ref["recent-heads"] == heads[-2::-1], (ref, heads)

    reset = await api.ok("POST", catalog.path + "/ref/reset", {"to": heads[2]})
    assert reset["head"] == heads[2], reset
    assert heads[-1] in reset["recent-heads"], reset
    table = assert_status(await api.get(catalog.entity(("ns",), "t")))
    assert table["version"] == 1 and table["properties"] == {"v": "1"}, table
    assert_error(await api.get(catalog.entity(("ns",), "later")), 404)
    history = await catalog.history()
    assert [c["id"] for c in history] == heads[2::-1], history

    # The abandoned HEAD is now a recent head itself: the reset can be undone.
    undo = await api.ok("POST", catalog.path + "/ref/reset", {"to": heads[-1]})
    assert undo["head"] == heads[-1], undo
    assert assert_status(await api.get(catalog.entity(("ns",), "t")))["version"] == 2
    assert_status(await api.get(catalog.entity(("ns",), "later")))

    # Only recent heads are reset targets: not an unknown id, not a commit that aged out.
    before = await catalog.ref()
    for bogus in ("12345", str(int(heads[-1]) + 1)):
        reply = await api.post(catalog.path + "/ref/reset", {"to": bogus})
        assert_error(reply, 400, "BadRequestException")
    for i in range(21):
        await api.ok("POST", catalog.ns("ns") + "/properties", {"updates": {"i": str(i)}})
    aged = await catalog.ref()
    assert heads[0] not in aged["recent-heads"] and len(aged["recent-heads"]) == 20, aged
    assert_error(await api.post(catalog.path + "/ref/reset", {"to": heads[0]}), 400)
    assert await catalog.ref() == aged
    assert before["head"] != aged["head"]


async def test_tenant_isolation(api: Api) -> None:
    t1, t2 = unique("iso1"), unique("iso2")
    for tenant in (t1, t2):
        await api.create_tenant(tenant)
    c1 = await api.create_catalog(t1, "c")
    c2 = await api.create_catalog(t2, "c")
    for cat in (c1, c2):
        await cat.create_namespace("ns", properties={"tenant": cat.tenant})
        await cat.create(("ns",), "shared", {"tenant": cat.tenant})
    only_t2 = await c2.create(("ns",), "secret", {"pii": "yes"})

    assert_error(await api.get(c1.entity(("ns",), "secret")), 404, "NoSuchTableException")
    assert_status(await api.get(c2.entity(("ns",), "secret")))
    for cat in (c1, c2):
        ns = assert_status(await api.get(cat.ns("ns")))
        assert ns["properties"] == {"tenant": cat.tenant}, ns
        shared = assert_status(await api.get(cat.entity(("ns",), "shared")))
        assert shared["properties"] == {"tenant": cat.tenant}, shared
    listed = assert_status(await api.get(c1.ns("ns") + "/tables"))
    assert [t["name"] for t in listed["tables"]] == ["shared"], listed

    # t2's commits are not reachable through t1's path, not even by id.
    t2_head = await c2.head()
    reply = await api.get(c1.entity(("ns",), "secret"), at=t2_head)
    assert_error(reply, 404, "NoSuchCommitException")
    assert_error(await api.get(f"{c1.path}/commits/{t2_head}"), 404, "NoSuchCommitException")
    assert_error(await api.post(c1.path + "/ref/reset", {"to": t2_head}), 400)
    assert only_t2["entity-id"] not in {e["entity-id"] for e in listed["tables"]}

    # Writes in one tenant leave the other alone.
    assert_status(await api.delete(c1.entity(("ns",), "shared")), 204)
    assert_status(await api.get(c2.entity(("ns",), "shared")))
    assert len(await c1.history()) == 4 and len(await c2.history()) == 4
