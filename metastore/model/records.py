"""Typed, immutable forms of the stored records and their Avro mapping."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from metastore.model.codec import Codec
from metastore.model.counts import Counts
from metastore.model.index import Entry, StripeRef, decode_entries
from metastore.model.index_codec import INDEX_VERSION, encode_index
from metastore.model.keys import EntityKey, Kind

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class CommitChange:
    key: bytes  # encoded EntityKey
    action: str  # CREATE | UPDATE | DELETE


@dataclass(frozen=True, slots=True)
class Commit:
    id: int
    parent: int  # 0 = root
    seq: int
    created_at_us: int
    principal: str
    operation: str
    changes: tuple[CommitChange, ...]
    index: tuple[Entry, ...]  # embedded index, sorted
    stripes: tuple[StripeRef, ...]
    # serialized size of ``index``, or an upper bound (a decoded commit's whole size; not
    # stored)
    index_size: int
    # the catalog's live namespaces, tables and views after this commit (None: written
    # before counts were kept; ``metastore.model.counts``)
    counts: Counts | None = None

    def encode(
        self, codec: Codec, encoded_index: bytes | None = None, encoded_stripes: bytes | None = None
    ) -> bytes:
        """The stored record. ``encoded_index`` is ``index``'s Avro bytes if the caller has
        them (the engine encodes them while building the index, mostly from its parent's:
        ``metastore.model.index_codec``); the embedded index is not written again. So are
        ``stripes``' (the field after it) with ``encoded_stripes``
        (``metastore.model.index.encode_stripe_refs``)."""
        if codec.version("index") != INDEX_VERSION:
            raise ValueError(f"index v{codec.version('index')} needs its own writer")
        if encoded_index is None:
            encoded_index = encode_index(self.index).data
        record = {
            "parent": self.parent,
            "seq": self.seq,
            "created_at_us": self.created_at_us,
            "principal": self.principal,
            "operation": self.operation,
            "changes": [{"key": c.key, "action": c.action} for c in self.changes],
            "counts": self.counts.to_record() if self.counts is not None else None,
        }
        if encoded_stripes is not None:
            raw = encoded_index + encoded_stripes
            return codec.encode_around("commit", record, "index", raw, through="stripes")
        record["stripes"] = [{"first": s.first, "last": s.last, "id": s.id} for s in self.stripes]
        return codec.encode_around("commit", record, "index", encoded_index)

    @staticmethod
    def links(codec: Codec, data: bytes) -> tuple[int, int]:
        """A stored commit's parent id and sequence number, without decoding the rest:
        every version of the commit record starts with both (``Codec.leading_longs``)."""
        parent, seq = codec.leading_longs("commit", data, ("parent", "seq"))
        return parent, seq

    @classmethod
    def decode(cls, codec: Codec, obj_id: int, data: bytes) -> Commit:
        r = codec.decode("commit", data)
        return cls(
            id=obj_id,
            parent=r["parent"],
            seq=r["seq"],
            created_at_us=r["created_at_us"],
            principal=r["principal"],
            operation=r["operation"],
            changes=tuple(CommitChange(c["key"], c["action"]) for c in r["changes"]),
            index=tuple(decode_entries(r["index"])),
            stripes=tuple(StripeRef(s["first"], s["last"], s["id"]) for s in r["stripes"]),
            index_size=len(data),  # holds the index; its exact size would take a pass
            counts=Counts.from_record(r.get("counts")),
        )


@dataclass(frozen=True, slots=True)
class Entity:
    """One immutable version of a namespace, table, view, catalog or tenant record."""

    entity_id: int
    kind: Kind
    path: tuple[str, ...]
    properties: Mapping[str, str]
    location: str | None
    version: int
    created_at_us: int
    updated_at_us: int
    attachments: Mapping[str, int] = field(default_factory=lambda: _EMPTY)

    @property
    def key(self) -> EntityKey:
        if self.kind is Kind.SYSTEM:
            return EntityKey(Kind.SYSTEM, (), self.path[-1])
        return EntityKey(self.kind, self.path[:-1], self.path[-1])

    def encode(self, codec: Codec) -> bytes:
        return codec.encode(
            "entity",
            {
                "entity_id": self.entity_id,
                "kind": self.kind.label,
                "path": list(self.path),
                "properties": dict(self.properties),
                "location": self.location,
                "version": self.version,
                "created_at_us": self.created_at_us,
                "updated_at_us": self.updated_at_us,
                "attachments": dict(self.attachments),
            },
        )

    @classmethod
    def decode(cls, codec: Codec, data: bytes) -> Entity:
        r = codec.decode("entity", data)
        return cls(
            entity_id=r["entity_id"],
            kind=Kind[r["kind"].upper()],
            path=tuple(r["path"]),
            properties=MappingProxyType(r["properties"]),
            location=r["location"],
            version=r["version"],
            created_at_us=r["created_at_us"],
            updated_at_us=r["updated_at_us"],
            attachments=MappingProxyType(r["attachments"]),
        )


def stripe_encode(codec: Codec, entries: Sequence[Entry], body: bytes | None = None) -> bytes:
    """A stripe's stored record; ``body`` is ``entries``' Avro bytes if already written
    (``metastore.model.index_codec``)."""
    return codec.frame("index", INDEX_VERSION, encode_index(entries).data if body is None else body)


def stripe_decode(codec: Codec, data: bytes) -> list[Entry]:
    return decode_entries(codec.decode("index", data))
