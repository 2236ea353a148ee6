"""The purges this process is running now, so that an expiry takes up only the others.

A purge is durable through its record (``purging:<entity id>``, ``metastore.engine.dropped``):
the commit that drops the table, or that purges one kept until then, moves it there;
the record holds the table's location until the purge of its files has ended and the
record is deleted. A purge that a crash (or a stop) cut short leaves its record, and
the catalog's expiry (``metastore.catalog.expiry``) does it again. What is not durable is
whether a purge is running: one this process runs now (a drop's, or an earlier
expiry's still deleting) is left to it, or two would delete the same files and the
later one's next read would find them gone. Only the catalog's owner (the embedded
node, or its partition's owner) runs a catalog's drops and expiries, so this process
sees every purge of its catalogs, except across a change of owner, when two runs of
one purge may overlap: deleting a file twice is harmless, and the record is deleted
once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class RunningPurges:
    """The purges running in this process, by catalog and entity id (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[tuple[str, str, int]] = set()

    @contextmanager
    def run(self, tenant: str, catalog: str, entity_id: int) -> Iterator[bool]:
        """For the block, the purge of ``entity_id`` runs here: True, or False when it
        runs already (the block then leaves it alone)."""
        key = (tenant, catalog, entity_id)
        with self._lock:
            mine = key not in self._running
            self._running.add(key)
        try:
            yield mine
        finally:
            if mine:
                with self._lock:
                    self._running.discard(key)
