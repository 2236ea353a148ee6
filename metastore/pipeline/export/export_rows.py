"""A catalog's current state and full history as table rows, from its rows alone.

The tables (``TABLES``: their Arrow schemas, the columns of the Parquet files): ``tenants``,
``catalogs``, ``namespaces``, ``tables`` (with the current schema, snapshot and
metadata location of Iceberg tables), ``views``, ``principals`` and ``grants`` (no
secrets: principals without their salt, hash or generation, and no property with a
secret-looking key anywhere), and ``commits`` (every commit of every tenant and
catalog in scope: id, parent, time, principal, operation, entity changes). Times are
milliseconds since the epoch and ids 64-bit integers, as the native API shows them
(there as strings).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from metastore.model.keys import CATALOG_RECORD, TENANT_RECORD, EntityKey, Kind
from metastore.model.records import Commit, Entity
from metastore.pipeline.catalog_reader import CatalogRows
from metastore.pipeline.export.export_scope import on_catalog
from metastore.security.grants import CATALOG_ROLE, GRANT, MEMBER, PRINCIPAL_ROLE, ROLE_GRANT
from metastore.security.principal_records import PRINCIPAL_PREFIX
from metastore.storage.credentials import is_secret_key

_S, _I64, _I32 = pa.string(), pa.int64(), pa.int32()
_PATH = pa.list_(_S)
_PROPS = pa.map_(_S, _S)
_ENTITY = [("entity_id", _I64), ("version", _I32), ("properties", _PROPS)]
_TIMES = [("created_at_ms", _I64), ("updated_at_ms", _I64)]
_NAMED = [("tenant", _S), ("catalog", _S), ("namespace", _PATH), ("name", _S)]
_CHANGE = pa.struct([("kind", _S), ("path", _PATH), ("action", _S)])
TABLES: Mapping[str, pa.Schema] = {
    name: pa.schema(columns)
    for name, columns in {
        "tenants": [("tenant", _S), *_ENTITY, *_TIMES],
        "catalogs": [("tenant", _S), ("catalog", _S), *_ENTITY, ("storage_root", _S), *_TIMES],
        "namespaces": [("tenant", _S), ("catalog", _S), ("namespace", _PATH), *_ENTITY, *_TIMES],
        "tables": [
            *_NAMED,
            *_ENTITY,
            ("location", _S),
            ("metadata_location", _S),
            ("table_uuid", _S),
            ("format_version", _I32),
            ("current_schema_id", _I32),
            ("current_schema", _S),
            ("current_snapshot_id", _I64),
            ("snapshots", _I32),
            ("last_updated_ms", _I64),
            *_TIMES,
        ],
        "views": [
            *_NAMED,
            *_ENTITY,
            ("location", _S),
            ("view_uuid", _S),
            ("current_version_id", _I32),
            ("current_schema", _S),
            ("sql", _S),
            *_TIMES,
        ],
        "principals": [
            ("tenant", _S),
            ("name", _S),
            ("type", _S),
            ("disabled", pa.bool_()),
            ("created_by", _S),
            ("entity_id", _I64),
            ("version", _I32),
            *_TIMES,
        ],
        "grants": [("tenant", _S), ("record", _S), ("kind", _S), *_ENTITY, *_TIMES],
        "commits": [
            ("tenant", _S),
            ("catalog", _S),
            ("commit_id", _I64),
            ("parent_id", _I64),
            ("seq", _I64),
            ("committed_at_ms", _I64),
            ("principal", _S),
            ("operation", _S),
            ("changes", pa.list_(_CHANGE)),
        ],
    }.items()
}
GRANT_RECORDS = (PRINCIPAL_ROLE, MEMBER, CATALOG_ROLE, ROLE_GRANT, GRANT)
TableRow = tuple[str, tuple[Any, ...]]  # (table name, the row's values in column order)


def public(properties: Mapping[str, str]) -> list[tuple[str, str]]:
    """A property map's entries (an Arrow map), without any secret-looking key."""
    return [(k, v) for k, v in sorted(properties.items()) if not is_secret_key(k)]


def _entity(entity: Entity) -> tuple[Any, ...]:
    return entity.entity_id, entity.version, public(entity.properties)


def _times(entity: Entity) -> tuple[int, int]:
    return entity.created_at_us // 1000, entity.updated_at_us // 1000


def export_catalog(rows: CatalogRows, only: str | None = None) -> Iterator[TableRow]:
    """Every row this catalog (or tenant's records, catalog "") contributes; with
    ``only`` (an export of that one catalog), of the tenant's principals and access
    records just those on that catalog (``export_scope``)."""
    main = rows.main()
    if main is None:
        return
    for commit in rows.history(main.head):
        yield "commits", _commit(rows, commit)
    head = rows.commit(main.head)
    if head is None:
        return
    tenant, catalog = rows.tenant, rows.catalog
    kept = None
    if only is not None and catalog == "":
        kept = on_catalog((key.name for key, _ in rows.live(head, Kind.SYSTEM)), only)
    for key, entity in rows.live(head):
        if key.kind is Kind.SYSTEM:
            yield from _system(rows, head, key, entity, kept)
        elif key.kind is Kind.NAMESPACE:
            ns = list(entity.path)
            yield "namespaces", (tenant, catalog, ns, *_entity(entity), *_times(entity))
        elif key.kind is Kind.TABLE:
            yield "tables", _table(rows, entity)
        elif key.kind is Kind.VIEW:
            yield "views", _view(rows, entity)


def _commit(rows: CatalogRows, commit: Commit) -> tuple[Any, ...]:
    changes = []
    for change in commit.changes:
        key = EntityKey.decode(change.key)
        changes.append(
            {"kind": key.kind.label, "path": list(key.path), "action": change.action.lower()}
        )
    return (
        rows.tenant,
        rows.catalog,
        commit.id,
        commit.parent or None,
        commit.seq,
        commit.created_at_us // 1000,
        commit.principal,
        commit.operation,
        changes,
    )


def _system(
    rows: CatalogRows, head: Commit, key: EntityKey, entity: Entity, kept: set[str] | None
) -> Iterator[TableRow]:
    tenant, name = rows.tenant, key.name
    access = name.startswith((PRINCIPAL_PREFIX, *GRANT_RECORDS))
    if access and kept is not None and name not in kept:
        return
    if key == TENANT_RECORD and rows.catalog == "":
        yield "tenants", (tenant, *_entity(entity), *_times(entity))
    elif key == CATALOG_RECORD and rows.catalog != "":
        storage = rows.storage(head)
        root = storage.root if storage is not None else None
        yield "catalogs", (tenant, rows.catalog, *_entity(entity), root, *_times(entity))
    elif rows.catalog == "" and name.startswith(PRINCIPAL_PREFIX):
        props = entity.properties
        yield (
            "principals",
            (
                tenant,
                name[len(PRINCIPAL_PREFIX) :],
                props.get("type"),
                props.get("disabled") == "true",
                props.get("created-by"),
                entity.entity_id,
                entity.version,
                *_times(entity),
            ),
        )
    elif rows.catalog == "" and name.startswith(GRANT_RECORDS):
        kind = name.split(":", 1)[0]
        yield "grants", (tenant, name, kind, *_entity(entity), *_times(entity))


def _named(rows: CatalogRows, entity: Entity) -> tuple[Any, ...]:
    return rows.tenant, rows.catalog, list(entity.path[:-1]), entity.path[-1]


def _table(rows: CatalogRows, entity: Entity) -> tuple[Any, ...]:
    found = rows.iceberg(entity)
    metadata, location = found if found is not None else ({}, None)
    schema_id = metadata.get("current-schema-id")
    schema = next((s for s in metadata.get("schemas", []) if s.get("schema-id") == schema_id), None)
    snapshot_id = metadata.get("current-snapshot-id")
    return (
        *_named(rows, entity),
        *_entity(entity),
        entity.location,
        location,
        metadata.get("table-uuid"),
        metadata.get("format-version"),
        schema_id,
        None if schema is None else json.dumps(schema, sort_keys=True),
        None if snapshot_id is None or snapshot_id < 0 else snapshot_id,
        len(metadata.get("snapshots", [])) if found is not None else None,
        metadata.get("last-updated-ms"),
        *_times(entity),
    )


def _view(rows: CatalogRows, entity: Entity) -> tuple[Any, ...]:
    found = rows.iceberg(entity)
    metadata = found[0] if found is not None else {}
    version_id = metadata.get("current-version-id")
    version = next(
        (v for v in metadata.get("versions", []) if v.get("version-id") == version_id), None
    )
    schema_id = version.get("schema-id") if version is not None else None
    schema = next((s for s in metadata.get("schemas", []) if s.get("schema-id") == schema_id), None)
    sql = None
    if version is not None:
        sql = next((r.get("sql") for r in version.get("representations", [])), None)
    return (
        *_named(rows, entity),
        *_entity(entity),
        entity.location,
        metadata.get("view-uuid"),
        version_id,
        None if schema is None else json.dumps(schema, sort_keys=True),
        sql,
        *_times(entity),
    )
