"""Entity counts kept in every commit, and tenant quotas checked inside the commit: the
real engine, service and quota objects on the memory backend."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncIterator

import pytest

from metastore.catalog.quotas import (
    ENTITY_RETRY_AFTER_S,
    Quota,
    TenantEntityLimits,
    TenantQuotas,
    check_properties,
    names_quota,
)
from metastore.catalog.service import Metastore
from metastore.engine.commits import CommitRequest, EngineLimits
from metastore.engine.committer import Committer
from metastore.engine.lanes import CommitLanes
from metastore.engine.object_cache import ObjectCache
from metastore.engine.objects import CatalogObjects
from metastore.errors import BadRequest, TooManyRequests
from metastore.model.changes import CreateEntity, DeleteEntity, RenameEntity
from metastore.model.codec import default_codec
from metastore.model.counts import Counts, count, counted_kind
from metastore.model.ids import SnowflakeGenerator
from metastore.model.keys import EntityKey, Kind
from metastore.persistence.memory import MemoryPersistence
from metastore.util.clock import SystemClock
from tests.builders import SMALL_INDEX, ns_key, table_key, view_key

DB = ("db",)


@pytest.fixture
async def service(
    executor: concurrent.futures.ThreadPoolExecutor,
) -> AsyncIterator[tuple[Metastore, TenantQuotas]]:
    """A service whose engine checks the tenants' quotas (node default: 5 namespaces)."""
    persistence = MemoryPersistence()
    codec, cache, clock = default_codec(), ObjectCache(), SystemClock()
    holder: list[Metastore] = []

    def objects(tenant: str, catalog: str) -> CatalogObjects:
        return holder[0].objects(tenant, catalog)

    quotas = TenantQuotas(persistence, objects, Quota(max_namespaces=5))
    committer = Committer(
        persistence,
        codec,
        objects,
        SnowflakeGenerator(1, clock),
        clock,
        EngineLimits(index=SMALL_INDEX),
        entity_limits=TenantEntityLimits(persistence, objects, quotas),
        require_tenant=True,
    )
    lanes = CommitLanes(committer, executor)
    svc = Metastore(persistence, codec, cache, lanes)
    holder.append(svc)
    yield svc, quotas
    await lanes.close()
    persistence.close()


async def commit(svc: Metastore, catalog: str, *changes: CreateEntity | DeleteEntity) -> None:
    await svc.commit("t1", catalog, CommitRequest(changes=changes))


def counts(svc: Metastore, catalog: str = "c1") -> Counts | None:
    return svc.head("t1", catalog).counts


async def tenant(svc: Metastore, properties: dict[str, str], *catalogs: str) -> None:
    await svc.create_tenant("t1", properties, "admin")
    for catalog in catalogs:
        await svc.create_catalog("t1", catalog, {}, "admin")
        await commit(svc, catalog, CreateEntity(ns_key(*DB)))


async def test_every_commit_carries_the_catalogs_counts(
    service: tuple[Metastore, TenantQuotas],
) -> None:
    svc, _ = service
    await tenant(svc, {}, "c1")
    assert counts(svc) == Counts(1, 0, 0)
    await commit(svc, "c1", CreateEntity(table_key(DB, "a")), CreateEntity(table_key(DB, "b")))
    await commit(svc, "c1", CreateEntity(view_key(DB, "v")), CreateEntity(ns_key("db", "x")))
    assert counts(svc) == Counts(2, 2, 1)
    rename = RenameEntity(table_key(DB, "a"), table_key(("db", "x"), "a"))
    await svc.commit("t1", "c1", CommitRequest(changes=(rename,)))
    assert counts(svc) == Counts(2, 2, 1)  # moved, not created
    await commit(svc, "c1", DeleteEntity(table_key(DB, "b")), DeleteEntity(view_key(DB, "v")))
    assert counts(svc) == Counts(2, 1, 0)
    objects = svc.objects("t1", "c1")
    head = svc.head("t1", "c1")
    assert count(objects.index(head)) == head.counts  # what a catalog without counts gets
    assert counts(svc, "") == Counts()  # the tenant's own records are not counted


async def test_a_tenant_quota_counts_all_its_catalogs(
    service: tuple[Metastore, TenantQuotas],
) -> None:
    svc, _ = service
    await tenant(svc, {"quota.max-tables": "3"}, "c1", "c2")
    await commit(svc, "c1", CreateEntity(table_key(DB, "a")), CreateEntity(table_key(DB, "b")))
    await commit(svc, "c2", CreateEntity(table_key(DB, "a")))
    heads = (svc.head("t1", "c1").id, svc.head("t1", "c2").id)
    for catalog in ("c1", "c2"):
        with pytest.raises(TooManyRequests, match="at most 3 tables") as refused:
            await commit(svc, catalog, CreateEntity(table_key(DB, "z")))
        assert refused.value.retry_after == ENTITY_RETRY_AFTER_S
    assert (svc.head("t1", "c1").id, svc.head("t1", "c2").id) == heads  # nothing written
    await commit(svc, "c1", CreateEntity(view_key(DB, "v")))  # other kinds: no limit set
    await commit(svc, "c2", DeleteEntity(table_key(DB, "a")))
    await commit(svc, "c1", CreateEntity(table_key(DB, "z")))
    assert counts(svc, "c1") == Counts(1, 3, 1) and counts(svc, "c2") == Counts(1, 0, 0)


async def test_a_commit_over_the_quota_fails_whole_and_shrinking_always_works(
    service: tuple[Metastore, TenantQuotas],
) -> None:
    svc, _ = service
    await tenant(svc, {}, "c1")
    for i in range(4):  # the node's default: 5 namespaces (db is the first)
        await commit(svc, "c1", CreateEntity(ns_key(f"n{i}")))
    with pytest.raises(TooManyRequests, match="at most 5 namespaces"):
        await commit(svc, "c1", CreateEntity(ns_key("x")), DeleteEntity(ns_key("n0")),
                     CreateEntity(ns_key("y")))  # fmt: skip
    assert counts(svc) == Counts(5, 0, 0)
    await svc.update_record("t1", "", {"quota.max-namespaces": "2"}, (), None, "admin")
    await commit(svc, "c1", DeleteEntity(ns_key("n0")))  # over a lowered quota: may shrink
    # a commit that leaves the count as it was is not growing it; one that grows it is refused
    await commit(svc, "c1", CreateEntity(ns_key("x")), DeleteEntity(ns_key("n1")))
    with pytest.raises(TooManyRequests):
        await commit(svc, "c1", CreateEntity(ns_key("y")), CreateEntity(ns_key("z")),
                     DeleteEntity(ns_key("n2")))  # fmt: skip
    assert counts(svc) == Counts(4, 0, 0)
    await svc.update_record("t1", "", {"quota.max-namespaces": "0"}, (), None, "admin")
    await commit(svc, "c1", *(CreateEntity(ns_key(f"m{i}")) for i in range(10)))  # 0: no limit
    assert counts(svc) == Counts(14, 0, 0)


async def test_concurrent_creates_in_one_catalog_stop_exactly_at_the_quota(
    service: tuple[Metastore, TenantQuotas],
) -> None:
    svc, _ = service
    await tenant(svc, {"quota.max-tables": "10"}, "c1")
    results = await asyncio.gather(
        *(commit(svc, "c1", CreateEntity(table_key(DB, f"t{i}"))) for i in range(40)),
        return_exceptions=True,
    )
    assert sum(r is None for r in results) == 10, results
    assert all(isinstance(r, TooManyRequests) for r in results if r is not None)
    assert counts(svc) == Counts(1, 10, 0)
    listed = svc.list_entities("t1", "c1", DB, Kind.TABLE, page_size=100)
    assert len(listed.items) == 10


async def test_quotas_follow_the_tenant_record_over_the_node_defaults(
    service: tuple[Metastore, TenantQuotas],
) -> None:
    svc, quotas = service
    assert quotas.of("t1") is None  # no such tenant
    await tenant(svc, {"quota.requests-per-second": "2.5", "quota.max-views": "7"})
    assert quotas.of("t1") == Quota(2.5, 0, 5, 0, 7)
    assert quotas.of("t1").capacity == 2.5  # type: ignore[union-attr]
    await svc.update_record("t1", "", {"quota.burst": "9"}, ("quota.max-views",), None, "admin")
    assert quotas.of("t1") == Quota(2.5, 9, 5, 0, 0)
    assert Quota(0.2).capacity == 1.0  # at least one request at once
    # a value from before the keys were reserved is left out, not trusted
    assert Quota(max_tables=4).over({"quota.max-tables": "lots"}) == Quota(max_tables=4)


@pytest.mark.parametrize(
    ("updates", "removals"),
    [
        ({"quota.max-table": "1"}, ()),  # unknown quota
        ({}, ("quota.whatever",)),
        ({"quota.max-tables": "-1"}, ()),
        ({"quota.max-tables": "1.5"}, ()),
        ({"quota.max-tables": "²"}, ()),
        ({"quota.max-tables": "1000000000001"}, ()),
        ({"quota.requests-per-second": "nan"}, ()),
        ({"quota.requests-per-second": "inf"}, ()),
        ({"quota.requests-per-second": " 1"}, ()),
        ({"quota.requests-per-second": "-0.5"}, ()),
        ({"quota.burst": "0.5"}, ()),
    ],
)
def test_quota_properties_are_checked(updates: dict[str, str], removals: tuple[str, ...]) -> None:
    assert names_quota(updates, removals)
    with pytest.raises(BadRequest, match="quota"):
        check_properties(updates, removals)


def test_good_quota_properties_pass() -> None:
    check_properties(
        {"quota.requests-per-second": "0.5", "quota.max-views": "0", "team": "x"},
        ("quota.burst",),
    )
    assert not names_quota({"team": "x"}, ("quotas",))


def test_counts_of_an_empty_catalog() -> None:
    assert count(None) == Counts()
    assert Counts(1, 2, 3).grown(Counts(1, 1, 4)) == frozenset({Kind.TABLE})
    assert Counts(1, 2, 3).added({Kind.VIEW: -3, Kind.SYSTEM: 5}) == Counts(1, 2, 0)
    keys = [EntityKey(Kind.VIEW, DB, "v"), EntityKey(Kind.SYSTEM, (), "location:/x")]
    assert [counted_kind(k.encode()) for k in keys] == [Kind.VIEW, None]


async def test_fresh_answers_a_recent_read_until_the_tenant_changes(
    executor: concurrent.futures.ThreadPoolExecutor,
) -> None:
    """The request-rate check's read without the store: what ``of`` read under a second
    ago; a commit of this node to the tenant's records (its quota) forgets it."""
    persistence = MemoryPersistence()
    codec, cache, clock = default_codec(), ObjectCache(), SystemClock()
    holder: list[Metastore] = []

    def objects(tenant: str, catalog: str) -> CatalogObjects:
        return holder[0].objects(tenant, catalog)

    now = [100.0]
    quotas = TenantQuotas(persistence, objects, Quota(), clock=lambda: now[0])
    committer = Committer(
        persistence, codec, objects, SnowflakeGenerator(1, clock), clock, require_tenant=True
    )
    lanes = CommitLanes(committer, executor)
    svc = Metastore(persistence, codec, cache, lanes)
    svc.tenant_changed.append(quotas.forget)
    holder.append(svc)
    try:
        assert quotas.fresh("t1") == (False, None)
        assert quotas.of("t1") is None  # no such tenant: known as such
        assert quotas.fresh("t1") == (True, None)
        await svc.create_tenant("t1", {"quota.requests-per-second": "5"}, "admin")
        assert quotas.fresh("t1") == (False, None)  # forgotten by the commit
        assert quotas.of("t1") == Quota(requests_per_second=5.0)
        assert quotas.fresh("t1") == (True, Quota(requests_per_second=5.0))
        now[0] += TenantQuotas.FRESH_S
        assert quotas.fresh("t1") == (False, None)  # a second old: read again
        await svc.create_catalog("t1", "c1", {}, "admin")
        quotas.of("t1")
        await commit(svc, "c1", CreateEntity(ns_key(*DB)))
        assert quotas.fresh("t1")[0]  # a catalog's commit is not the tenant's records
    finally:
        await lanes.close()
        persistence.close()


async def test_a_catalog_commit_of_a_missing_tenant_is_refused_in_its_batch(
    executor: concurrent.futures.ThreadPoolExecutor,
) -> None:
    persistence = MemoryPersistence()
    codec, cache, clock = default_codec(), ObjectCache(), SystemClock()
    holder: list[Metastore] = []

    def objects(tenant: str, catalog: str) -> CatalogObjects:
        return holder[0].objects(tenant, catalog)

    committer = Committer(
        persistence, codec, objects, SnowflakeGenerator(1, clock), clock, require_tenant=True
    )
    lanes = CommitLanes(committer, executor)
    svc = Metastore(persistence, codec, cache, lanes)
    holder.append(svc)
    try:
        attempts = [commit(svc, "c1", CreateEntity(ns_key(f"n{i}"))) for i in range(3)]
        results = await asyncio.gather(*attempts, return_exceptions=True)
        assert [type(r).__name__ for r in results] == ["NoSuchTenant"] * 3
        assert list(persistence.scan_refs()) == []
    finally:
        await lanes.close()
        persistence.close()
