"""``ViewStore`` on a real RocksDB, fed plain messages (no broker): it writes what
the apply rules decide, reads like any store, refuses writes, and resumes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from metastore.cluster.cluster_config import ClusterConfig
from metastore.cluster.view.digest import digest, fingerprint
from metastore.cluster.view.view_model import ReadOnlyView, ViewError
from metastore.cluster.view.view_store import ViewStore
from metastore.model.keys import ObjKey, RefKey
from metastore.persistence.base import RefUpdate, UpdateableObject
from metastore.persistence.rocksdb import RocksDBPersistence, StoreFormatError
from metastore.persistence.rocksdb_layout import DATA_PREFIXES
from tests.cluster.view_log import PARTITIONS, TENANT, DictView, Log, Rec

CONFIG = ClusterConfig("localhost:9", prefix="t", partitions=PARTITIONS)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ViewStore]:
    view = ViewStore(tmp_path / "view", CONFIG)
    try:
        yield view
    finally:
        view.close()


def history(log: Log) -> list[Rec]:
    """A partition's life: an owner, commits, an updateable, a stale record, a held ref."""
    refs_barrier, objects_barrier = log.barrier()
    return [
        refs_barrier,
        objects_barrier,
        *log.objects(log.obj(1), log.obj(2)),
        log.ref(None, log.ref_value(2)),
        log.updateable(1, None, "a"),
        log.ref(1, log.ref_value(3, 1)),  # expects a HEAD the view does not have: dropped
        *log.objects(log.obj(3)),
        log.ref(2, log.ref_value(3, 2)),
        log.ref(3, log.ref_value(4, 3), name="dev", objects_offset=99),  # waits
    ]


def test_the_store_holds_what_the_rules_decide_and_reads_like_a_store(store: ViewStore) -> None:
    log = Log()
    records = history(log)
    result = store.apply(records)
    in_dict = DictView()
    in_dict.apply(records)

    assert (result.consumed, result.applied, result.dropped, result.waiting) == (10, 8, 1, 1)
    assert digest(store) == fingerprint(in_dict.items)
    with store.snapshot() as snapshot:
        stored = [pair for prefix in DATA_PREFIXES for pair in snapshot.items(prefix)]
    assert stored == [pair for prefix in DATA_PREFIXES for pair in in_dict.items(prefix)]

    main = RefKey(TENANT, log.catalog, "main")
    ref = store.get_ref(main)
    assert ref is not None and (ref.head, ref.recent) == (3, (2,))
    assert [r.key for r in store.scan_refs(TENANT)] == [main]
    assert store.get_objects([log.obj(1).key, log.obj(9).key]) == [log.obj(1), None]
    assert [o.key.id for o in store.scan_objects(TENANT, log.catalog)] == [1, 2, 3]
    lease = store.get_updateable(ObjKey(TENANT, log.catalog, "lease", 1))
    assert lease is not None and lease.token == "a"
    assert store.state == in_dict.state
    assert store.dropped_among("refs", log.partition, [1, 2, 3]) == [records[6].at] == [2]


def test_writes_through_a_view_are_refused(store: ViewStore) -> None:
    log = Log()
    with pytest.raises(ReadOnlyView):
        store.write([log.obj(1)], RefUpdate(RefKey(TENANT, log.catalog, "main"), None, None))
    key = ObjKey(TENANT, log.catalog, "lease", 1)
    with pytest.raises(ReadOnlyView):
        store.cas_updateable(key, None, UpdateableObject(key, b"x", "t"))
    assert store.get_objects([log.obj(1).key]) == [None]


def test_a_reopened_view_resumes_from_its_stored_state(tmp_path: Path) -> None:
    log = Log()
    records = history(log)
    first = ViewStore(tmp_path / "view", CONFIG)
    try:
        first.apply(records)
        before = first.state
    finally:
        first.close()

    again = ViewStore(tmp_path / "view", CONFIG)
    try:
        state = again.state
        assert (state.offsets, state.barriers, state.floors, state.dropped) == (
            before.offsets,
            before.barriers,
            before.floors,
            before.dropped,
        )
        # The held ref was not stored: it is read again from the stored refs offset on.
        assert state.pending == {} and before.pending
        assert again.refs_read(log.partition) == records[-1].at
        result = again.apply(records)  # a consumer re-reads from there: only the held one counts
        assert (result.applied, result.dropped, result.waiting) == (0, 0, 1)
    finally:
        again.close()


def test_a_failed_batch_writes_and_publishes_nothing(store: ViewStore) -> None:
    log = Log()
    (good,) = log.objects(log.obj(1))
    assert good.raw_value is not None
    newer = Rec(
        "objects", good.part, good.at + 1, good.raw_key, b"\x01\xff\xff" + good.raw_value[3:]
    )
    with pytest.raises(ViewError):
        store.apply([good, newer])
    assert store.offset("objects", log.partition) == 0
    assert store.get_objects([log.obj(1).key]) == [None]


def test_an_embedded_store_is_not_opened_as_a_view(tmp_path: Path) -> None:
    log = Log()
    embedded = RocksDBPersistence(tmp_path / "db")
    embedded.write([log.obj(1)])
    embedded.close()
    with pytest.raises(StoreFormatError, match="not a view"):
        ViewStore(tmp_path / "db", CONFIG)
    ViewStore(tmp_path / "other", CONFIG).close()
    with pytest.raises(ViewError, match="this view is of"):
        ViewStore(tmp_path / "other", ClusterConfig("localhost:9", prefix="u", partitions=2))


def test_the_objects_a_batch_deletes_are_announced(store: ViewStore) -> None:
    """A node's object cache forgets what garbage collection deleted, as its view applies
    the owner's tombstones (a history read must not find a collected commit there)."""
    log = Log()
    told: list[list[ObjKey]] = []
    store.on_deleted = told.append
    store.apply(log.objects(log.obj(1), log.obj(2)))
    assert told == []  # writes announce nothing
    store.apply([log.raw("objects", b"o" + log.obj(1).key.encode(), None)])
    assert told == [[log.obj(1).key]]
    assert store.get_objects([log.obj(1).key, log.obj(2).key]) == [None, log.obj(2)]
