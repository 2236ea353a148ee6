"""The Metastore service on the memory backend: tenants, catalogs, listings, history."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest

from metastore.catalog.service import Metastore, Page
from metastore.engine.commits import CommitRequest
from metastore.errors import (
    AlreadyExists,
    CommitConflict,
    InvalidName,
    InvalidPageToken,
    NoSuchCatalog,
    NoSuchCommit,
    NoSuchNamespace,
    NoSuchTable,
    NoSuchTenant,
    NotEmpty,
)
from metastore.model.changes import CreateEntity, DeleteEntity, UpdateEntity
from metastore.model.keys import SYSTEM_CATALOG, EntityKey, Kind
from metastore.model.records import Entity
from tests.builders import ns_key, table_key, view_key

T = TypeVar("T")
DB = ("db",)


def all_pages(fetch: Callable[[str | None], Page[T]]) -> list[list[T]]:
    pages: list[list[T]] = []
    token: str | None = None
    while True:
        page = fetch(token)
        pages.append(page.items)
        token = page.next_token
        if token is None:
            return pages
        assert len(pages) < 100


async def create(svc: Metastore, tenant: str, catalog: str, *keys: EntityKey) -> int:
    request = CommitRequest(changes=tuple(CreateEntity(k, {"name": k.name}) for k in keys))
    return (await svc.commit(tenant, catalog, request)).commit_id


async def setup_catalog(svc: Metastore, tenant: str = "t1", catalog: str = "c1") -> None:
    try:
        svc.check_tenant(tenant)
    except NoSuchTenant:
        await svc.create_tenant(tenant, {"tier": "gold"}, "admin")
    await svc.create_catalog(tenant, catalog, {"region": "eu"}, "admin")


def table_names(page: Page[Entity]) -> list[str]:
    return [e.path[-1] for e in page.items]


# --- tenants and catalogs ------------------------------------------------------------


async def test_tenants_create_get_list_paged(service: Metastore) -> None:
    names = ["tenant-c", "tenant-a", "tenant-e", "tenant-b", "tenant-d"]
    for name in names:
        created = await service.create_tenant(name, {"owner": name}, "admin")
        assert created.version == 1 and dict(created.properties) == {"owner": name}
    assert dict(service.get_tenant("tenant-b").properties) == {"owner": "tenant-b"}
    pages = all_pages(lambda tok: service.list_tenants(tok, 2))
    assert [len(p) for p in pages] == [2, 2, 1]
    listed = [name for page in pages for name, _ in page]
    assert listed == sorted(names)
    assert [dict(e.properties)["owner"] for page in pages for _, e in page] == sorted(names)
    with pytest.raises(AlreadyExists):
        await service.create_tenant("tenant-a", {}, "admin")
    with pytest.raises(NoSuchTenant):
        service.get_tenant("tenant-x")
    with pytest.raises(InvalidName):
        await service.create_tenant("bad/name", {}, "admin")


async def test_tenant_update_with_expected_version(service: Metastore) -> None:
    await service.create_tenant("t1", {"a": "1", "b": "2"}, "admin")
    updated = await service.update_record("t1", SYSTEM_CATALOG, {"c": "3"}, ["a"], 1, "admin")
    assert updated.version == 2 and dict(updated.properties) == {"b": "2", "c": "3"}
    with pytest.raises(CommitConflict, match="expected 1"):
        await service.update_record("t1", SYSTEM_CATALOG, {"d": "4"}, [], 1, "admin")
    unconditional = await service.update_record("t1", SYSTEM_CATALOG, {"d": "4"}, [], None, "x")
    assert unconditional.version == 3
    assert dict(service.get_tenant("t1").properties) == {"b": "2", "c": "3", "d": "4"}


async def test_catalogs_create_get_list_update(service: Metastore) -> None:
    await service.create_tenant("t1", {}, "admin")
    with pytest.raises(NoSuchTenant):
        await service.create_catalog("nobody", "c1", {}, "admin")
    for name in ["c5", "c3", "c1", "c4", "c2"]:
        await service.create_catalog("t1", name, {"n": name}, "admin")
    assert dict(service.get_catalog("t1", "c4").properties) == {"n": "c4"}
    pages = all_pages(lambda tok: service.list_catalogs("t1", tok, 2))
    assert [[name for name, _ in page] for page in pages] == [["c1", "c2"], ["c3", "c4"], ["c5"]]
    with pytest.raises(AlreadyExists):
        await service.create_catalog("t1", "c1", {}, "admin")
    with pytest.raises(NoSuchCatalog):
        service.get_catalog("t1", "c9")

    updated = await service.update_record("t1", "c2", {"x": "y"}, [], 1, "admin")
    assert updated.version == 2 and dict(updated.properties) == {"n": "c2", "x": "y"}
    with pytest.raises(CommitConflict):
        await service.update_record("t1", "c2", {"x": "z"}, [], 1, "admin")
    assert dict(service.get_catalog("t1", "c2").properties) == {"n": "c2", "x": "y"}
    # The tenant's catalogs listing token is not a tenants listing token.
    token = service.list_catalogs("t1", None, 2).next_token
    with pytest.raises(InvalidPageToken):
        service.list_tenants(token, 2)


async def test_delete_refuses_non_empty_tenant_and_catalog(service: Metastore) -> None:
    await setup_catalog(service)
    with pytest.raises(NotEmpty):
        await service.delete_tenant("t1", "admin")
    await create(service, "t1", "c1", ns_key("db"))
    with pytest.raises(NotEmpty):
        await service.delete_catalog("t1", "c1", "admin")
    assert service.get_catalog("t1", "c1").version == 1
    await service.commit("t1", "c1", CommitRequest(changes=(DeleteEntity(ns_key("db")),)))
    await service.delete_catalog("t1", "c1", "admin")
    with pytest.raises(NoSuchCatalog):
        service.get_catalog("t1", "c1")
    assert service.list_catalogs("t1", None, None).items == []
    await service.delete_tenant("t1", "admin")
    with pytest.raises(NoSuchTenant):
        service.get_tenant("t1")
    with pytest.raises(NoSuchTenant):
        service.list_catalogs("t1", None, None)


# --- entity listings -----------------------------------------------------------------


async def test_page_token_pins_the_snapshot(service: Metastore) -> None:
    await setup_catalog(service)
    await create(service, "t1", "c1", ns_key("db"))
    await create(service, "t1", "c1", *(table_key(DB, f"t{i:02d}") for i in range(0, 20, 2)))
    original = service.list_entities("t1", "c1", DB, Kind.TABLE)
    assert table_names(original) == [f"t{i:02d}" for i in range(0, 20, 2)]
    assert original.next_token is None

    page1 = service.list_entities("t1", "c1", DB, Kind.TABLE, page_size=3)
    assert table_names(page1) == ["t00", "t02", "t04"]
    # Meanwhile: new tables before and after the cursor, drops on every page, an update.
    await create(service, "t1", "c1", table_key(DB, "t01"), table_key(DB, "t07"))
    await create(service, "t1", "c1", table_key(DB, "t99"))
    drops = (DeleteEntity(table_key(DB, "t02")), DeleteEntity(table_key(DB, "t10")))
    await service.commit("t1", "c1", CommitRequest(changes=drops))
    await service.commit(
        "t1", "c1", CommitRequest(changes=(UpdateEntity(table_key(DB, "t12"), {"v": "2"}),))
    )

    rest = all_pages(
        lambda tok: service.list_entities(
            "t1", "c1", DB, Kind.TABLE, page_token=tok or page1.next_token, page_size=3
        )
    )
    listed = [*page1.items, *(e for page in rest for e in page)]
    assert [e.path for e in listed] == [e.path for e in original.items]
    assert listed == original.items  # the same versions: t12 at version 1
    # A fresh listing sees the new state.
    now = service.list_entities("t1", "c1", DB, Kind.TABLE)
    assert table_names(now) == [
        "t00", "t01", "t04", "t06", "t07", "t08", "t12", "t14", "t16", "t18", "t99"
    ]  # fmt: skip


async def test_foreign_or_garbage_tokens_are_invalid(service: Metastore) -> None:
    await setup_catalog(service)
    await setup_catalog(service, "t1", "c2")
    for catalog in ("c1", "c2"):
        await create(service, "t1", catalog, ns_key("db"), ns_key("other"))
        await create(service, "t1", catalog, *(table_key(DB, f"t{i}") for i in range(5)))
        await create(service, "t1", catalog, *(table_key(("other",), f"t{i}") for i in range(5)))
        await create(service, "t1", catalog, *(view_key(DB, f"v{i}") for i in range(5)))
    token = service.list_entities("t1", "c1", DB, Kind.TABLE, page_size=2).next_token
    assert token is not None
    assert table_names(service.list_entities("t1", "c1", DB, Kind.TABLE, token, 2)) == ["t2", "t3"]
    for tenant, catalog, namespace, kind in (
        ("t1", "c1", ("other",), Kind.TABLE),  # another namespace
        ("t1", "c1", DB, Kind.VIEW),  # another kind
        ("t1", "c2", DB, Kind.TABLE),  # the same listing in another catalog
    ):
        with pytest.raises(InvalidPageToken):
            service.list_entities(tenant, catalog, namespace, kind, token, 2)
    commits_token = service.list_commits("t1", "c1", None, 1).next_token
    with pytest.raises(InvalidPageToken):
        service.list_entities("t1", "c1", DB, Kind.TABLE, commits_token, 2)
    with pytest.raises(InvalidPageToken):
        service.list_commits("t1", "c1", token, 2)
    for garbage in ("garbage", "!!!", token[:-3], "eyJ2IjoxfQ", token + "x"):
        with pytest.raises(InvalidPageToken):
            service.list_entities("t1", "c1", DB, Kind.TABLE, garbage, 2)


async def test_listing_a_missing_namespace_is_no_such_namespace(service: Metastore) -> None:
    await setup_catalog(service)
    with pytest.raises(NoSuchNamespace):
        service.list_entities("t1", "c1", ("nope",), Kind.TABLE)
    root = service.list_entities("t1", "c1", (), Kind.NAMESPACE)
    assert root.items == [] and root.next_token is None


async def test_point_in_time_reads(service: Metastore) -> None:
    await setup_catalog(service)
    await create(service, "t1", "c1", ns_key("db"))
    before = await create(service, "t1", "c1", table_key(DB, "orders"))
    update = UpdateEntity(table_key(DB, "orders"), {"owner": "bob"}, location="s3://b/o")
    await service.commit("t1", "c1", CommitRequest(changes=(update,)))
    await create(service, "t1", "c1", table_key(DB, "later"))

    old = service.get_entity("t1", "c1", table_key(DB, "orders"), at=before)
    new = service.get_entity("t1", "c1", table_key(DB, "orders"))
    assert (old.version, dict(old.properties), old.location) == (1, {"name": "orders"}, None)
    assert (new.version, new.location) == (2, "s3://b/o")
    assert dict(new.properties) == {"name": "orders", "owner": "bob"}
    assert old.entity_id == new.entity_id
    with pytest.raises(NoSuchTable):
        service.get_entity("t1", "c1", table_key(DB, "later"), at=before)
    assert table_names(service.list_entities("t1", "c1", DB, Kind.TABLE, at=before)) == ["orders"]
    with pytest.raises(NoSuchCommit):
        service.get_entity("t1", "c1", table_key(DB, "orders"), at=12345)


async def test_list_commits_newest_first_with_paging(service: Metastore) -> None:
    await setup_catalog(service)
    ids = [service.head("t1", "c1").id]
    ids.append(await create(service, "t1", "c1", ns_key("db")))
    for i in range(5):
        ids.append(await create(service, "t1", "c1", table_key(DB, f"t{i}")))
    first = service.list_commits("t1", "c1", None, 2)
    assert [c.id for c in first.items] == ids[::-1][:2]
    await create(service, "t1", "c1", table_key(DB, "after"))  # not in the pinned history
    rest = all_pages(lambda tok: service.list_commits("t1", "c1", tok or first.next_token, 2))
    history = [*first.items, *(c for page in rest for c in page)]
    assert [c.id for c in history] == ids[::-1]
    assert [c.seq for c in history] == list(range(7, 0, -1))
    assert history[-1].operation == "create catalog" and history[-1].parent == 0
    assert [len(p) for p in rest] == [2, 2, 1]


async def test_same_names_in_two_tenants_are_isolated(service: Metastore) -> None:
    for tenant in ("acme", "globex"):
        await setup_catalog(service, tenant, "sales")
        await create(service, tenant, "sales", ns_key("db"))
    await create(service, "acme", "sales", table_key(DB, "shared"), table_key(DB, "acme-only"))
    await service.commit(
        "globex",
        "sales",
        CommitRequest(changes=(CreateEntity(table_key(DB, "shared"), {"who": "globex"}),)),
    )
    acme = service.list_entities("acme", "sales", DB, Kind.TABLE)
    globex = service.list_entities("globex", "sales", DB, Kind.TABLE)
    assert table_names(acme) == ["acme-only", "shared"]
    assert table_names(globex) == ["shared"]
    assert dict(service.get_entity("globex", "sales", table_key(DB, "shared")).properties) == {
        "who": "globex"
    }
    assert dict(service.get_entity("acme", "sales", table_key(DB, "shared")).properties) == {
        "name": "shared"
    }
    with pytest.raises(NoSuchTable):
        service.get_entity("globex", "sales", table_key(DB, "acme-only"))
    # A commit id of one tenant's catalog means nothing in the other's.
    acme_head = service.head("acme", "sales").id
    with pytest.raises(NoSuchCommit):
        service.get_entity("globex", "sales", table_key(DB, "shared"), at=acme_head)
    assert [n for n, _ in service.list_catalogs("acme", None, None).items] == ["sales"]
    with pytest.raises(NoSuchCatalog):
        service.get_catalog("acme", "other")
