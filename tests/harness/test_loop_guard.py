"""The suite's guard against database access on an event loop (``harness.loop_guard``)
finds what it must and nothing else: an access from the code under test on the loop,
not one from a worker thread or from a test's own code; and a child node runs watched."""

from __future__ import annotations

import asyncio
import inspect
import subprocess
from pathlib import Path

import pytest

from harness.loop_guard import GUARD_ENV, append_to, unread, watch
from harness.node import NodeProcess, stop_checked
from metastore.persistence.rocksdb import RocksDB

KEY = b"k"


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RocksDB:
    """A real RocksDB, with the suite's own guard of this test taken off: these tests
    make the accesses it refuses on purpose, and watch them themselves."""
    monkeypatch.setattr(RocksDB, "_live", inspect.unwrap(RocksDB._live))
    handle = RocksDB(tmp_path / "db", sync=False)
    handle.write({KEY: b"v"})
    return handle


async def test_an_access_the_code_under_test_makes_on_the_loop_is_found(db: RocksDB) -> None:
    found: list[str] = []
    with watch(found.append):
        # the database's own method as the loop's callback: no test frame on its stack
        asyncio.get_running_loop().call_soon(db.get, KEY)
        await asyncio.sleep(0)  # the callback runs
    assert len(found) == 1
    assert "in get" in found[0]


async def test_a_worker_thread_and_a_tests_own_read_are_not(db: RocksDB) -> None:
    found: list[str] = []
    with watch(found.append):
        assert await asyncio.to_thread(db.get, KEY) == b"v"
        assert db.get(KEY) == b"v"  # this test reads its store directly, on its loop
    assert found == []


def test_a_child_nodes_finds_are_read_once_each(tmp_path: Path) -> None:
    found = append_to(str(tmp_path))
    offsets: dict[str, int] = {}
    assert unread(tmp_path, offsets) == []
    found("stack one\n")
    first = unread(tmp_path, offsets)
    assert len(first) == 1 and "stack one" in first[0]
    assert unread(tmp_path, offsets) == []
    found("stack two\n")
    second = unread(tmp_path, offsets)
    assert len(second) == 1 and "stack two" in second[0] and "stack one" not in second[0]


def test_a_child_node_runs_watched(tmp_path: Path) -> None:
    """With the guard's directory set (the suite sets it), a node runs under the watch,
    and serving its health check writes nothing there."""
    guard = tmp_path / "guard"
    guard.mkdir()
    node = NodeProcess(tmp_path / "data", env={GUARD_ENV: str(guard)}).start()
    try:
        command = subprocess.run(
            ["ps", "-o", "args=", "-p", str(node.pid)], capture_output=True, text=True
        ).stdout
        assert "harness.guarded_node serve" in command
    finally:
        assert stop_checked(node)
    assert unread(guard, {}) == []
