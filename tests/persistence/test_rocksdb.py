"""RocksDB-only behaviour: durability across close and SIGKILL, and the format marker.

The contract itself is in ``test_contract.py``; this file covers what only a
store on disk can get wrong.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from rocksdict import Options, Rdict

import metastore
from harness.threads import run_interleaved
from metastore.errors import ObjectConflict, RefConditionFailed
from metastore.model.keys import ObjKey, RefKey
from metastore.persistence.base import Ref, RefUpdate, StoredObject, UpdateableObject
from metastore.persistence.rocksdb import RocksDB, RocksDBPersistence, StoreFormatError

MAIN = RefKey("t", "c", "main")


def _raw_put(path: Path, key: bytes, value: bytes) -> None:
    db = Rdict(str(path), Options(raw_mode=True))
    db[key] = value
    db.close()


def test_data_survives_close_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "db"
    store = RocksDBPersistence(path)
    objects = [StoredObject(ObjKey("t", "c", "entity", i), b"v%d" % i, i) for i in range(50)]
    head = Ref(MAIN, 7, 70, (6, 5))
    lease = UpdateableObject(ObjKey("t", "", "node-lease", 1), b"lease", "tok")
    store.write(objects, RefUpdate(MAIN, None, head))
    assert store.cas_updateable(lease.key, None, lease)
    store.close()
    store.close()  # idempotent

    reopened = RocksDBPersistence(path)
    try:
        assert reopened.get_objects([o.key for o in objects]) == objects
        assert reopened.get_ref(MAIN) == head
        assert list(reopened.scan_refs()) == [head]
        assert list(reopened.scan_objects("t", "c")) == objects
        assert reopened.get_updateable(lease.key) == lease
    finally:
        reopened.close()


def test_closed_store_refuses_calls(tmp_path: Path) -> None:
    store = RocksDBPersistence(tmp_path / "db")
    store.close()
    with pytest.raises(RuntimeError, match="closed"):
        store.get_ref(MAIN)
    with pytest.raises(RuntimeError, match="closed"):
        store.write([], RefUpdate(MAIN, None, Ref(MAIN, 1, 1)))


def test_abandoned_scan_does_not_pin_the_database_open(tmp_path: Path) -> None:
    path = tmp_path / "db"
    store = RocksDBPersistence(path)
    store.write([StoredObject(ObjKey("t", "c", "entity", i), b"v", 1) for i in range(1_000)])
    scan = store.scan_objects("t", "c")
    next(scan)
    store.close()  # the half-read scan still exists
    RocksDBPersistence(path).close()  # would fail on RocksDB's LOCK if it pinned the DB
    del scan  # callers abandon a scan by dropping it


def test_other_format_is_refused_and_the_lock_released(tmp_path: Path) -> None:
    path = tmp_path / "db"
    RocksDBPersistence(path).close()
    _raw_put(path, b"mformat", b"2")
    with pytest.raises(StoreFormatError, match="format b'2'"):
        RocksDBPersistence(path)
    _raw_put(path, b"mformat", b"1")  # the refused open left the database closed
    RocksDBPersistence(path).close()


def test_unmarked_database_with_data_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "db"
    _raw_put(path, b"some", b"thing")
    with pytest.raises(StoreFormatError, match="no format marker"):
        RocksDBPersistence(path)


# The child commits 1, 2, 3, ...: commit k stores three objects and moves the ref
# from k-1 to k in one write, then acknowledges k on stdout.
CHILD = """
import sys
from metastore.model.keys import ObjKey, RefKey
from metastore.persistence.base import Ref, RefUpdate, StoredObject
from metastore.persistence.rocksdb import RocksDBPersistence

store = RocksDBPersistence(sys.argv[1], sync=sys.argv[2] == "1")
key = RefKey("t", "c", "main")
store.write([], RefUpdate(key, None, Ref(key, 0, 0)))
print(0, flush=True)
head = 0
while True:
    new = head + 1
    objects = [
        StoredObject(ObjKey("t", "c", "commit", new * 10 + i), b"%d" % new, new) for i in range(3)
    ]
    store.write(objects, RefUpdate(key, head, Ref(key, new, new, (head,))))
    print(new, flush=True)
    head = new
"""


def _commit_keys(k: int) -> list[ObjKey]:
    return [ObjKey("t", "c", "commit", k * 10 + i) for i in range(3)]


@pytest.mark.parametrize("sync", [False, True], ids=["nosync", "sync"])
def test_acknowledged_writes_survive_sigkill(tmp_path: Path, sync: bool) -> None:
    path = tmp_path / "db"
    root = str(Path(metastore.__file__).resolve().parents[1])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
    }
    argv = [sys.executable, "-c", CHILD, str(path), "1" if sync else "0"]
    with (
        (tmp_path / "stderr").open("w") as stderr,
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env) as child,
    ):
        watchdog = threading.Timer(60, child.kill)  # never hang the suite on a stuck child
        watchdog.start()
        acked = -1
        try:
            assert child.stdout is not None
            while acked < 300:
                line = child.stdout.readline()
                if not line:
                    pytest.fail(f"child exited early: {(tmp_path / 'stderr').read_text()}")
                acked = int(line)
            time.sleep(0.005)  # let it get into the middle of further writes
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
        finally:
            watchdog.cancel()
            child.kill()
    assert child.returncode == -signal.SIGKILL

    store = RocksDBPersistence(path)
    try:
        head = store.get_ref(MAIN)
        assert head is not None and head.head >= acked
        assert head.recent == (head.head - 1,)
        for k in range(1, head.head + 1):
            found = store.get_objects(_commit_keys(k))
            assert [o.data if o else None for o in found] == [b"%d" % k] * 3, k
        # The write after the last durable HEAD left nothing half-applied.
        assert store.get_objects(_commit_keys(head.head + 1)) == [None] * 3
    finally:
        store.close()


def test_an_unchanged_ref_is_decoded_once(tmp_path: Path) -> None:
    """Refs are read on every request: the same bytes give the same decoded ref, and a
    moved ref is decoded again (never the old value)."""
    store = RocksDBPersistence(tmp_path / "db")
    try:
        first = Ref(MAIN, 1, 10)
        store.write([], RefUpdate(MAIN, None, first))
        read = store.get_ref(MAIN)
        assert read == first and store.get_ref(MAIN) is read
        moved = first.advanced(2, 20)
        store.write([], RefUpdate(MAIN, 1, moved))
        assert store.get_ref(MAIN) == moved
        store.write([], RefUpdate(MAIN, 2, None))
        assert store.get_ref(MAIN) is None
    finally:
        store.close()


def test_a_written_ref_is_read_back_without_decoding_and_never_stale(tmp_path: Path) -> None:
    """The writer's next read of the ref it wrote gets the ref it wrote (no decoding); a
    write that did not land (a lost swap) or other bytes on disk are never answered from
    what a writer meant to write."""
    store = RocksDBPersistence(tmp_path / "db")
    try:
        first = Ref(MAIN, 1, 10, (0,))
        store.write([], RefUpdate(MAIN, None, first))
        assert store.get_ref(MAIN) is first  # remembered when written
        lost = first.advanced(9, 90)
        with pytest.raises(RefConditionFailed):
            store.write([], RefUpdate(MAIN, 5, lost))  # expected HEAD 5: nothing written
        assert store.get_ref(MAIN) == first
        obj = StoredObject(ObjKey("t", "c", "entity", 7), b"one", 1)
        store.write([obj])
        with pytest.raises(ObjectConflict):  # refused after the new ref was encoded
            store.write([StoredObject(obj.key, b"two", 2)], RefUpdate(MAIN, 1, lost))
        assert store.get_ref(MAIN) == first
        moved = first.advanced(2, 20)
        store.write([], RefUpdate(MAIN, 1, moved))
        assert store.get_ref(MAIN) is moved
    finally:
        store.close()
    other = RocksDBPersistence(tmp_path / "db")  # reopened: every ref decoded from disk
    try:
        assert other.get_ref(MAIN) == moved
    finally:
        other.close()


def test_a_remembered_read_follows_every_write_of_its_key(tmp_path: Path) -> None:
    """Refs are read from memory once read; each way of writing the key (synced,
    unsynced, deleting) is seen by the next read (the write remembers what it wrote),
    and a write of other keys keeps it."""
    db = RocksDB(tmp_path / "db", sync=False)
    try:
        key, other = b"r\x00hot", b"o\x00cold"
        assert db.get_remembered(key) is None  # an absent key is remembered as absent
        db.write({key: b"1"})
        assert db.get_remembered(key) == b"1"
        db.write_unsynced({key: b"2", other: b"x"})
        assert db.get_remembered(key) == b"2"
        db.write({other: b"y"})
        assert db.get_remembered(key) == b"2"
        db.write({key: None})
        assert db.get_remembered(key) is None
        db.write({key: b"3"})
        many = {b"o\x00%d" % i: b"v" for i in range(50)} | {key: b"4"}  # more keys than held
        db.write_unsynced(many)
        assert db.get_remembered(key) == b"4" == db.get(key)
    finally:
        db.close()
    reopened = RocksDB(tmp_path / "db", sync=False)
    try:
        assert reopened.get_remembered(b"r\x00hot") == b"4"
    finally:
        reopened.close()


def test_a_remembered_read_never_goes_back_behind_a_finished_write(tmp_path: Path) -> None:
    """One thread writes 1, 2, 3, ... to a key (each a WriteBatch, synced or not) and
    publishes each number once its write returned; readers on other threads check that
    a read started after a number was published never returns an older one. A value
    remembered from a read that overlapped a write would show here as an older one."""
    db = RocksDB(tmp_path / "db", sync=False)
    key = b"r\x00hot"
    db.write({key: b"0"})
    writes = 20_000  # about a second
    done = 0
    stop = threading.Event()
    stale: list[tuple[int, int]] = []
    reads = [0]

    def writer() -> None:
        nonlocal done
        for i in range(1, writes + 1):
            (db.write if i % 2 else db.write_unsynced)({key: b"%d" % i, b"o\x00%d" % i: b"v"})
            done = i
        stop.set()

    def reader() -> None:
        while not stop.is_set():
            floor = done
            found = db.get_remembered(key)
            reads[0] += 1
            value = int(found) if found is not None else -1
            if value < floor:
                stale.append((floor, value))

    threads = [threading.Thread(target=writer)] + [
        threading.Thread(target=reader) for _ in range(3)
    ]
    try:
        run_interleaved(threads, switch_interval_s=1e-6)  # switch as often as possible
    finally:
        db.close()
    assert not stale, stale[:5]
    assert reads[0] > 1000 and done == writes
