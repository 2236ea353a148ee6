"""Short summaries of Iceberg metadata: what a person compares between two versions.

A table's full metadata grows with every snapshot; the console's commit diff and
anything else that shows "what changed" needs the few fields a change moves (current
snapshot, schema, partition spec, properties, the metadata file) side by side, not
two documents of thousands of lines. Pure functions over the spec's JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Json = Mapping[str, Any]


def _fields(schema: Json | None) -> list[str]:
    """``name: type`` of each top-level field (nested types as the spec writes them)."""
    if schema is None:
        return []
    out = []
    for field in schema.get("fields", []):
        kind = field.get("type")
        shown = kind if isinstance(kind, str) else str(kind.get("type", "nested"))
        required = " not null" if field.get("required") else ""
        out.append(f"{field.get('name')}: {shown}{required}")
    return out


def _by_id(items: list[Json], key: str, wanted: object) -> Json | None:
    return next((item for item in items if item.get(key) == wanted), None)


def table_summary(metadata: Json, metadata_location: str | None) -> dict[str, Any]:
    schema = _by_id(metadata.get("schemas", []), "schema-id", metadata.get("current-schema-id"))
    spec = _by_id(metadata.get("partition-specs", []), "spec-id", metadata.get("default-spec-id"))
    current = metadata.get("current-snapshot-id")
    snapshot = _by_id(metadata.get("snapshots", []), "snapshot-id", current)
    summary = (snapshot or {}).get("summary", {})
    return {
        "metadata-location": metadata_location,
        "format-version": metadata.get("format-version"),
        "location": metadata.get("location"),
        "current-snapshot-id": current if current not in (None, -1) else None,
        "current-snapshot-operation": summary.get("operation"),
        "total-records": summary.get("total-records"),
        "total-data-files": summary.get("total-data-files"),
        "snapshots": len(metadata.get("snapshots", [])),
        "last-sequence-number": metadata.get("last-sequence-number"),
        "schema-id": metadata.get("current-schema-id"),
        "schema": _fields(schema),
        "partition-spec": [
            f"{f.get('name')}: {f.get('transform')}({f.get('source-id')})"
            for f in (spec or {}).get("fields", [])
        ],
        "properties": dict(metadata.get("properties", {})),
    }


def view_summary(metadata: Json, metadata_location: str | None) -> dict[str, Any]:
    current = metadata.get("current-version-id")
    version = _by_id(metadata.get("versions", []), "version-id", current) or {}
    schema = _by_id(metadata.get("schemas", []), "schema-id", version.get("schema-id"))
    return {
        "metadata-location": metadata_location,
        "format-version": metadata.get("format-version"),
        "current-version-id": current,
        "versions": len(metadata.get("versions", [])),
        "schema": _fields(schema),
        "sql": [
            f"{r.get('dialect')}: {r.get('sql')}"
            for r in version.get("representations", [])
            if r.get("type") == "sql"
        ],
        "properties": dict(metadata.get("properties", {})),
    }
