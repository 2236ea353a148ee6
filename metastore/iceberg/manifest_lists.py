"""Manifest lists read or written by append rebases, kept by location (a small LRU).

Appenders racing on one table mostly expected the same snapshot, and each
rebase builds on the list the previous rebase wrote (the branch's head): each
rebase would otherwise read three lists (the client's, its parent's and the
head's) that grow with the table's history. A manifest list is never rewritten
in place (every writer gives a new one a new name), so a list read once stays
what it was; the cache is only a shortcut, and it holds the lists as read (or as
written), never modified (``rebase`` copies the manifests it changes).

A list a rebase wrote is kept with its records as the file's block holds them
(``Listed.encoded``), so the next rebase writes them again without encoding each
manifest anew (``manifest_list_files``). The cache is bounded both by lists and
by the manifests they hold in all (a table with a long history has long lists).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestFile, read_manifest_list

from metastore.errors import BadRequest
from metastore.iceberg.bounded_input import DEFAULT_READ_LIMIT, BytesInputFile, read_bounded

LISTS = 64  # the heads of recent commits, and the lists of the commits waiting for their turn
MANIFESTS = 100_000  # in all the lists kept (shared ones counted in each)


@dataclass(frozen=True, slots=True)
class Listed:
    """One manifest list: its manifests, and, when known, their records encoded as a
    list of ``version`` writes them (uncompressed)."""

    manifests: tuple[ManifestFile, ...]
    encoded: bytes | None = None
    version: int | None = None


class ManifestLists:
    def __init__(
        self,
        lists: int = LISTS,
        manifests: int = MANIFESTS,
        read_limit: int = DEFAULT_READ_LIMIT,
    ) -> None:
        self._read_limit = read_limit  # the bytes of one list read (``bounded_input``)
        self._lists = lists
        self._manifests = manifests
        self._items: OrderedDict[str, Listed] = OrderedDict()
        self._held = 0  # manifests in ``_items``
        self._lock = threading.Lock()

    def read(self, io: FileIO, location: str) -> tuple[ManifestFile, ...]:
        """The manifests the list at ``location`` names (blocking on a miss); 400 if it
        cannot be read as a manifest list."""
        return self.listed(io, location).manifests

    def listed(self, io: FileIO, location: str) -> Listed:
        """The list at ``location`` as kept (read on a miss, blocking; 400 if it cannot
        be read as a manifest list or is past the bound of one file read)."""
        found = self.get(location)
        if found is not None:
            return found
        try:
            data = read_bounded(io, location, self._read_limit, "manifest list")
            manifests = tuple(read_manifest_list(BytesInputFile(location, data)))
        except (OSError, ValueError, LookupError, TypeError, EOFError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:500]
            raise BadRequest(f"cannot read the manifest list {location}: {first}") from None
        listed = Listed(manifests)
        self.put(location, listed)
        return listed

    def get(self, location: str) -> Listed | None:
        """The list at ``location`` if it is kept (never reads)."""
        with self._lock:
            found = self._items.get(location)
            if found is not None:
                self._items.move_to_end(location)
            return found

    def put(self, location: str, listed: Listed) -> None:
        """Keep ``listed`` as the list at ``location`` (one read or just written there)."""
        with self._lock:
            previous = self._items.pop(location, None)
            if previous is not None:
                self._held -= len(previous.manifests)
            self._items[location] = listed
            self._held += len(listed.manifests)
            while len(self._items) > self._lists or (
                self._held > self._manifests and len(self._items) > 1
            ):
                _, dropped = self._items.popitem(last=False)
                self._held -= len(dropped.manifests)

    def __len__(self) -> int:
        return len(self._items)

    def held(self) -> int:
        """How many manifests the kept lists hold in all."""
        return self._held
