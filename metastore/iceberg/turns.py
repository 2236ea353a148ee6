"""Turns per table for table commits that lost a race on this node.

Many writers committing to one table at once (appenders with server-side rebase,
``rebase``) all prepare against the same table version; one wins and the others
redo their work on the new version, each redo reading and writing files. Left
to race, a request can lose again and again until its attempts run out. A
request that lost once therefore waits for its turn behind the others that lost
on this node (one ``asyncio.Lock`` per table, dropped when nobody holds or waits
for it), so each redo meets at most the fresh requests that arrived meanwhile.
Outcomes are unchanged: the turn only orders attempts, the table's version
check still decides them.
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
