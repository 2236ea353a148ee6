"""The persistence contract: immutable objects, CAS'd references, updateable objects.

Deliberately narrow: anything that can do single-row conditional writes (a
key-value store with compare-and-swap, a Kafka partition with one writer) can
implement it. ``write`` is the one mutation of the commit
path: it stores new immutable objects, deletes garbage-collected ones and,
atomically with both, applies one compare-and-swap on a reference. In Kafka mode
that maps to one transaction (deletions are tombstones in the objects topic).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from metastore.errors import MetastoreError
from metastore.model.codec import Codec
from metastore.model.keys import ObjKey, RefKey

DEFAULT_RECENT_HEADS = 20


@dataclass(frozen=True, slots=True)
class StoredObject:
    key: ObjKey
    data: bytes  # codec-encoded value (header + Avro)
    created_at_us: int


@dataclass(frozen=True, slots=True)
class Ref:
    key: RefKey
    head: int
    created_at_us: int
    recent: tuple[int, ...] = field(default=())  # previous HEADs, newest first

    def advanced(self, new_head: int, now_us: int, keep: int = DEFAULT_RECENT_HEADS) -> Ref:
        """The ref after moving HEAD to ``new_head``; the old HEAD joins ``recent``."""
        recent = (self.head, *self.recent)[:keep] if keep > 0 else ()
        return Ref(self.key, new_head, now_us, recent)


@dataclass(frozen=True, slots=True)
class RefUpdate:
    """CAS on one ref: ``expected_head`` None = must not exist; ``new`` None = delete."""

    key: RefKey
    expected_head: int | None
    new: Ref | None


@dataclass(frozen=True, slots=True)
class UpdateableObject:
    key: ObjKey
    data: bytes
    token: str  # version token: changes on every update, compared by CAS


@dataclass(frozen=True, slots=True)
class Write:
    """The arguments of one ``Persistence.write``: applied all or nothing on its own."""

    objects: Sequence[StoredObject]
    ref_update: RefUpdate | None = None
    deletes: Sequence[ObjKey] = ()


class Persistence(Protocol):
    """Thread-safe. Every backend passes ``tests/persistence/test_contract.py``."""

    def get_objects(self, keys: Sequence[ObjKey]) -> list[StoredObject | None]:
        """Objects in the order of ``keys``; None where absent."""
        ...

    def write(
        self,
        objects: Sequence[StoredObject],
        ref_update: RefUpdate | None = None,
        deletes: Sequence[ObjKey] = (),
    ) -> None:
        """Store ``objects``, delete ``deletes`` and apply ``ref_update``, all or nothing.

        Raises ``RefConditionFailed`` if the ref's HEAD is not the expected one
        (or it exists when it must not), ``ObjectConflict`` if an object id is
        already stored with different bytes; in both cases nothing is written.
        Re-writing an object with identical bytes is a no-op; deleting an absent
        key is a no-op. The existence check sees this call's deletions: a key both
        deleted and written ends up stored (the write references it), see
        ``rules.new_objects``.
        """
        ...

    def get_ref(self, key: RefKey) -> Ref | None: ...

    def scan_refs(self, tenant: str | None = None) -> Iterator[Ref]:
        """All refs (of one tenant), sorted by encoded key."""
        ...

    def scan_objects(self, tenant: str, catalog: str) -> Iterator[StoredObject]:
        """Every immutable object of one catalog, sorted by encoded key (maintenance)."""
        ...

    def get_updateable(self, key: ObjKey) -> UpdateableObject | None: ...

    def cas_updateable(
        self, key: ObjKey, expected_token: str | None, new: UpdateableObject | None
    ) -> bool:
        """Replace (or create, ``expected_token`` None; or delete, ``new`` None) if the
        stored token matches. False, writing nothing, if it does not."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class WritesTogether(Protocol):
    """A backend that makes several catalogs' writes durable together.

    The commits of different catalogs never conflict, yet each batch paid for its
    own durable write and its own thread hand-off; a backend with one local log
    (RocksDB's WAL) can take them in one write and one sync. A partitioned backend
    (Kafka: one transaction per partition owner) cannot, and does not offer this.
    """

    def write_each(self, writes: Sequence[Write]) -> list[MetastoreError | None]:
        """Apply each of ``writes`` as ``write`` would, in order (a later one sees the
        earlier ones), each all or nothing on its own, and return once every applied
        one is durable. Per write: None if applied, or the ``RefConditionFailed`` or
        ``ObjectConflict`` that refused it (nothing of it written). Any other
        exception leaves the outcome of every write unknown."""
        ...


def encode_ref(codec: Codec, ref: Ref) -> bytes:
    return codec.encode(
        "ref", {"head": ref.head, "created_at_us": ref.created_at_us, "recent": list(ref.recent)}
    )


def decode_ref(codec: Codec, key: RefKey, data: bytes) -> Ref:
    record = codec.decode("ref", data)
    return Ref(key, record["head"], record["created_at_us"], tuple(record["recent"]))
