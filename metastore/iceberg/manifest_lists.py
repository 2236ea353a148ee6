"""Manifest lists read by append rebases, kept by location (a small LRU).

Appenders racing on one table mostly expected the same snapshot, and a rebase
redone after losing to another commit reads the same client list again: each
rebase would otherwise read three lists (the client's, its parent's and the
head's) that grow with the table's history. A manifest list is never rewritten
in place (every writer gives a new one a new name), so a list read once stays
what it was; the cache is only a shortcut, and it holds the lists as read, never
modified (``rebase`` copies the manifests it changes).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestFile, read_manifest_list

from metastore.errors import BadRequest


class ManifestLists:
    def __init__(self, size: int = 16) -> None:
        self._size = size
        self._items: OrderedDict[str, tuple[ManifestFile, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def read(self, io: FileIO, location: str) -> tuple[ManifestFile, ...]:
        """The manifests the list at ``location`` names (blocking on a miss); 400 if it
        cannot be read as a manifest list."""
        with self._lock:
            found = self._items.get(location)
            if found is not None:
                self._items.move_to_end(location)
                return found
        try:
            manifests = tuple(read_manifest_list(io.new_input(location)))
        except (OSError, ValueError, LookupError, TypeError, EOFError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:500]
            raise BadRequest(f"cannot read the manifest list {location}: {first}") from None
        with self._lock:
            self._items[location] = manifests
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return manifests
