"""Column defaults kept through a create's fresh field ids.

A create renumbers the client's schema from 1 (``new_table_metadata``, as every
Iceberg catalog does), and pyiceberg's renumbering drops each field's
``initial-default`` and ``write-default``: a format version 3 table created
with defaults would silently lose them. The renumbered schema has the client's
shape field for field, so the defaults are copied back by position.
"""

from __future__ import annotations

from pyiceberg.schema import Schema
from pyiceberg.types import IcebergType, ListType, MapType, NestedField, StructType


def with_defaults(fresh: Schema, given: Schema) -> Schema:
    """``fresh`` (``given`` renumbered) with ``given``'s column defaults."""
    if not _has_defaults(given.as_struct()):
        return fresh
    struct = _copy(given.as_struct(), fresh.as_struct())
    assert isinstance(struct, StructType)
    return Schema(
        *struct.fields,
        schema_id=fresh.schema_id,
        identifier_field_ids=fresh.identifier_field_ids,
    )


def _has_defaults(kind: IcebergType) -> bool:
    if isinstance(kind, StructType):
        return any(
            f.initial_default is not None
            or f.write_default is not None
            or _has_defaults(f.field_type)
            for f in kind.fields
        )
    if isinstance(kind, ListType):
        return _has_defaults(kind.element_type)
    if isinstance(kind, MapType):
        return _has_defaults(kind.key_type) or _has_defaults(kind.value_type)
    return False


def _copy(given: IcebergType, fresh: IcebergType) -> IcebergType:
    if isinstance(given, StructType) and isinstance(fresh, StructType):
        fields = [
            NestedField(
                field_id=new.field_id,
                name=new.name,
                field_type=_copy(old.field_type, new.field_type),
                required=new.required,
                doc=new.doc,
                initial_default=old.initial_default,
                write_default=old.write_default,
            )
            for old, new in zip(given.fields, fresh.fields, strict=True)
        ]
        return StructType(*fields)
    if isinstance(given, ListType) and isinstance(fresh, ListType):
        return ListType(
            element_id=fresh.element_id,
            element=_copy(given.element_type, fresh.element_type),
            element_required=fresh.element_required,
        )
    if isinstance(given, MapType) and isinstance(fresh, MapType):
        return MapType(
            key_id=fresh.key_id,
            key_type=_copy(given.key_type, fresh.key_type),
            value_id=fresh.value_id,
            value_type=_copy(given.value_type, fresh.value_type),
            value_required=fresh.value_required,
        )
    return fresh
