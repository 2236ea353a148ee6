"""A small thread-safe least-recently-used map, bounded by its number of entries.

For values derived from immutable inputs (a record version, a set of properties)
that are cheap to keep and dearer to work out again on every request; the bound
keeps a node's memory flat whatever the number of catalogs it serves.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Lru(Generic[K, V]):
    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"an LRU holds at least one entry, not {limit}")
        self._limit = limit
        self._lock = threading.Lock()
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> V:
        """Keep ``value`` unless another thread kept one for ``key`` first; returns the
        one kept (so racing makers of the same value share one)."""
        with self._lock:
            kept = self._items.setdefault(key, value)
            self._items.move_to_end(key)
            while len(self._items) > self._limit:
                self._items.popitem(last=False)
            return kept

    def __len__(self) -> int:
        return len(self._items)
