"""``ViewState``: everything a view knows besides the catalog data, as one value.

The apply rules take a state and return a new one; the store publishes it whole,
so a reader never sees offsets from one batch and barriers from another. All of
it except the held refs records is also stored (``layout``), in the same
WriteBatch as the data it describes: ``decode_state`` reads it back on restart.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from metastore.cluster.changelog_records import ROLES, Barrier, RefRecord, Role
from metastore.persistence.rocksdb_layout import (
    BARRIER_PREFIX,
    DROPPED,
    EPOCH_FLOOR,
    OFFSETS,
    TOPIC_BYTE,
    decode_barrier,
    decode_count,
    decode_floor,
    partition_of_key,
)


@dataclass(frozen=True, slots=True)
class PartitionBarrier:
    """The latest barrier of one topic partition (an owner's announcement)."""

    offset: int  # in refs[p] this is the partition's epoch
    barrier: Barrier


@dataclass(frozen=True, slots=True)
class Held:
    """A refs[p] record decoded on arrival, held in order while it waits for objects[p]."""

    offset: int
    ref: RefRecord | None = None
    barrier: Barrier | None = None
    value: bytes = b""  # a barrier's record as consumed (stored with it)
    malformed: str | None = None  # why it cannot be decoded: dropped in its turn


def _frozen(mapping: object) -> None:
    if not isinstance(mapping, MappingProxyType):
        raise TypeError("ViewState holds read-only mappings; build it with ViewState.of")


@dataclass(frozen=True, slots=True)
class ViewState:
    """Offsets, barriers, epoch floors, held refs records and the drop count.

    Immutable: its mappings are read-only views of dicts nobody else holds, and
    ``Held`` entries are frozen. Build one with ``ViewState.of``.
    """

    offsets: Mapping[tuple[Role, int], int] = field(default_factory=lambda: MappingProxyType({}))
    barriers: Mapping[tuple[Role, int], PartitionBarrier] = field(
        default_factory=lambda: MappingProxyType({})
    )
    floors: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))
    pending: Mapping[int, tuple[Held, ...]] = field(default_factory=lambda: MappingProxyType({}))
    dropped: int = 0

    def __post_init__(self) -> None:
        for mapping in (self.offsets, self.barriers, self.floors, self.pending):
            _frozen(mapping)

    @classmethod
    def of(
        cls,
        *,
        offsets: Mapping[tuple[Role, int], int] | None = None,
        barriers: Mapping[tuple[Role, int], PartitionBarrier] | None = None,
        floors: Mapping[int, int] | None = None,
        pending: Mapping[int, Iterable[Held]] | None = None,
        dropped: int = 0,
    ) -> ViewState:
        """A state from plain mappings (copied; empty held queues are left out)."""
        return cls(
            MappingProxyType(dict(offsets or {})),
            MappingProxyType(dict(barriers or {})),
            MappingProxyType(dict(floors or {})),
            MappingProxyType({p: held for p, q in (pending or {}).items() if (held := tuple(q))}),
            dropped,
        )

    def __reduce__(self) -> tuple[Callable[..., ViewState], tuple[object, ...]]:
        """Pickled as plain dicts (a batch job ships states between processes)."""
        mappings = (self.offsets, self.barriers, self.floors, self.pending)
        return _restore, (*(dict(m) for m in mappings), self.dropped)

    def offset(self, role: Role, partition: int) -> int:
        """The next offset of ``role[partition]`` to read; all below are applied or dropped."""
        return self.offsets.get((role, partition), 0)

    def barrier(self, partition: int, role: Role = "refs") -> PartitionBarrier | None:
        return self.barriers.get((role, partition))

    def epoch(self, partition: int) -> int:
        """Offset of the latest barrier in refs[p]; -1 before the first owner."""
        found = self.barriers.get(("refs", partition))
        return -1 if found is None else found.offset

    def floor(self, partition: int) -> int:
        """The highest updateable epoch read in objects[p]; -1 before any."""
        return self.floors.get(partition, -1)

    def barrier_seen(self, partition: int, nonce: str) -> tuple[int, int] | None:
        """(epoch, objects barrier offset) once the latest barrier in BOTH topics has
        ``nonce``: the owner that wrote it is caught up. None otherwise."""
        refs = self.barriers.get(("refs", partition))
        objects = self.barriers.get(("objects", partition))
        if refs is None or objects is None:
            return None
        if refs.barrier.nonce != nonce or objects.barrier.nonce != nonce:
            return None
        return refs.offset, objects.offset

    def routes(self) -> dict[int, Barrier]:
        """Owner announcement per partition, from the latest refs barriers."""
        return {p: b.barrier for (role, p), b in self.barriers.items() if role == "refs"}

    def waiting(self) -> dict[int, int]:
        """Refs records held per partition until objects[p] catches up."""
        return {p: len(q) for p, q in self.pending.items() if q}

    def refs_read(self, partition: int) -> int:
        """The next refs[p] offset the view needs: after those it holds, else the stored one."""
        queue = self.pending.get(partition)
        if queue:
            return queue[-1].offset + 1
        return self.offset("refs", partition)


def _restore(
    offsets: Mapping[tuple[Role, int], int],
    barriers: Mapping[tuple[Role, int], PartitionBarrier],
    floors: Mapping[int, int],
    pending: Mapping[int, Iterable[Held]],
    dropped: int,
) -> ViewState:
    return ViewState.of(
        offsets=offsets, barriers=barriers, floors=floors, pending=pending, dropped=dropped
    )


def decode_state(
    entries: Iterable[tuple[bytes, bytes]], decode_barrier_record: Callable[[bytes], Barrier]
) -> ViewState:
    """The stored part of a state from a view's own keys (any order; others ignored).

    Held refs records are not stored: after a restart they are read again, from
    the stored refs offsets on."""
    offsets: dict[tuple[Role, int], int] = {}
    barriers: dict[tuple[Role, int], PartitionBarrier] = {}
    floors: dict[int, int] = {}
    dropped = 0
    offset_roles: dict[bytes, Role] = {OFFSETS + TOPIC_BYTE[role]: role for role in ROLES}
    barrier_roles: dict[bytes, Role] = {BARRIER_PREFIX[role]: role for role in ROLES}
    for key, raw in entries:
        if key == DROPPED:
            dropped = decode_count(raw)
        elif len(key) == 4 and key[:2] in offset_roles:
            offsets[(offset_roles[key[:2]], partition_of_key(key))] = decode_count(raw)
        elif len(key) == 3 and key[:1] in barrier_roles:
            offset, value = decode_barrier(raw)
            barrier = PartitionBarrier(offset, decode_barrier_record(value))
            barriers[(barrier_roles[key[:1]], partition_of_key(key))] = barrier
        elif len(key) == 3 and key[:1] == EPOCH_FLOOR:
            floors[partition_of_key(key)] = decode_floor(raw)
    return ViewState.of(offsets=offsets, barriers=barriers, floors=floors, dropped=dropped)
