"""Applying a table commit's updates with pyiceberg's reducer, and a cache of parsed metadata.

``update_table_metadata`` ends with a deep copy of the whole metadata, which
costs more than everything else in a commit once a table has a long history.
Its reducers never mutate their input (each returns a ``model_copy``), so for an
existing table the same reducers are applied here without the copy; a new table
(built from the empty metadata) is validated in full once its updates applied.
Upgrades to format version 3 and snapshots added to version 3 tables go
through ``metastore.iceberg.lineage`` first (row ids), then the same reducers.

Parsed metadata is cached by (tenant, catalog, entity id, entity version): an
entity version is immutable, so the cache is never stale, only a shortcut; it
holds process-local copies and correctness never depends on it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from datetime import datetime

from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil, TableMetadataV3
from pyiceberg.table.update import (
    AddSchemaUpdate,
    AddSnapshotUpdate,
    TableUpdate,
    UpgradeFormatVersionUpdate,
    _apply_table_update,
    _TableMetadataUpdateContext,
    _update_table_metadata_log,
)
from pyiceberg.utils.datetime import datetime_to_millis

from metastore.iceberg import lineage
from metastore.iceberg.metadata_json import SnapshotsJson

ModelKey = tuple[str, str, int, int]  # tenant, catalog, entity id, entity version


def apply_updates(
    base: TableMetadata | None,
    updates: Sequence[TableUpdate],
    metadata_location: str | None,
    empty: TableMetadata,
) -> TableMetadata:
    start = base if base is not None else empty
    context = _TableMetadataUpdateContext()
    new = start
    for update in updates:
        new = _apply(update, new, context)
    if context.has_changes():
        if metadata_location:
            new = _update_table_metadata_log(new, metadata_location, start.last_updated_ms)
        if new.last_updated_ms == start.last_updated_ms:
            now = datetime_to_millis(datetime.now().astimezone())
            new = new.model_copy(update={"last_updated_ms": now})
    for what, wanted, have in (
        ("schema", new.current_schema_id, [s.schema_id for s in new.schemas]),
        ("partition spec", new.default_spec_id, [s.spec_id for s in new.partition_specs]),
        ("sort order", new.default_sort_order_id, [o.order_id for o in new.sort_orders]),
    ):
        if wanted not in have:  # pyiceberg's lookups below would raise StopIteration
            raise ValueError(f"the table has no {what} with id {wanted}: add one and set it")
    new.spec().check_compatible(new.schema())
    new.sort_order().check_compatible(new.schema())
    for update in updates:  # a type newer than the table's format version: 400
        if isinstance(update, AddSchemaUpdate):
            update.schema_.check_format_version_compatibility(new.format_version)
    if base is None:  # a new table: every field checked, as pyiceberg checks a parsed file
        return TableMetadataUtil.parse_obj(new.model_dump())
    return new


def _apply(
    update: TableUpdate, base: TableMetadata, context: _TableMetadataUpdateContext
) -> TableMetadata:
    """One update: pyiceberg's reducer, after the format version 3 rules (``lineage``)."""
    if isinstance(update, UpgradeFormatVersionUpdate) and lineage.involves_v3(update, base):
        if update.format_version == base.format_version:
            return base
        if base.format_version < 2:
            to_v2 = UpgradeFormatVersionUpdate.model_validate({"format-version": 2})
            base = _apply_table_update(to_v2, base, context)
        context.add_update(update)
        return lineage.upgraded_to_v3(base)
    if isinstance(update, AddSchemaUpdate):
        _check_new_schema(update, base)
    if isinstance(update, AddSnapshotUpdate) and isinstance(base, TableMetadataV3):
        assigned, next_row_id = lineage.assign_row_ids(update, base)
        new = _apply_table_update(assigned, base, context)
        return new.model_copy(update={"next_row_id": next_row_id})
    return _apply_table_update(update, base, context)


def _check_new_schema(update: AddSchemaUpdate, base: TableMetadata) -> None:
    """pyiceberg appends an added schema as it comes; its id must be new (the metadata's
    schemas are found by id: a second schema 0 replaced the current one once the table
    was read back) and so must each of its field ids."""
    schema_id = update.schema_.schema_id
    if any(schema.schema_id == schema_id for schema in base.schemas):
        raise ValueError(f"schema id {schema_id} exists already: add a schema under a new id")
    seen: set[int] = set()
    for field_id in _field_ids(update.schema_.model_dump(by_alias=True)):
        if field_id in seen:
            raise ValueError(f"field id {field_id} appears twice in schema {schema_id}")
        seen.add(field_id)


def _field_ids(node: object) -> Iterator[int]:
    """Every field id of a schema's JSON: fields', list elements', map keys' and values'."""
    if isinstance(node, dict):
        for key in ("id", "element-id", "key-id", "value-id"):
            value = node.get(key)
            if isinstance(value, int) and (key != "id" or "name" in node):
                yield value
        for key in ("fields", "type", "element", "key", "value"):
            yield from _field_ids(node.get(key))
    elif isinstance(node, (list, tuple)):
        for item in node:
            yield from _field_ids(item)


class ModelCache:
    """A small LRU of parsed ``TableMetadata`` per immutable entity version; with a
    version this node committed, the JSON of its snapshots as its metadata file has
    them (``metadata_json.metadata_document``: the next commit serializes only the
    snapshots it adds)."""

    def __init__(self, size: int = 64) -> None:
        self._size = size
        self._items: OrderedDict[ModelKey, tuple[TableMetadata, SnapshotsJson | None]] = (
            OrderedDict()
        )
        self._lock = threading.Lock()

    def get(self, key: ModelKey) -> TableMetadata | None:
        return self.entry(key)[0]

    def entry(self, key: ModelKey) -> tuple[TableMetadata | None, SnapshotsJson | None]:
        """The version's model and its snapshots' JSON (each None when not kept)."""
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None, None
            self._items.move_to_end(key)
            return item

    def put(
        self, key: ModelKey, model: TableMetadata, snapshots: SnapshotsJson | None = None
    ) -> None:
        with self._lock:
            self._items[key] = (model, snapshots)
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)
