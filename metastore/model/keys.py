"""Storage keys and entity index keys.

Object key = (tenant, catalog, type, id); reference key = (tenant, catalog, name).
Both encode to bytes that sort by their parts, with 0x00 between
parts (names may not contain control characters, ``metastore.model.names``), so a
tenant's or a catalog's keys are one contiguous prefix.

Entity keys inside a commit's index put the parent namespace first, then the
kind, then the name, so the children of one namespace are one contiguous,
sorted range: listing and paging are range scans, and "is this namespace empty"
is one seek.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

SEP = b"\x00"
LEVEL_SEP = b"\x1f"


@dataclass(frozen=True, slots=True, order=True)
class ObjKey:
    tenant: str
    catalog: str
    type: str
    id: int

    def encode(self) -> bytes:
        return (
            self.tenant.encode()
            + SEP
            + self.catalog.encode()
            + SEP
            + self.type.encode()
            + SEP
            + self.id.to_bytes(8, "big")
        )

    @classmethod
    def decode(cls, raw: bytes) -> ObjKey:
        tenant, catalog, rest = raw.split(SEP, 2)
        obj_type, raw_id = rest[:-9], rest[-8:]
        return cls(
            tenant.decode(), catalog.decode(), obj_type.decode(), int.from_bytes(raw_id, "big")
        )


def catalog_prefix(tenant: str, catalog: str) -> bytes:
    """Prefix of every object (or ref) key of one catalog."""
    return tenant.encode() + SEP + catalog.encode() + SEP


def tenant_prefix(tenant: str) -> bytes:
    return tenant.encode() + SEP


@dataclass(frozen=True, slots=True, order=True)
class RefKey:
    tenant: str
    catalog: str
    name: str

    def encode(self) -> bytes:
        return self.tenant.encode() + SEP + self.catalog.encode() + SEP + self.name.encode()

    @classmethod
    def decode(cls, raw: bytes) -> RefKey:
        tenant, catalog, name = raw.split(SEP, 2)
        return cls(tenant.decode(), catalog.decode(), name.decode())


class Kind(Enum):
    """Entity kinds in a catalog's index; the value is the byte used in index keys."""

    NAMESPACE = "n"
    TABLE = "t"
    VIEW = "v"
    SYSTEM = "s"  # tenant / catalog records (their own properties)

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class EntityKey:
    kind: Kind
    namespace: tuple[str, ...]  # the parent namespace (for a namespace: its parent)
    name: str

    def encode(self) -> bytes:
        return children_prefix(self.namespace) + self.kind.value.encode() + self.name.encode()

    @property
    def path(self) -> tuple[str, ...]:
        return (*self.namespace, self.name)

    @classmethod
    def namespace_key(cls, levels: tuple[str, ...]) -> EntityKey:
        return cls(Kind.NAMESPACE, levels[:-1], levels[-1])

    @classmethod
    def decode(cls, raw: bytes) -> EntityKey:
        parent, _, rest = raw.partition(SEP)
        namespace = tuple(p.decode() for p in parent.split(LEVEL_SEP)) if parent else ()
        return cls(Kind(rest[:1].decode()), namespace, rest[1:].decode())

    def display(self) -> str:
        return ".".join(self.path)


def children_prefix(namespace: tuple[str, ...]) -> bytes:
    """Prefix shared by every entity directly inside ``namespace`` (() = catalog root)."""
    return LEVEL_SEP.join(level.encode() for level in namespace) + SEP


def kind_prefix(namespace: tuple[str, ...], kind: Kind) -> bytes:
    return children_prefix(namespace) + kind.value.encode()


SYSTEM_CATALOG = ""  # the catalog part of a tenant's own ref and system objects
MAIN_REF = "main"
CATALOG_RECORD = EntityKey(Kind.SYSTEM, (), "catalog")
TENANT_RECORD = EntityKey(Kind.SYSTEM, (), "tenant")
