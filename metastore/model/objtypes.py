"""The object type registry: adding a type is a coding exercise, never a migration.

The type name is part of every object key, so a new type is a new key range:
registering a class here is all it takes, never a storage migration. The cache
policy says whether the read path may keep decoded objects forever (immutable
types) or must always read them fresh (updateable types).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum


class CachePolicy(Enum):
    FOREVER = "forever"  # immutable: never invalidated
    NEVER = "never"  # updateable: always read fresh


@dataclass(frozen=True, slots=True)
class ObjType:
    name: str  # short, stable: part of the storage key
    schema: str  # codec record name (schemas/avro/<schema>.vN.avsc)
    mutable: bool
    cache: CachePolicy


class TypeRegistry:
    def __init__(self) -> None:
        self._types: dict[str, ObjType] = {}

    def register(self, obj_type: ObjType) -> ObjType:
        known = self._types.get(obj_type.name)
        if known is not None and known != obj_type:
            raise ValueError(f"object type {obj_type.name!r} registered twice differently")
        if obj_type.mutable and obj_type.cache is CachePolicy.FOREVER:
            raise ValueError(f"mutable type {obj_type.name!r} cannot be cached forever")
        self._types[obj_type.name] = obj_type
        return obj_type

    def get(self, name: str) -> ObjType:
        try:
            return self._types[name]
        except KeyError:
            raise KeyError(f"unknown object type {name!r}") from None

    def __iter__(self) -> Iterator[ObjType]:
        return iter(self._types.values())

    def __contains__(self, name: object) -> bool:
        return name in self._types


COMMIT = ObjType("commit", "commit", mutable=False, cache=CachePolicy.FOREVER)
INDEX = ObjType("index", "index", mutable=False, cache=CachePolicy.FOREVER)
ENTITY = ObjType("entity", "entity", mutable=False, cache=CachePolicy.FOREVER)
# Pieces of Iceberg table and view metadata (schemas, specs, pages of snapshots, ...),
# content-addressed and referenced from the entity's attachments (metastore.iceberg.pieces).
METADATA_PIECE = ObjType(
    "metadata-piece", "metadata_piece", mutable=False, cache=CachePolicy.FOREVER
)
NODE_LEASE = ObjType("node-lease", "node_lease", mutable=True, cache=CachePolicy.NEVER)
# Every coordinated task record (batch jobs' leases and progress, ``metastore.engine.tasks``).
TASK_TABLE = ObjType("task-table", "task_table", mutable=True, cache=CachePolicy.NEVER)


def default_registry() -> TypeRegistry:
    registry = TypeRegistry()
    for obj_type in (COMMIT, INDEX, ENTITY, METADATA_PIECE, NODE_LEASE, TASK_TABLE):
        registry.register(obj_type)
    return registry
