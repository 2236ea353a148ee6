"""The locations whose files this node is deleting now: a purge's hold on its location.

A purge runs after the commit that dropped (or collected) its table, which let the
location go. A table created or registered there (a register of the purged table's own
metadata file, say) while the purge still deletes would get a location whose files are
going: the purge decided what to keep from the locations held when it began. So a purge
holds its location here from before the commit that lets it go until its last deletion,
and the commit engine refuses, inside the commit that would claim it
(``location_index.claim``), a location equal to, inside or around one held (a 400: try
again once the purge is done). Held before that commit, the hold also covers a claim
built meanwhile in the catalog's lane, which would otherwise land after the purge read
what is held.

The hold lives in this process: the purge and every commit of its catalog run on the
node that owns the catalog (the embedded node, or its partition's owner), so it covers
them all except across a change of owner during a purge.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from metastore.locations import Location


class PurgingLocations:
    """The locations held by running purges, per catalog (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[tuple[str, str], Counter[str]] = {}

    @contextmanager
    def hold(self, tenant: str, catalog: str, location: Location) -> Iterator[None]:
        """Hold ``location`` of the catalog for the block (purges may overlap: counted)."""
        key = location.key
        with self._lock:
            self._held.setdefault((tenant, catalog), Counter())[key] += 1
        try:
            yield
        finally:
            with self._lock:
                held = self._held[(tenant, catalog)]
                held[key] -= 1
                if not held[key]:
                    del held[key]
                if not held:
                    del self._held[(tenant, catalog)]

    def overlapping(self, tenant: str, catalog: str, location: Location) -> str | None:
        """A held location (its key) equal to, inside or around ``location``, if any."""
        with self._lock:
            held = list(self._held.get((tenant, catalog), ()))
        key = location.key
        for other in held:
            if key == other or key.startswith(other + "/") or other.startswith(key + "/"):
                return other
        return None
