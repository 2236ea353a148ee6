"""The persistence contract, run against every backend.

A backend is correct when it passes this file unchanged; backend-specific
behaviour (durability, on-disk format) lives in its own test module.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from metastore.errors import ObjectConflict, RefConditionFailed
from metastore.model.codec import default_codec
from metastore.model.keys import ObjKey, RefKey
from metastore.persistence.base import (
    Persistence,
    Ref,
    RefUpdate,
    StoredObject,
    UpdateableObject,
    Write,
    WritesTogether,
)
from metastore.persistence.memory import MemoryPersistence
from metastore.persistence.rocksdb import RocksDBPersistence

MAIN = RefKey("t1", "c1", "main")
OTHER = RefKey("t1", "c2", "main")


@pytest.fixture(params=["memory", "rocksdb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Persistence]:
    backend: Persistence
    if request.param == "memory":
        backend = MemoryPersistence()
    else:
        backend = RocksDBPersistence(tmp_path / "db")
    yield backend
    backend.close()


def entity(key: ObjKey, name: str, created_at_us: int = 1) -> StoredObject:
    record = {
        "entity_id": key.id,
        "kind": "table",
        "path": ["db", name],
        "properties": {"owner": "me"},
        "location": None,
        "version": 1,
        "created_at_us": created_at_us,
        "updated_at_us": created_at_us,
        "attachments": {},
    }
    return StoredObject(key, default_codec().encode("entity", record), created_at_us)


def obj(
    key_id: int, data: bytes = b"v", *, tenant: str = "t1", catalog: str = "c1"
) -> StoredObject:
    return StoredObject(ObjKey(tenant, catalog, "entity", key_id), data, 1_000 + key_id)


def ref(key: RefKey, head: int, recent: tuple[int, ...] = ()) -> Ref:
    return Ref(key, head, 5_000 + head, recent)


def create(store: Persistence, key: RefKey, head: int = 0) -> Ref:
    new = ref(key, head)
    store.write([], RefUpdate(key, None, new))
    return new


# --- immutable objects ----------------------------------------------------------------


def test_get_objects_keeps_order_and_returns_none_for_absent(store: Persistence) -> None:
    a, b = obj(1, b"a"), obj(2, b"b")
    store.write([a, b])
    missing = ObjKey("t1", "c1", "entity", 3)
    assert store.get_objects([b.key, missing, a.key]) == [b, None, a]
    assert store.get_objects([]) == []


def test_write_stores_new_objects_with_their_timestamps(store: Persistence) -> None:
    objects = [obj(i, bytes([i]) * i) for i in range(1, 6)]
    store.write(objects)
    assert store.get_objects([o.key for o in objects]) == objects


def test_codec_encoded_object_round_trips(store: Persistence) -> None:
    stored = entity(ObjKey("t1", "c1", "entity", 42), "orders")
    store.write([stored])
    assert store.get_objects([stored.key]) == [stored]
    assert default_codec().decode("entity", stored.data)["path"] == ["db", "orders"]


def test_rewriting_identical_bytes_is_a_no_op(store: Persistence) -> None:
    first = obj(1, b"same")
    store.write([first])
    store.write([StoredObject(first.key, b"same", 99_999)])  # same bytes, later timestamp
    assert store.get_objects([first.key]) == [first]  # the original stays


def test_rewriting_different_bytes_conflicts_and_writes_nothing(store: Persistence) -> None:
    store.write([obj(1, b"old")])
    create(store, MAIN)
    fresh = obj(2, b"new")
    with pytest.raises(ObjectConflict):
        store.write([fresh, obj(1, b"changed")], RefUpdate(MAIN, 0, ref(MAIN, 1, (0,))))
    assert store.get_objects([obj(1).key, fresh.key]) == [obj(1, b"old"), None]
    assert store.get_ref(MAIN) == ref(MAIN, 0)


def test_two_values_for_one_id_in_one_call_conflict(store: Persistence) -> None:
    with pytest.raises(ObjectConflict):
        store.write([obj(1, b"a"), obj(2), obj(1, b"b")])
    assert store.get_objects([obj(1).key, obj(2).key]) == [None, None]
    store.write([obj(3, b"c"), obj(3, b"c")])  # the same value twice is fine
    assert store.get_objects([obj(3).key]) == [obj(3, b"c")]


# --- deletions (garbage collection) -------------------------------------------------------


def test_delete_removes_only_the_named_objects(store: Persistence) -> None:
    store.write([obj(1), obj(2)])
    store.write([], deletes=[obj(1).key, ObjKey("t1", "c1", "entity", 99)])  # absent: no-op
    assert store.get_objects([obj(1).key, obj(2).key]) == [None, obj(2)]
    assert [o.key for o in store.scan_objects("t1", "c1")] == [obj(2).key]


def test_deletes_apply_with_the_ref_cas_all_or_nothing(store: Persistence) -> None:
    create(store, MAIN, 0)
    store.write([obj(1), obj(2)])
    with pytest.raises(RefConditionFailed):  # lost CAS: nothing deleted, nothing written
        store.write([obj(3)], RefUpdate(MAIN, 7, ref(MAIN, 8)), deletes=[obj(1).key])
    assert store.get_objects([obj(1).key, obj(3).key]) == [obj(1), None]
    with pytest.raises(ObjectConflict):  # a conflicting object: nothing deleted either
        store.write([obj(2, b"other")], RefUpdate(MAIN, 0, ref(MAIN, 1)), deletes=[obj(1).key])
    assert store.get_objects([obj(1).key]) == [obj(1)]
    assert store.get_ref(MAIN) == ref(MAIN, 0)
    moved = ref(MAIN, 1, (0,))
    store.write([obj(3)], RefUpdate(MAIN, 0, moved), deletes=[obj(1).key])
    assert store.get_objects([obj(1).key, obj(3).key]) == [None, obj(3)]
    assert store.get_ref(MAIN) == moved


def test_an_object_deleted_and_written_in_one_call_stays(store: Persistence) -> None:
    """The existence check sees the call's own deletions: a write that references an
    object it also deletes keeps it (the deletion is planned, the reference is real)."""
    store.write([obj(1, b"piece")])
    store.write([obj(1, b"piece"), obj(2)], deletes=[obj(1).key, obj(2).key])
    assert store.get_objects([obj(1).key, obj(2).key]) == [obj(1, b"piece"), obj(2)]


def test_a_deleted_object_is_written_again_by_a_later_write(store: Persistence) -> None:
    store.write([obj(1, b"piece")])
    store.write([], deletes=[obj(1).key])
    assert store.get_objects([obj(1).key]) == [None]
    again = StoredObject(obj(1).key, b"piece", 77_777)
    store.write([again])  # not skipped as "already stored": it is gone
    assert store.get_objects([obj(1).key]) == [again]


# --- several writes together -------------------------------------------------------------


def test_write_each_refuses_only_the_writes_that_fail(store: Persistence) -> None:
    assert isinstance(store, WritesTogether)
    create(store, MAIN, 0)
    create(store, OTHER, 0)
    store.write([obj(9, b"stored")])
    outcomes = store.write_each(
        [
            Write([obj(1)], RefUpdate(MAIN, 0, ref(MAIN, 1, (0,)))),
            Write([obj(2, catalog="c2")], RefUpdate(OTHER, 7, ref(OTHER, 8))),  # stale HEAD
            Write([obj(3, catalog="c2"), obj(9, b"other")], RefUpdate(OTHER, 0, ref(OTHER, 4))),
            Write([obj(5)], deletes=[obj(9).key]),
        ]
    )
    assert [type(o) for o in outcomes] == [
        type(None),
        RefConditionFailed,
        ObjectConflict,
        type(None),
    ]
    assert store.get_ref(MAIN) == ref(MAIN, 1, (0,))
    assert store.get_ref(OTHER) == ref(OTHER, 0)  # neither refused write moved it
    keys = [obj(1).key, obj(2, catalog="c2").key, obj(3, catalog="c2").key, obj(5).key]
    assert store.get_objects(keys) == [obj(1), None, None, obj(5)]
    assert store.get_objects([obj(9).key]) == [None]  # the last write's deletion


def test_write_each_sees_the_writes_before_it(store: Persistence) -> None:
    """In order, as separate ``write`` calls would be: a later write swaps against an
    earlier one's HEAD and meets the objects it stored or deleted."""
    assert isinstance(store, WritesTogether)
    create(store, MAIN, 0)
    store.write([obj(7, b"piece")])
    outcomes = store.write_each(
        [
            Write([obj(1)], RefUpdate(MAIN, 0, ref(MAIN, 1, (0,))), deletes=[obj(7).key]),
            Write([obj(1, b"other")], RefUpdate(MAIN, 1, ref(MAIN, 9, (1, 0)))),
            Write([obj(2)], RefUpdate(MAIN, 1, ref(MAIN, 2, (1, 0)))),
            Write([obj(2), obj(7, b"piece")], RefUpdate(MAIN, 0, ref(MAIN, 3))),
            Write([obj(7, b"piece again")]),
        ]
    )
    assert [type(o) for o in outcomes] == [
        type(None),
        ObjectConflict,  # obj 1 was stored by the first write with other bytes
        type(None),
        RefConditionFailed,  # HEAD is 2 by now
        type(None),  # obj 7 was deleted by the first write: stored anew
    ]
    assert store.get_ref(MAIN) == ref(MAIN, 2, (1, 0))
    assert store.get_objects([obj(1).key, obj(2).key, obj(7).key]) == [
        obj(1),
        obj(2),
        obj(7, b"piece again"),
    ]


# --- references -------------------------------------------------------------------------


def test_ref_create_succeeds_once(store: Persistence) -> None:
    assert store.get_ref(MAIN) is None
    created = create(store, MAIN, 10)
    assert store.get_ref(MAIN) == created
    with pytest.raises(RefConditionFailed):
        store.write([], RefUpdate(MAIN, None, ref(MAIN, 11)))
    assert store.get_ref(MAIN) == created


def test_cas_with_expected_head_moves_ref_and_stores_objects(store: Persistence) -> None:
    create(store, MAIN, 0)
    new = ref(MAIN, 1, (0,))
    store.write([obj(1)], RefUpdate(MAIN, 0, new))
    assert store.get_ref(MAIN) == new
    assert store.get_objects([obj(1).key]) == [obj(1)]


def test_cas_with_wrong_head_fails_and_writes_nothing(store: Persistence) -> None:
    create(store, MAIN, 0)
    with pytest.raises(RefConditionFailed):
        store.write([obj(1), obj(2)], RefUpdate(MAIN, 7, ref(MAIN, 8)))
    assert store.get_ref(MAIN) == ref(MAIN, 0)
    assert store.get_objects([obj(1).key, obj(2).key]) == [None, None]


def test_stale_writer_sees_ref_conflict_before_object_conflict(store: Persistence) -> None:
    create(store, MAIN, 0)
    store.write([obj(1, b"winner")], RefUpdate(MAIN, 0, ref(MAIN, 1)))
    # The loser reused the id and holds a stale HEAD: "retry", not "bug".
    with pytest.raises(RefConditionFailed):
        store.write([obj(1, b"loser")], RefUpdate(MAIN, 0, ref(MAIN, 1)))
    assert store.get_objects([obj(1).key]) == [obj(1, b"winner")]


def test_delete_ref_with_expected_head(store: Persistence) -> None:
    create(store, MAIN, 3)
    with pytest.raises(RefConditionFailed):
        store.write([], RefUpdate(MAIN, 2, None))
    assert store.get_ref(MAIN) is not None
    store.write([], RefUpdate(MAIN, 3, None))
    assert store.get_ref(MAIN) is None
    assert list(store.scan_refs()) == []
    create(store, MAIN, 0)  # a deleted ref can be created again
    assert store.get_ref(MAIN) == ref(MAIN, 0)


def test_expected_head_for_missing_ref_fails(store: Persistence) -> None:
    with pytest.raises(RefConditionFailed):
        store.write([obj(1)], RefUpdate(MAIN, 0, ref(MAIN, 1)))
    with pytest.raises(RefConditionFailed):
        store.write([], RefUpdate(MAIN, 0, None))
    assert store.get_ref(MAIN) is None
    assert store.get_objects([obj(1).key]) == [None]


def test_ref_update_must_carry_its_own_key(store: Persistence) -> None:
    with pytest.raises(ValueError):
        store.write([obj(1)], RefUpdate(MAIN, None, ref(RefKey("t1", "c1", "other"), 1)))
    assert store.get_objects([obj(1).key]) == [None]


def test_scan_refs_all_and_by_tenant_sorted(store: Persistence) -> None:
    keys = [
        RefKey("ab", "c", "main"),
        RefKey("a", "c", "main"),
        RefKey("a", "", "main"),
        RefKey("b", "c", "main"),
        RefKey("a", "c", "dev"),
    ]
    for head, key in enumerate(keys):
        create(store, key, head)
    all_refs = list(store.scan_refs())
    assert [r.key for r in all_refs] == sorted(keys, key=RefKey.encode)
    assert [r.key for r in store.scan_refs("a")] == [
        RefKey("a", "", "main"),
        RefKey("a", "c", "dev"),
        RefKey("a", "c", "main"),
    ]
    assert [r.key for r in store.scan_refs("ab")] == [RefKey("ab", "c", "main")]
    assert list(store.scan_refs("nobody")) == []
    assert all_refs[0] == ref(RefKey("a", "", "main"), 2)


def test_scan_objects_stays_inside_one_catalog(store: Persistence) -> None:
    mine = [
        obj(2, tenant="t", catalog="c"),
        StoredObject(ObjKey("t", "c", "commit", 9), b"k", 1),
        obj(1, tenant="t", catalog="c"),
    ]
    others = [
        obj(1, tenant="t", catalog="cd"),
        obj(1, tenant="t", catalog=""),
        obj(1, tenant="tt", catalog="c"),
        obj(1, tenant="", catalog="c"),
    ]
    store.write(others + mine)
    scanned = list(store.scan_objects("t", "c"))
    assert scanned == sorted(mine, key=lambda o: o.key.encode())
    assert list(store.scan_objects("t", "cd")) == [others[0]]
    assert list(store.scan_objects("x", "c")) == []


def test_scans_cross_page_boundaries(store: Persistence) -> None:
    objects = [obj(i) for i in range(700)]  # more than one RocksDB scan page
    store.write(objects)
    assert list(store.scan_objects("t1", "c1")) == objects
    keys = [RefKey("t1", "c1", f"branch-{i:04}") for i in range(600)]
    for key in keys:
        create(store, key)
    assert [r.key for r in store.scan_refs("t1")] == keys


def test_abandoned_scan_does_not_block_writes(store: Persistence) -> None:
    store.write([obj(i) for i in range(300)])
    scan = store.scan_objects("t1", "c1")
    assert next(scan) == obj(0)
    store.write([obj(1_000)])
    del scan  # callers abandon a scan by dropping it
    assert store.get_objects([obj(1_000).key]) == [obj(1_000)]


def test_ref_advanced_keeps_recent_heads_newest_first(store: Persistence) -> None:
    current = create(store, MAIN, 0)
    for head in range(1, 31):
        new = current.advanced(head, 9_000 + head, keep=5)
        store.write([], RefUpdate(MAIN, current.head, new))
        current = new
    stored = store.get_ref(MAIN)
    assert stored == Ref(MAIN, 30, 9_030, (29, 28, 27, 26, 25))
    assert ref(MAIN, 0).advanced(1, 1).recent == (0,)
    assert ref(MAIN, 3, (2, 1)).advanced(4, 1, keep=0).recent == ()
    default = ref(MAIN, 100, tuple(range(99, 0, -1))).advanced(101, 1)
    assert default.recent == tuple(range(100, 80, -1))


def test_concurrent_cas_loses_no_update(store: Persistence) -> None:
    create(store, MAIN, 0)
    installed: list[list[int]] = [[] for _ in range(8)]
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            barrier.wait()
            for _ in range(200):
                while True:
                    current = store.get_ref(MAIN)
                    assert current is not None
                    new = current.advanced(current.head + 1, current.head + 1)
                    marker = StoredObject(ObjKey("t1", "c1", "commit", new.head), b"%d" % n, 0)
                    try:
                        store.write([marker], RefUpdate(MAIN, current.head, new))
                    except RefConditionFailed:
                        continue
                    installed[n].append(new.head)
                    break
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    final = store.get_ref(MAIN)
    assert final is not None and final.head == 1600
    assert sorted(itertools.chain.from_iterable(installed)) == list(range(1, 1601))
    # Each head's object was written by the thread that won that head, nobody else.
    keys = [ObjKey("t1", "c1", "commit", h) for h in range(1, 1601)]
    winners = {h: n for n, heads in enumerate(installed) for h in heads}
    found = store.get_objects(keys)
    assert [o.data if o else None for o in found] == [b"%d" % winners[k.id] for k in keys]


# --- updateable objects ---------------------------------------------------------------


LEASE = ObjKey("t1", "", "node-lease", 1)


def lease(token: str, data: bytes | None = None) -> UpdateableObject:
    if data is None:
        record = {"node_id": 1, "holder": "node-a", "leased_until_us": 10}
        data = default_codec().encode("node_lease", record)
    return UpdateableObject(LEASE, data, token)


def test_updateable_create_once(store: Persistence) -> None:
    assert store.get_updateable(LEASE) is None
    assert store.cas_updateable(LEASE, None, lease("v1"))
    assert not store.cas_updateable(LEASE, None, lease("v1b", b"other"))
    assert store.get_updateable(LEASE) == lease("v1")


def test_updateable_cas_by_token(store: Persistence) -> None:
    store.cas_updateable(LEASE, None, lease("v1"))
    assert not store.cas_updateable(LEASE, "wrong", lease("v2", b"x"))
    assert store.get_updateable(LEASE) == lease("v1")
    assert store.cas_updateable(LEASE, "v1", lease("v2", b"renewed"))
    assert store.get_updateable(LEASE) == lease("v2", b"renewed")
    assert not store.cas_updateable(LEASE, "v1", lease("v3"))  # stale token


def test_updateable_delete_with_token(store: Persistence) -> None:
    store.cas_updateable(LEASE, None, lease("v1"))
    assert not store.cas_updateable(LEASE, "v0", None)
    assert store.get_updateable(LEASE) == lease("v1")
    assert store.cas_updateable(LEASE, "v1", None)
    assert store.get_updateable(LEASE) is None
    assert not store.cas_updateable(LEASE, "v1", lease("v2"))  # gone: a token cannot match


def test_updateable_and_immutable_objects_are_apart(store: Persistence) -> None:
    store.cas_updateable(LEASE, None, lease("héllo", b""))  # non-ASCII token, empty data
    assert store.get_objects([LEASE]) == [None]
    assert list(store.scan_objects("t1", "")) == []
    assert store.get_updateable(LEASE) == lease("héllo", b"")
