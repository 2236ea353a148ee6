"""Turns per table for the table commits of this node.

Many writers committing to one table at once (appenders with server-side rebase,
``rebase``) would all prepare against the same table version; one would win and
the others redo their work on the new version, each redo reading and writing
files, and a request could lose again and again until its attempts ran out.
Only one of them can commit on a given version anyway, so a single-table
request waits for its turn behind the others to the same table on this node
from its first attempt (one ``asyncio.Lock`` per table, dropped when nobody
holds or waits for it): each prepares on the version the one before it
committed, and only a commit through another node can still make it redo.
Outcomes are unchanged: the turn only orders attempts, the table's version
check still decides them. A request that finds the turn taken (``busy``) may do
meanwhile what does not depend on the version (``rebase.warm``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager


class Turns:
    def __init__(self) -> None:
        self._locks: dict[Hashable, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def turn(self, key: Hashable) -> AsyncIterator[None]:
        """Hold ``key``'s turn (waiting for those before it) for the block."""
        lock, users = self._locks.get(key, (None, 0))
        lock = lock or asyncio.Lock()
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def busy(self, key: Hashable) -> bool:
        """Whether a request holds or waits for ``key``'s turn (one arriving now waits)."""
        return key in self._locks

    def __len__(self) -> int:
        """How many tables have a request holding or waiting for a turn."""
        return len(self._locks)
