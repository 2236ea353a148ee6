"""The view's vocabulary: topic roles, its own key prefixes, results and errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from metastore.cluster.records import Barrier, RefRecord
from metastore.codec import CorruptRecord
from metastore.errors import MetastoreError

Role = Literal["refs", "objects"]
ROLES: tuple[Role, Role] = ("refs", "objects")
ROLE_BYTE: dict[Role, bytes] = {"refs": b"r", "objects": b"o"}
OFFSETS = b"x"
REFS_BARRIER = b"b"
OBJECTS_BARRIER = b"c"
EPOCH_FLOOR = b"e"
DROPPED = b"d" + b"dropped"
VIEW_MARKER = b"m" + b"view"
DELETED_REF = b"z"  # + encoded ref key -> offset of the deletion (see apply._ref)
# What a record that is not ours raises while decoding (fastavro and key parsing).
MALFORMED = (CorruptRecord, ValueError, EOFError, IndexError, KeyError, TypeError)


class ViewError(MetastoreError):
    """The view cannot go on: a record from a newer release, or another cluster's view."""


class ReadOnlyView(MetastoreError):
    """A write reached a view; in cluster mode writes go through the partition owner."""


class Message(Protocol):
    """What ``apply`` reads of a consumed record (``confluent_kafka.Message``)."""

    def topic(self) -> str | None: ...
    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...
    def key(self) -> str | bytes | None: ...
    def value(self) -> str | bytes | None: ...
    def headers(self) -> list[tuple[str, bytes | None]] | None: ...


@dataclass(frozen=True, slots=True)
class PartitionBarrier:
    offset: int  # in refs[p] this is the partition's epoch
    barrier: Barrier


@dataclass(frozen=True, slots=True)
class ApplyResult:
    consumed: int  # records in the batch
    applied: int  # changed (or confirmed) the view
    dropped: int  # refused by a rule, counted
    waiting: int  # refs records held until their objects arrive (all partitions, after)


@dataclass(slots=True)
class Entry:
    """A refs[p] record decoded on arrival; held in order while it waits for objects."""

    offset: int
    ref: RefRecord | None = None
    barrier: Barrier | None = None
    value: bytes = b""
    malformed: str | None = None
