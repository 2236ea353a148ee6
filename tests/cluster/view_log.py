"""A changelog in memory for the view's unit tests: plain messages, real records.

``Rec`` is a consumed record as the apply rules read it (the ``Message``
protocol), ``Log`` hands out the next offsets of one partition's two topics and
encodes every record with the real ``RecordCodec``, exactly as a partition owner
writes it. ``DictView`` applies records to a plain dict with the same pure
function a node's view and a batch job call.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from metastore.cluster.changelog_records import (
    Barrier,
    Produced,
    RecordCodec,
    RefRecord,
    Role,
    UpdateableRecord,
    partition_for,
)
from metastore.cluster.view.apply_rules import Applied, ApplyContext, apply_records
from metastore.cluster.view.view_model import Message
from metastore.cluster.view.view_state import ViewState
from metastore.model.codec import default_codec
from metastore.model.keys import ObjKey, RefKey
from metastore.persistence.base import Ref, StoredObject, UpdateableObject

PARTITIONS = 4
TENANT = "acme"
TOPICS: dict[Role, str] = {"refs": "t.refs", "objects": "t.objects"}
CODEC = default_codec()
CONTEXT = ApplyContext({name: role for role, name in TOPICS.items()}, PARTITIONS, CODEC)


def catalog_in(partition: int, n: int = 0) -> str:
    """The n-th catalog name of TENANT that lives in ``partition``."""
    found = [
        f"cat{i}" for i in range(1000) if partition_for(TENANT, f"cat{i}", PARTITIONS) == partition
    ]
    return found[n]


@dataclass(frozen=True, slots=True)
class Rec:
    """One consumed record: where it was read and what it holds."""

    role: Role
    part: int
    at: int
    raw_key: bytes | None
    raw_value: bytes | None
    raw_headers: list[tuple[str, bytes | None]] | None = None

    def topic(self) -> str | None:
        return TOPICS[self.role]

    def partition(self) -> int | None:
        return self.part

    def offset(self) -> int | None:
        return self.at

    def key(self) -> bytes | None:
        return self.raw_key

    def value(self) -> bytes | None:
        return self.raw_value

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return self.raw_headers


@dataclass(slots=True)
class Log:
    """The two topic partitions of one catalog's partition, written in order."""

    partition: int = 1
    epoch: int = -1  # the epoch the next records carry (the latest barrier's offset)
    next: dict[Role, int] = field(default_factory=lambda: {"refs": 0, "objects": 0})
    records: RecordCodec = field(default_factory=lambda: RecordCodec(CODEC, node="owner"))

    @property
    def catalog(self) -> str:
        return catalog_in(self.partition)

    def append(self, produced: Produced) -> Rec:
        at = self.next[produced.topic]
        self.next[produced.topic] = at + 1
        headers: list[tuple[str, bytes | None]] = [(n, v) for n, v in produced.headers]
        return Rec(produced.topic, self.partition, at, produced.key, produced.value, headers)

    def raw(self, role: Role, key: bytes | None, value: bytes | None) -> Rec:
        """A record no owner writes (another producer, a corrupt value)."""
        at = self.next[role]
        self.next[role] = at + 1
        return Rec(role, self.partition, at, key, value, None)

    # --- what an owner writes ------------------------------------------------------------

    def obj(self, oid: int, data: bytes | None = None, catalog: str | None = None) -> StoredObject:
        key = ObjKey(TENANT, catalog or self.catalog, "commit", oid)
        return StoredObject(key, data or b"v%d" % oid, 1000 + oid)

    def ref_value(self, head: int, *recent: int, name: str = "main") -> Ref:
        return Ref(RefKey(TENANT, self.catalog, name), head, 2000 + head, tuple(recent))

    def objects(self, *objects: StoredObject) -> list[Rec]:
        return [self.append(self.records.object(o, self.epoch)) for o in objects]

    def ref(
        self,
        expected: int | None,
        new: Ref | None,
        *,
        name: str = "main",
        epoch: int | None = None,
        objects_offset: int | None = None,
    ) -> Rec:
        """A ref record that depends on every object written so far (unless told)."""
        record = RefRecord(
            RefKey(TENANT, self.catalog, name),
            expected,
            new,
            self.epoch if epoch is None else epoch,
            self.next["objects"] if objects_offset is None else objects_offset,
        )
        return self.append(self.records.ref(record))

    def updateable(
        self, oid: int, expected: str | None, token: str | None, *, epoch: int | None = None
    ) -> Rec:
        key = ObjKey(TENANT, self.catalog, "lease", oid)
        new = None if token is None else UpdateableObject(key, b"held by " + token.encode(), token)
        record = UpdateableRecord(key, expected, new, self.epoch if epoch is None else epoch)
        return self.append(self.records.updateable(record))

    def barrier(self, nonce: str = "n1") -> tuple[Rec, Rec]:
        """A new owner's barriers in both topics; later records carry its epoch."""
        barrier = Barrier("node", "http://node", nonce, 5)
        refs = self.append(self.records.barrier(barrier, "refs"))
        objects = self.append(self.records.barrier(barrier, "objects"))
        self.epoch = refs.at
        return refs, objects


@dataclass(slots=True)
class DictView:
    """A view in a plain dict: what a batch job does with the rules."""

    kv: dict[bytes, bytes | None] = field(default_factory=dict)
    state: ViewState = field(default_factory=ViewState)

    def apply(self, records: Iterable[Message]) -> Applied:
        applied = apply_records(self.state, records, self.kv.get, CONTEXT)
        self.kv.update(applied.writes)
        self.state = applied.state
        return applied

    def get(self, key: bytes) -> bytes | None:
        return self.kv.get(key)

    def items(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        return sorted((k, v) for k, v in self.kv.items() if k.startswith(prefix) and v is not None)
