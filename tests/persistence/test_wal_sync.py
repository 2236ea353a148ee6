"""Group sync of the WAL: one fsync covers every write made before it, a write returns
only after a sync that began after it, and readers never see a ref before its sync.

The real RocksDB sync runs in every test; a gate in front of it holds the first one
open, so what happens while a sync is in flight is observed, not guessed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from metastore.errors import RefConditionFailed
from metastore.model.keys import ObjKey, RefKey
from metastore.persistence.base import Ref, RefUpdate, StoredObject, Write
from metastore.persistence.rocksdb import RocksDBPersistence
from metastore.persistence.rocksdb_layout import ref_key
from metastore.persistence.wal_sync import GroupSync

WAIT = 30.0


class Gate:
    """Holds the first ``held`` syncs until opened; counts every sync that ran."""

    def __init__(self, sync: Callable[[], None], held: int = 1) -> None:
        self._sync = sync
        self._held = held
        self.entered = threading.Event()
        self.open = threading.Event()
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1
        if self.calls <= self._held:
            self.entered.set()
            assert self.open.wait(WAIT)
        self._sync()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RocksDBPersistence]:
    store = RocksDBPersistence(tmp_path / "db", sync=True)
    yield store
    store.close()


def _ref(catalog: str, head: int) -> Ref:
    return Ref(RefKey("t", catalog, "main"), head, head * 10)


def _write(store: RocksDBPersistence, catalog: str, expected: int | None, head: int) -> None:
    obj = StoredObject(ObjKey("t", catalog, "entity", head), b"v%d" % head, head)
    store.write([obj], RefUpdate(RefKey("t", catalog, "main"), expected, _ref(catalog, head)))


def _in_thread(function: Callable[[], None]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            function()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


def test_followers_share_one_sync() -> None:
    synced: list[int] = []
    gate = Gate(lambda: synced.append(1))
    group = GroupSync(gate)
    first = group.written()
    leader, errors = _in_thread(lambda: group.wait(first))
    assert gate.entered.wait(WAIT)
    tickets = [group.written() for _ in range(4)]  # written while the first sync runs
    followers = [_in_thread(lambda t=t: group.wait(t)) for t in tickets]
    gate.open.set()
    for thread, found in [(leader, errors), *followers]:
        thread.join(WAIT)
        assert not thread.is_alive() and not found
    # the first sync began before the four writes, so one more covers all of them
    assert group.syncs == 2 == len(synced)
    group.wait(tickets[-1])  # already covered: no further sync
    assert group.syncs == 2


def test_a_failed_sync_fails_its_writers_and_the_next_one_retries() -> None:
    failures = [OSError("disk gone")]

    def sync() -> None:
        if failures:
            raise failures.pop()

    group = GroupSync(sync)
    ticket = group.written()
    with pytest.raises(OSError, match="disk gone"):
        group.wait(ticket)
    group.wait(ticket)  # not covered by the failed sync: a new one runs
    assert group.syncs == 1


def test_readers_see_a_ref_only_after_its_sync(
    store: RocksDBPersistence, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(store, "c", None, 1)
    gate = Gate(store.db.sync_wal)
    monkeypatch.setattr(store.db, "sync_wal", gate)
    thread, errors = _in_thread(lambda: _write(store, "c", 1, 2))
    assert gate.entered.wait(WAIT)
    key = RefKey("t", "c", "main")
    assert store.db.get(ref_key(key)) is not None  # RocksDB has the new HEAD already ...
    assert store.get_ref(key) == _ref("c", 1)  # ... readers are shown the one on disk
    assert list(store.scan_refs()) == [_ref("c", 1)]
    assert list(store.scan_refs("t")) == [_ref("c", 1)]
    with pytest.raises(RefConditionFailed):  # a swap is against the latest write, synced or not
        _write(store, "c", 1, 3)
    gate.open.set()
    thread.join(WAIT)
    assert not errors
    assert store.get_ref(key) == _ref("c", 2)
    assert list(store.scan_refs()) == [_ref("c", 2)]


def test_a_new_ref_and_a_deleted_ref_wait_for_their_sync(
    store: RocksDBPersistence, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(store, "b", None, 1)
    gate = Gate(store.db.sync_wal)
    monkeypatch.setattr(store.db, "sync_wal", gate)
    created, created_errors = _in_thread(lambda: _write(store, "a", None, 5))
    assert gate.entered.wait(WAIT)
    assert store.get_ref(RefKey("t", "a", "main")) is None
    assert list(store.scan_refs()) == [_ref("b", 1)]
    key_b = RefKey("t", "b", "main")
    deleted, deleted_errors = _in_thread(lambda: store.write([], RefUpdate(key_b, 1, None)))
    while store.db.get(ref_key(key_b)) is not None:  # until RocksDB took the deletion
        assert deleted.is_alive()
        time.sleep(0.001)
    assert store.get_ref(key_b) == _ref("b", 1)
    assert list(store.scan_refs()) == [_ref("b", 1)]
    gate.open.set()
    for thread, errors in ((created, created_errors), (deleted, deleted_errors)):
        thread.join(WAIT)
        assert not errors
    assert store.get_ref(key_b) is None
    assert list(store.scan_refs()) == [_ref("a", 5)]


def test_writes_of_different_catalogs_share_syncs(
    store: RocksDBPersistence, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = Gate(store.db.sync_wal)
    monkeypatch.setattr(store.db, "sync_wal", gate)
    first, first_errors = _in_thread(lambda: _write(store, "c0", None, 1))
    assert gate.entered.wait(WAIT)
    writers = [_in_thread(lambda i=i: _write(store, f"c{i}", None, 1)) for i in range(1, 5)]
    for i in range(1, 5):  # until RocksDB took each write (its sync is what it waits on)
        while store.db.get(ref_key(RefKey("t", f"c{i}", "main"))) is None:
            time.sleep(0.001)
    gate.open.set()
    for thread, errors in [(first, first_errors), *writers]:
        thread.join(WAIT)
        assert not errors
    # five writes; the first sync began before the other four: one more sync covers them
    # (two if the last writer had not yet taken its ticket when the first sync ended)
    assert store.syncs <= 3
    assert [ref.key.catalog for ref in store.scan_refs()] == [f"c{i}" for i in range(5)]


def test_writes_made_together_take_one_sync_and_stay_hidden_until_it(
    store: RocksDBPersistence, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(store, "b", None, 1)
    gate = Gate(store.db.sync_wal)
    monkeypatch.setattr(store.db, "sync_wal", gate)
    key_a, key_b = RefKey("t", "a", "main"), RefKey("t", "b", "main")
    writes = [
        Write(
            [StoredObject(ObjKey("t", "a", "entity", 5), b"v5", 5)],
            RefUpdate(key_a, None, _ref("a", 5)),
        ),
        Write([], RefUpdate(key_b, 1, _ref("b", 2))),
        Write([], RefUpdate(key_b, 2, _ref("b", 3))),
    ]
    outcomes: list[object] = []
    thread, errors = _in_thread(lambda: outcomes.extend(store.write_each(writes)))
    assert gate.entered.wait(WAIT)
    assert store.db.get(ref_key(key_a)) is not None  # RocksDB has both ...
    assert store.get_ref(key_a) is None  # ... readers see neither before the sync
    assert store.get_ref(key_b) == _ref("b", 1)
    assert list(store.scan_refs()) == [_ref("b", 1)]
    gate.open.set()
    thread.join(WAIT)
    assert not errors and outcomes == [None, None, None]
    assert gate.calls == 1
    assert list(store.scan_refs()) == [_ref("a", 5), _ref("b", 3)]


def test_no_fsync_mode_writes_directly(tmp_path: Path) -> None:
    store = RocksDBPersistence(tmp_path / "db", sync=False)
    try:
        _write(store, "c", None, 1)
        assert store.get_ref(RefKey("t", "c", "main")) == _ref("c", 1)
        assert store.syncs == 0
    finally:
        store.close()
