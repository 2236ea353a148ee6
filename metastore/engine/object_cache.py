"""A size-bounded LRU of decoded immutable objects.

Immutable objects never change once written, so a cached copy is never stale and
needs no invalidation (the reason objects are immutable at all). Updateable objects
and references are never cached (``CachePolicy.NEVER``): they are read fresh.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from metastore.model.keys import ObjKey


class ObjectCache:
    def __init__(self, max_bytes: int = 64 * 1024 * 1024) -> None:
        self._max = max_bytes
        self._items: OrderedDict[ObjKey, tuple[Any, int]] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def size_bytes(self) -> int:
        return self._size

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: ObjKey) -> Any | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return item[0]

    def discard(self, keys: Iterable[ObjKey]) -> None:
        """Forget deleted objects: garbage collection removes immutable objects, and a
        history read walking past the retained commits must find them gone."""
        with self._lock:
            for key in keys:
                old = self._items.pop(key, None)
                if old is not None:
                    self._size -= old[1]

    def put(self, key: ObjKey, value: Any, cost: int) -> None:
        if cost > self._max:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._size -= old[1]
            self._items[key] = (value, cost)
            self._size += cost
            while self._size > self._max:
                _, (_, evicted_cost) = self._items.popitem(last=False)
                self._size -= evicted_cost
