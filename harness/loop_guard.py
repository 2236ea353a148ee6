"""Database accesses made on an event loop, found while the tests run.

A node answers what its memory holds on the event loop (a point read,
``metastore.util.memory_only``) and sends everything else to a worker thread: a read or
write of RocksDB on the loop would stall every other request for as long as the
database takes (a compaction, a cold block, the write-ahead log's sync). Every access
to the database passes ``RocksDB._live``; ``watch`` wraps it and hands the stack of
each access made on a thread running an event loop to a callback, unless a frame of
the tests' own code (``tests/``) made it from the loop's running task (a test may
read or write a store directly). Frames beyond that task (whatever started the loop)
do not count: a test that runs a node with ``asyncio.run`` does not excuse the
node's handlers.

The suite watches both kinds of node (``tests/conftest.py``): one built in the test's
process, and a child process (``harness.node``), which runs the same watch
(``harness.guarded_node``) and appends each access's stack to a file of the
directory ``GUARD_ENV`` names; a test fails if an access was found while it ran (or
before it, since the last test ended: a node its module started).
"""

from __future__ import annotations

import asyncio
import functools
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from rocksdict import Rdict

from metastore.persistence.rocksdb import RocksDB

GUARD_ENV = "METASTORE_TEST_LOOP_GUARD"  # the directory child nodes write accesses into
REPO = Path(__file__).resolve().parent.parent
TESTS = str(REPO / "tests") + os.sep
# the loop runs each callback (a task's step) from here: frames beyond it started the loop
LOOP_CALLBACK = (os.path.join("asyncio", "events.py"), "_run")


def made_by_a_test(frame: FrameType | None) -> bool:
    """Whether a frame of the tests' own code is on the stack of the running callback."""
    while frame is not None:
        code = frame.f_code
        if code.co_filename.startswith(TESTS):
            return True
        if code.co_name == LOOP_CALLBACK[1] and code.co_filename.endswith(LOOP_CALLBACK[0]):
            return False
        frame = frame.f_back
    return False


@contextmanager
def watch(found: Callable[[str], None]) -> Iterator[None]:
    """``RocksDB._live`` watched while inside: ``found(stack)`` for each access the code
    under test made on an event loop."""
    live = RocksDB._live

    @functools.wraps(live)  # its __wrapped__: the unwatched handle (the guard's own tests)
    def watched(self: RocksDB) -> Rdict:
        db = live(self)  # memory-only reads refuse before any access
        if asyncio._get_running_loop() is not None:
            caller = sys._getframe(1)
            if not made_by_a_test(caller):
                found("".join(traceback.format_stack(caller)))
        return db

    RocksDB._live = watched  # type: ignore[method-assign]
    try:
        yield
    finally:
        RocksDB._live = live  # type: ignore[method-assign]


def append_to(directory: str) -> Callable[[str], None]:
    """A ``found`` for a child node: each stack appended to ``<directory>/<pid>.txt``
    at once (a test reads the directory when it ends; a node may be killed)."""
    path = Path(directory) / f"{os.getpid()}.txt"

    def found(stack: str) -> None:
        with path.open("a") as out:
            out.write(f"--- database access on the event loop (node pid {os.getpid()}):\n")
            out.write(stack)

    return found


def unread(directory: Path, offsets: dict[str, int]) -> list[str]:
    """What child nodes wrote into ``directory`` past ``offsets`` (each file's length
    already read, updated here): each access reported once, by the test it ended in."""
    found = []
    for entry in sorted(directory.iterdir()):
        with entry.open() as stream:
            stream.seek(offsets.get(entry.name, 0))
            text = stream.read()
            offsets[entry.name] = stream.tell()
        if text:
            found.append(text)
    return found
