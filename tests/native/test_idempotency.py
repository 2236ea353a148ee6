"""``Idempotency-Key`` on the native API: a retry gets the first outcome and writes nothing;
the same key with another request is a 400 and the other request is not lost."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.native.support import (
    Api,
    Catalog,
    Reply,
    assert_error,
    assert_status,
    entity_ref,
    unique,
)

TENANTS = "/api/v1/tenants"


def keyed(key: str) -> dict[str, str]:
    return {"Idempotency-Key": key}


async def send(api: Api, method: str, path: str, body: Any = None, key: str = "") -> Reply:
    headers = keyed(key) if key else None
    if body is None:
        return await api.call(method, path, headers=headers)
    return await api.call(method, path, json_body=body, headers=headers)


async def test_a_retried_create_replays_the_first_outcome_and_writes_nothing(
    api: Api, catalog: Catalog
) -> None:
    key = unique("k")
    body = {"namespace": ["sales"], "properties": {"owner": "ana"}}
    first = await send(api, "POST", catalog.path + "/namespaces", body, key)
    created = assert_status(first, 201)
    head = await catalog.head()
    again = await send(api, "POST", catalog.path + "/namespaces", body, key)
    assert assert_status(again, 201) == created  # same entity id, version and timestamps
    assert await catalog.head() == head
    without_key = await send(api, "POST", catalog.path + "/namespaces", body)
    assert_error(without_key, 409)  # the key, not luck, made the retry succeed


async def test_the_same_key_with_another_body_is_refused_and_writes_nothing(
    api: Api, catalog: Catalog
) -> None:
    key = unique("k")
    first = await send(api, "POST", catalog.path + "/namespaces", {"namespace": ["a"]}, key)
    assert_status(first, 201)
    head = await catalog.head()
    other = await send(api, "POST", catalog.path + "/namespaces", {"namespace": ["b"]}, key)
    error = assert_error(other, 400, "BadRequestException")
    assert "Idempotency-Key" in error["message"], other.describe()
    assert await catalog.head() == head
    assert_error(await api.get(catalog.ns("b")), 404)
    # another path (same body) is another request too
    moved = await send(api, "POST", catalog.ns("a") + "/properties", {"updates": {}}, key)
    assert_error(moved, 400)
    assert_status(await send(api, "POST", catalog.path + "/namespaces", {"namespace": ["b"]}), 201)


async def test_a_retried_update_is_not_applied_twice(api: Api, catalog: Catalog) -> None:
    await catalog.create_namespace("db")
    await catalog.create(("db",), "t", {"n": "0"})
    path = catalog.entity(("db",), "t")
    key = unique("k")
    body = {"updates": {"n": "1"}}
    first = assert_status(await send(api, "POST", path, body, key), 200)
    again = assert_status(await send(api, "POST", path, body, key), 200)
    assert again == first and first["version"] == 2, (first, again)
    current = assert_status(await api.get(path), 200)
    assert current["version"] == 2, current
    # the entity moves on; a late retry still gets the first outcome, not the current one
    assert_status(await send(api, "POST", path, {"updates": {"n": "2"}}), 200)
    late = assert_status(await send(api, "POST", path, body, key), 200)
    assert late == first


async def test_a_retried_delete_answers_204_again(api: Api, catalog: Catalog) -> None:
    await catalog.create_namespace("gone")
    key = unique("k")
    first = await send(api, "DELETE", catalog.ns("gone"), key=key)
    assert first.status == 204, first.describe()
    again = await send(api, "DELETE", catalog.ns("gone"), key=key)
    assert again.status == 204, again.describe()
    assert_error(await send(api, "DELETE", catalog.ns("gone")), 404)


async def test_a_retried_atomic_commit_replays_its_outcome(api: Api, catalog: Catalog) -> None:
    await catalog.create_namespace("db")
    body = {
        "operation": "load",
        "requirements": [{"type": "assert-not-exists", "entity": entity_ref("table", "db", "x")}],
        "changes": [
            {"action": "create", "entity": entity_ref("table", "db", "x")},
            {"action": "create", "entity": entity_ref("view", "db", "v")},
        ],
    }
    key = unique("k")
    first = assert_status(await send(api, "POST", catalog.path + "/commit", body, key), 200)
    head = await catalog.head()
    again = assert_status(await send(api, "POST", catalog.path + "/commit", body, key), 200)
    assert again == first  # commit id, seq and both entities
    assert [c["path"] for c in first["changes"]] == [["db", "x"], ["db", "v"]], first
    assert await catalog.head() == head
    history = await catalog.history()
    assert history[0]["id"] == first["commit-id"], history[0]


async def test_concurrent_identical_requests_commit_once(api: Api, catalog: Catalog) -> None:
    await catalog.create_namespace("db")
    key = unique("k")
    body = {"name": "t", "properties": {"a": "1"}}
    path = catalog.ns("db") + "/tables"
    replies = await asyncio.gather(*(send(api, "POST", path, body, key) for _ in range(8)))
    bodies = [assert_status(r, 201) for r in replies]
    assert all(b == bodies[0] for b in bodies), bodies
    creates = [c for c in await catalog.history() if c["operation"] == "create table"]
    assert len(creates) == 1, creates


async def test_tenant_and_catalog_creation_and_properties(api: Api) -> None:
    tenant, key = unique("t"), unique("k")
    body = {"name": tenant, "properties": {"team": "a"}}
    first = assert_status(await send(api, "POST", TENANTS, body, key), 201)
    assert assert_status(await send(api, "POST", TENANTS, body, key), 201) == first
    other = await send(api, "POST", TENANTS, {"name": unique("t")}, key)
    assert_status(other, 201)  # a key lives in the tenant or catalog a request changes

    catalogs = f"{TENANTS}/{tenant}/catalogs"
    made = assert_status(await send(api, "POST", catalogs, {"name": "c"}, key), 201)
    assert assert_status(await send(api, "POST", catalogs, {"name": "c"}, key), 201) == made

    props = f"{catalogs}/c/properties"
    update = {"updates": {"x": "1"}}
    updated = assert_status(await send(api, "POST", props, update, key + "-p"), 200)
    assert assert_status(await send(api, "POST", props, update, key + "-p"), 200) == updated
    record = assert_status(await api.get(f"{catalogs}/c"), 200)
    assert record["version"] == updated["version"] == 2, record

    tenant_props = f"{TENANTS}/{tenant}/properties"
    assert_error(await send(api, "POST", tenant_props, update, key), 400)  # created the tenant
    changed = assert_status(await send(api, "POST", tenant_props, update, key + "-t"), 200)
    assert assert_status(await send(api, "POST", tenant_props, update, key + "-t"), 200) == changed


async def test_a_key_on_an_operation_without_a_commit_is_refused(api: Api) -> None:
    catalog = await api.new_catalog()
    key = unique("k")
    for method, path, body in (
        ("DELETE", catalog.path, None),
        ("DELETE", f"{TENANTS}/{catalog.tenant}", None),
        ("POST", catalog.path + "/ref/reset", {"to": await catalog.head()}),
    ):
        assert_error(await send(api, method, path, body, key), 400)
    assert_status(await api.get(catalog.path), 200)  # nothing was deleted


async def test_malformed_keys_are_refused(api: Api, catalog: Catalog) -> None:
    for key in ("has space", "x" * 129, "semi;colon"):
        reply = await send(api, "POST", catalog.path + "/namespaces", {"namespace": ["n"]}, key)
        assert_error(reply, 400)
    assert_error(await api.get(catalog.ns("n")), 404)
