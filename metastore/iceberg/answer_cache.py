"""A size-bounded LRU of table metadata as JSON text, per table version and form.

A table load answers the table's metadata, assembled from its pieces and serialized:
work proportional to the table's history (every snapshot, every log entry), the same
for every load of the same table version. The text is kept here under an
``AnswerKey``, which names everything the text is made of: the catalog, the entity
and its version, the metadata location (written once per commit, never rewritten),
the table properties (the entity's own: the native API changes them without a new
metadata file) and the ``snapshots`` filter. A commit, a property change, a rename,
a drop and a create under the same name all make a new key, so an entry is never
stale and nothing is ever invalidated: old entries just age out.

What an answer carries besides the metadata (the remote-signing ``config``, vended
credentials) is worked out for each request and never cached here.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class AnswerKey:
    tenant: str
    catalog: str
    entity_id: int
    version: int
    metadata_location: str | None
    properties: tuple[tuple[str, str], ...]  # sorted items
    snapshots: str  # "all" or "refs" (the load's filter)

    @classmethod
    def of(
        cls,
        tenant: str,
        catalog: str,
        entity_id: int,
        version: int,
        metadata_location: str | None,
        properties: Mapping[str, str],
        snapshots: str,
    ) -> AnswerKey:
        items = tuple(sorted(properties.items()))
        return cls(tenant, catalog, entity_id, version, metadata_location, items, snapshots)


class AnswerCache:
    """Thread-safe (loads fill it in worker threads); ``max_bytes`` 0 keeps nothing."""

    def __init__(self, max_bytes: int = DEFAULT_BYTES) -> None:
        self._max = max_bytes
        self._items: OrderedDict[AnswerKey, str] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    @property
    def size_bytes(self) -> int:
        return self._size

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: AnswerKey) -> str | None:
        with self._lock:
            text = self._items.get(key)
            if text is not None:
                self._items.move_to_end(key)
            return text

    def put(self, key: AnswerKey, text: str) -> None:
        """Keep ``text`` (its length counts as its size; one larger than the whole
        cache is not kept)."""
        cost = len(text)
        if cost > self._max:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._size -= len(old)
            self._items[key] = text
            self._size += cost
            while self._size > self._max:
                _, evicted = self._items.popitem(last=False)
                self._size -= len(evicted)
