"""Group sync of RocksDB's write-ahead log: one fsync for every write made before it.

A write with ``sync=True`` makes rocksdict hold the interpreter lock for the whole
fsync, so while one catalog's batch waits on the disk no other thread, the event loop
included, runs a line of Python, and no second batch can join that fsync. Writing
with ``sync=False`` (the WAL record reaches the OS at once) and then syncing the WAL
with ``flush_wal(sync=True)`` (which releases the lock) splits the two: writers
queue up while one of them syncs, and the next sync covers all of them at once.

``GroupSync`` orders it. A writer registers its write once RocksDB has it
(``written``: a ticket) and then ``wait``s: the first waiter with nothing in flight
becomes the leader, syncs everything written so far and wakes the others; a writer
whose ticket an earlier sync already covered returns at once. A write is
acknowledged only after a sync that began after it, so what ``wait`` returns for is
on disk, exactly as with ``sync=True``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class GroupSync:
    """Tickets for unsynced writes, and the leader/follower wait until one is synced."""

    def __init__(self, sync: Callable[[], None]) -> None:
        self._sync = sync
        self._cond = threading.Condition()
        self._written = 0  # tickets handed out: writes RocksDB has
        self._synced = 0  # every ticket up to this one is on disk
        self._syncing = False
        self.syncs = 0  # fsyncs made (each covered one or more writes)

    def written(self) -> int:
        """A ticket for a write RocksDB has just taken (call it after the write)."""
        with self._cond:
            self._written += 1
            return self._written

    def wait(self, ticket: int) -> None:
        """Return once ``ticket``'s write is on disk; raise what the sync raised if the
        sync meant to cover it failed (its outcome is then unknown)."""
        with self._cond:
            while self._synced < ticket:
                if not self._syncing:
                    self._syncing = True
                    target = self._written
                    break
                self._cond.wait()
            else:
                return
        try:
            self._sync()
        except BaseException:
            with self._cond:
                self._syncing = False
                self._cond.notify_all()  # a follower leads the next attempt
            raise
        with self._cond:
            self._synced = max(self._synced, target)
            self._syncing = False
            self.syncs += 1
            self._cond.notify_all()
