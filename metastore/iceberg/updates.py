"""Applying a table commit's updates with pyiceberg's reducer, and a cache of parsed metadata.

``update_table_metadata`` ends with a deep copy of the whole metadata, which
costs more than everything else in a commit once a table has a long history.
Its reducers never mutate their input (each returns a ``model_copy``), so for an
existing table the same reducers are applied here without the copy; a new table
(built from the empty metadata) still goes through ``update_table_metadata`` with
full validation.

Parsed metadata is cached by (tenant, catalog, entity id, entity version): an
entity version is immutable, so the cache is never stale, only a shortcut; it
holds process-local copies and correctness never depends on it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from datetime import datetime

from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import (
    TableUpdate,
    _apply_table_update,
    _TableMetadataUpdateContext,
    _update_table_metadata_log,
    update_table_metadata,
)
from pyiceberg.utils.datetime import datetime_to_millis

ModelKey = tuple[str, str, int, int]  # tenant, catalog, entity id, entity version


def apply_updates(
    base: TableMetadata | None,
    updates: Sequence[TableUpdate],
    metadata_location: str | None,
    empty: TableMetadata,
) -> TableMetadata:
    if base is None:
        return update_table_metadata(empty, tuple(updates), enforce_validation=True)
    context = _TableMetadataUpdateContext()
    new = base
    for update in updates:
        new = _apply_table_update(update, new, context)
    if context.has_changes():
        if metadata_location:
            new = _update_table_metadata_log(new, metadata_location, base.last_updated_ms)
        if new.last_updated_ms == base.last_updated_ms:
            now = datetime_to_millis(datetime.now().astimezone())
            new = new.model_copy(update={"last_updated_ms": now})
    new.spec().check_compatible(new.schema())
    new.sort_order().check_compatible(new.schema())
    return new


class ModelCache:
    """A small LRU of parsed ``TableMetadata`` per immutable entity version."""

    def __init__(self, size: int = 64) -> None:
        self._size = size
        self._items: OrderedDict[ModelKey, TableMetadata] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: ModelKey) -> TableMetadata | None:
        with self._lock:
            model = self._items.get(key)
            if model is not None:
                self._items.move_to_end(key)
            return model

    def put(self, key: ModelKey, model: TableMetadata) -> None:
        with self._lock:
            self._items[key] = model
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)
