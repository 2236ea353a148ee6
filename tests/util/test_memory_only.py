"""Point reads on the event loop from memory alone, else in a worker thread.

The real engine over a real RocksDB: a read the node's memory answers runs on the
calling thread (the loop), one that would reach the database is run again from its
start in a worker thread, and the database is never read while ``memory_only``.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from harness.engine import build_engine
from metastore.catalog.service import Metastore
from metastore.engine.commits import CommitRequest
from metastore.errors import NoSuchTable
from metastore.iceberg import listing
from metastore.model.keys import SYSTEM_CATALOG, Kind
from metastore.model.records import Entity
from metastore.persistence.rocksdb import RocksDB, RocksDBPersistence
from metastore.security.authorizer import Authorizer
from metastore.security.policy import Policies
from metastore.security.principal import Principal
from metastore.security.securables import Securable
from metastore.util.memory_only import WouldWait, check, memory_only
from tests.builders import create_request, ns_key, table_key

KEY = table_key(("db",), "t")


@asynccontextmanager
async def rocks_service(path: Path) -> AsyncIterator[Metastore]:
    """The service over a RocksDB at ``path``: a fresh handle, so empty caches."""
    persistence = RocksDBPersistence(path, sync=False)
    executor = ThreadPoolExecutor(2, thread_name_prefix="commit")
    service, lanes = build_engine(persistence, executor)
    try:
        yield service
    finally:
        await lanes.close()
        executor.shutdown(wait=True)
        persistence.close()


async def with_table(service: Metastore) -> None:
    await service.create_tenant("t1", {}, "admin")
    await service.create_catalog("t1", "c1", {}, "admin")
    request = create_request(ns_key("db"), KEY)
    await service.commit("t1", "c1", CommitRequest(changes=request.changes))


def on_thread(read: Callable[[], Any], threads: list[int]) -> Callable[[], Any]:
    def noted() -> Any:
        threads.append(threading.get_ident())
        return read()

    return noted


def refused() -> bool:
    try:
        check()
    except WouldWait:
        return True
    return False


def test_check_raises_only_inside_the_block_and_only_on_its_thread() -> None:
    assert not refused()
    seen: list[bool] = []
    with memory_only():
        assert refused()
        other = threading.Thread(target=lambda: seen.append(refused()))
        other.start()
        other.join()
        with memory_only():
            pass
        assert refused(), "a nested block ended the outer one"
    assert seen == [False]
    assert not refused()


def test_the_database_is_never_read_while_memory_only(tmp_path: Path) -> None:
    db = RocksDB(tmp_path / "db", sync=False)
    try:
        db.write({b"k": b"v"})
        with memory_only(), pytest.raises(WouldWait):
            db.get(b"k")
        with memory_only(), pytest.raises(WouldWait):
            db.get_remembered(b"k")  # not read yet: the database would be
        assert db.get_remembered(b"k") == b"v"
        with memory_only():
            assert db.get_remembered(b"k") == b"v"  # from memory
        db.write({b"k": b"w", b"j": b"u"})  # a remembered key: remembered as written
        with memory_only():
            assert db.get_remembered(b"k") == b"w"
        with memory_only(), pytest.raises(WouldWait):
            db.get_remembered(b"j")  # never read: not remembered by its write either
        db.write_unsynced({b"k": None})
        with memory_only():
            assert db.get_remembered(b"k") is None  # deleted
        assert db.get(b"k") is None
        with memory_only(), pytest.raises(WouldWait):
            db.page(b"", b"")
        with memory_only(), pytest.raises(WouldWait):
            db.write({b"x": b"y"})
        assert db.get(b"x") is None
    finally:
        db.close()


async def test_a_warm_point_read_runs_on_the_loop_a_cold_one_in_a_thread(
    tmp_path: Path,
) -> None:
    loop_thread = threading.get_ident()
    async with rocks_service(tmp_path / "db") as service:
        await with_table(service)
        threads: list[int] = []
        read = on_thread(lambda: service.get_entity("t1", "c1", KEY), threads)
        # the commit read the catalog's ref and remembered the one it wrote
        first: Entity = await service.read_point(read)
        assert threads == [loop_thread]
        assert first.key == KEY
        assert (service.point_reads_on_loop, service.point_reads_in_thread) == (1, 0)
        with pytest.raises(NoSuchTable):  # answered on the loop too
            await service.read_point(service.get_entity, "t1", "c1", table_key(("db",), "u"))
        assert service.point_reads_on_loop == 2

    async with rocks_service(tmp_path / "db") as reopened:  # nothing in memory
        threads.clear()
        read = on_thread(lambda: reopened.get_entity("t1", "c1", KEY), threads)
        cold = await reopened.read_point(read)
        assert cold == first
        assert len(threads) == 2 and threads[0] == loop_thread and threads[1] != loop_thread
        assert (reopened.point_reads_on_loop, reopened.point_reads_in_thread) == (0, 1)
        threads.clear()
        assert await reopened.read_point(read) == first  # now from memory
        assert threads == [loop_thread]
        assert (reopened.point_reads_on_loop, reopened.point_reads_in_thread) == (1, 1)


async def test_a_read_stopped_partway_runs_again_from_its_start_in_a_thread(
    tmp_path: Path,
) -> None:
    calls: list[int] = []

    def read(value: int) -> int:
        calls.append(threading.get_ident())
        check()  # as the database or a file would
        return value * 2

    async with rocks_service(tmp_path / "db") as service:
        assert await service.read_point(read, 21) == 42
        assert (service.point_reads_on_loop, service.point_reads_in_thread) == (0, 1)
    loop_thread = threading.get_ident()
    assert len(calls) == 2 and calls[0] == loop_thread and calls[1] != loop_thread


async def test_a_handler_of_exception_does_not_swallow_the_signal(tmp_path: Path) -> None:
    def read() -> str:
        try:
            check()
        except Exception:  # what a read turning a failure into an answer looks like
            return "answered from the loop after all"
        return "read in a thread"

    async with rocks_service(tmp_path / "db") as service:
        assert await service.read_point(read) == "read in a thread"


async def test_a_listing_past_its_loop_share_runs_again_in_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with rocks_service(tmp_path / "db") as service:
        await with_table(service)  # db.t
        more = [table_key(("db",), f"u{i}") for i in range(3)]
        await service.commit("t1", "c1", CommitRequest(changes=create_request(*more).changes))

        def names() -> list[str]:
            return listing.names(service, "t1", "c1", ("db",), Kind.TABLE, lambda name: True)

        async def listed(loop_names: int) -> tuple[int, int]:
            """Where one listing ran: (on the loop, in a thread), counted."""
            monkeypatch.setattr(listing, "LOOP_NAMES", loop_names)
            before = service.point_reads_on_loop, service.point_reads_in_thread
            assert await service.read_point(names) == ["t", "u0", "u1", "u2"]
            return (
                service.point_reads_on_loop - before[0],
                service.point_reads_in_thread - before[1],
            )

        await listed(4)  # memory now holds the ref and the index
        assert await listed(4) == (1, 0)
        assert await listed(3) == (0, 1)  # 4 names: past the loop's 3
        assert await listed(4) == (1, 0)


@pytest.fixture
def database(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The thread of every access that reaches the database, in order."""
    threads: list[int] = []
    live = RocksDB._live

    def noted(db: RocksDB) -> Any:
        found = live(db)  # refuses first while memory-only
        threads.append(threading.get_ident())
        return found

    monkeypatch.setattr(RocksDB, "_live", noted)
    return threads


async def test_a_tenant_policy_is_read_on_the_loop_only_from_memory(
    tmp_path: Path, database: list[int]
) -> None:
    """The authorization middleware's policy read: the system catalog's HEAD and the
    policy built at it come from memory on the loop; anything else in a thread."""
    loop_thread = threading.get_ident()
    async with rocks_service(tmp_path / "db") as service:
        await with_table(service)
        policies = Policies(service)
        database.clear()
        first = await policies.ready("t1")  # the policy is built: in a thread
        assert loop_thread not in database
        assert service.point_reads_in_thread == 1
        database.clear()
        again = await policies.ready("t1")
        assert again is first and not database
        assert service.point_reads_on_loop == 1
        # the tenant's record changes: its system catalog's HEAD moves
        await service.update_record("t1", SYSTEM_CATALOG, {"k": "v"}, [], None, "admin")
        database.clear()
        assert await policies.ready("t1") is not first  # built again: in a thread
        assert loop_thread not in database
        assert service.point_reads_in_thread == 2

    async with rocks_service(tmp_path / "db") as reopened:  # nothing in memory
        database.clear()
        await Policies(reopened).ready("t1")
        assert database and loop_thread not in database  # the HEAD and the records
        assert (reopened.point_reads_on_loop, reopened.point_reads_in_thread) == (0, 1)


async def test_a_check_reads_its_catalog_id_before_as_a_point_read(
    tmp_path: Path, database: list[int]
) -> None:
    """``Checker.resolve``: the catalog record id a check needs, read before the check
    (the checks are plain calls) as a point read, so the check reads nothing."""
    loop_thread = threading.get_ident()
    alice = Principal("t1", "alice", "service")
    securable = Securable.of_namespace("t1", "c1", ("db",))
    async with rocks_service(tmp_path / "db") as service:
        await with_table(service)
        expected = service.get_catalog("t1", "c1").entity_id
        await service.commit("t1", "c1", create_request(table_key(("db",), "v")))
        checker = Authorizer(service, lambda principal: False).checker(alice)
        database.clear()
        await checker.resolve(securable)  # the commit left the catalog's ref in memory
        assert not database
        assert (service.point_reads_on_loop, service.point_reads_in_thread) == (1, 0)

        admin = Authorizer(service, lambda principal: True).checker(alice)
        await admin.resolve(securable)  # a service admin's checks read nothing
        other = Securable.of_namespace("t2", "c1", ("db",))
        await checker.resolve(other)  # another tenant's: refused whatever it holds
        assert (service.point_reads_on_loop, service.point_reads_in_thread) == (1, 0)

    async with rocks_service(tmp_path / "db") as reopened:  # nothing in memory
        checker = Authorizer(reopened, lambda principal: False).checker(alice)
        database.clear()
        await checker.resolve(securable)
        assert database and loop_thread not in database  # the catalog's ref, in a thread
        assert reopened.point_reads_in_thread == 1
        database.clear()
        assert checker.catalog_id("c1") == expected
        assert not database
