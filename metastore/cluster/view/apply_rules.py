"""The view's apply rules: what each changelog record does, as one pure function.

``apply_records(state, records, read, context)`` decides, for consumed records in
log order, what changes in the view: it reads stored values through ``read`` (the
values before this call; it overlays its own writes), and returns the new state,
the raw key writes (``None`` = delete) including the offsets, barriers and floors
that describe them, and the records it dropped with the reason. No I/O, logging
or clock: a node's ``ViewStore``, ``metastore replay`` and a batch job over the
topics get the same answer from the same log.

Every decision depends only on the order of the log, so every reader converges
to the same state. Records a broker delivers although aborted (Tansu) change
nothing unless they extend the chain the view holds:

- objects[p]: an object is stored once (the same key with other bytes is
  dropped); a tombstone (GC) removes it. An updateable applies if its epoch is at
  least the partition's floor (the highest epoch read in objects[p] so far) and
  its expected token is the stored one.
- refs[p]: a barrier sets the partition's epoch (its offset). A ref record
  applies in log order once objects[p] is read up to the offset it names
  (later refs records wait behind it), if its epoch is not below the current
  epoch and it expects the stored HEAD; the first record of a ref never seen
  applies whatever it expects (compaction cuts chains), unless the ref was
  deleted (a marker remembers).
- a record that cannot be decoded, or is in the wrong partition, is dropped; a
  record written by a newer release raises ``ViewError`` (dropping it would make
  this reader diverge from upgraded ones).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType

from metastore.cluster.changelog_records import (
    BARRIER_KEY,
    H_KIND,
    OBJECT_KEY,
    REF_KEY,
    UPDATEABLE_KEY,
    RecordCodec,
    RefRecord,
    Role,
    header,
    partition_for,
)
from metastore.cluster.cluster_config import ClusterConfig
from metastore.cluster.view.view_model import Message, ViewError
from metastore.cluster.view.view_state import Held, PartitionBarrier, ViewState
from metastore.model.codec import FORMAT, HEADER_LEN, Codec, CorruptRecord
from metastore.model.keys import SEP, ObjKey
from metastore.persistence.base import decode_ref, encode_ref
from metastore.persistence.rocksdb_layout import (
    DROPPED,
    OBJ,
    REF,
    UPD,
    barrier_key,
    deleted_ref_key,
    encode_barrier,
    encode_count,
    encode_floor,
    encode_updateable,
    floor_key,
    offsets_key,
    updateable_token,
)

# What a record that is not ours raises while decoding (fastavro and key parsing).
MALFORMED = (CorruptRecord, ValueError, EOFError, IndexError, KeyError, TypeError)
VERSIONED = ("barrier", "changelog_object", "changelog_ref")

Read = Callable[[bytes], bytes | None]


@dataclass(frozen=True, slots=True)
class ApplyContext:
    """What the rules need besides the state: which topic is which, the partition
    count (a record in the wrong partition is dropped) and the codec (its schema
    versions tell a record from a newer release)."""

    topics: Mapping[str, Role]
    partitions: int
    codec: Codec
    records: RecordCodec = field(init=False)
    versions: Mapping[str, int] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "topics", MappingProxyType(dict(self.topics)))
        object.__setattr__(self, "records", RecordCodec(self.codec, node="view"))
        versions = {name: self.codec.version(name) for name in VERSIONED}
        object.__setattr__(self, "versions", MappingProxyType(versions))

    def __reduce__(self) -> tuple[type[ApplyContext], tuple[object, ...]]:
        """Pickled as its inputs (a batch job ships it to its tasks)."""
        return type(self), (dict(self.topics), self.partitions, self.codec)

    @classmethod
    def of(cls, config: ClusterConfig, codec: Codec) -> ApplyContext:
        return cls(
            {config.refs_topic: "refs", config.objects_topic: "objects"}, config.partitions, codec
        )


@dataclass(frozen=True, slots=True)
class Drop:
    """A record the rules refused: it is read (its offset passes) but changes nothing."""

    role: Role
    partition: int
    offset: int
    reason: str


@dataclass(frozen=True, slots=True)
class Applied:
    """The outcome of one ``apply_records``."""

    state: ViewState
    writes: Mapping[bytes, bytes | None]  # raw key -> new value, None = delete
    drops: tuple[Drop, ...]
    consumed: int  # records passed in (re-deliveries included)
    applied: int  # records that changed (or confirmed) the view

    @property
    def dropped(self) -> int:
        return len(self.drops)

    @property
    def waiting(self) -> int:
        """Refs records held until their objects arrive (all partitions, after)."""
        return sum(len(q) for q in self.state.pending.values())


def apply_records(
    state: ViewState, records: Iterable[Message], read: Read, context: ApplyContext
) -> Applied:
    """Apply ``records`` (in log order, any mix of topics and partitions) to ``state``.

    Raises ``ValueError`` for a record of another topic and ``ViewError`` for one
    from a newer release; then nothing of the call counts. ``state`` is not changed.
    """
    work = _Work(state, read, context)
    consumed = 0
    for message in records:
        consumed += 1
        work.take(message)
    return work.result(consumed)


@lru_cache(maxsize=100_000)
def _catalog_partition(catalog: bytes, partitions: int) -> int:
    tenant, name = catalog.split(SEP)
    return partition_for(tenant.decode(), name.decode(), partitions)


class _Work:
    """One call's working copies and its write overlay."""

    def __init__(self, state: ViewState, read: Read, context: ApplyContext) -> None:
        self.state = state
        self.read = read
        self.context = context
        self.offsets = dict(state.offsets)
        self.barriers = dict(state.barriers)
        self.floors = dict(state.floors)
        self.queues: dict[int, list[Held]] = {}  # copied from the state when first touched
        self.writes: dict[bytes, bytes | None] = {}
        self.drops: list[Drop] = []
        self.applied = 0
        self.touched: set[tuple[Role, int]] = set()

    def take(self, message: Message) -> None:
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        role = self.context.topics.get(topic or "")
        if role is None or partition is None or offset is None or offset < 0:
            raise ValueError(f"not a record of this view: {topic}[{partition}]@{offset}")
        queue = self._queue(partition) if role == "refs" else []
        seen = queue[-1].offset + 1 if queue else self.offsets.get((role, partition), 0)
        if offset < seen:
            return  # read twice (a re-fetch): applying again would be a no-op anyway
        key, value = _bytes(message.key()), _bytes(message.value())
        headers = message.headers()
        if role == "objects":
            self._object(partition, offset, key, value, headers)
            self._advance("objects", partition, offset)
        else:
            queue.append(self._decode_refs(offset, key, value, headers))
        self._drain(partition)

    def result(self, consumed: int) -> Applied:
        for role, partition in self.touched:
            self.writes[offsets_key(role, partition)] = encode_count(
                self.offsets[(role, partition)]
            )
        dropped = self.state.dropped + len(self.drops)
        if self.drops:
            self.writes[DROPPED] = encode_count(dropped)
        pending = {**self.state.pending, **{p: tuple(q) for p, q in self.queues.items()}}
        state = ViewState.of(
            offsets=self.offsets,
            barriers=self.barriers,
            floors=self.floors,
            pending=pending,
            dropped=dropped,
        )
        return Applied(
            state, MappingProxyType(self.writes), tuple(self.drops), consumed, self.applied
        )

    # --- objects[p] --------------------------------------------------------------------

    def _object(
        self,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] | None,
    ) -> None:
        try:
            if key == BARRIER_KEY and value is not None:
                self._check_version(value, "barrier")
                barrier = self.context.records.decode_barrier(value)
                self.barriers[("objects", partition)] = PartitionBarrier(offset, barrier)
                self._put(barrier_key("objects", partition), encode_barrier(offset, value))
                self.applied += 1
            elif key is not None and key[:1] == OBJECT_KEY and _kind(headers, "object"):
                raw_key = key[1:]
                self._check_partition(partition, raw_key)
                if value is None:  # a GC tombstone: compaction removes the object too
                    self._put(OBJ + raw_key, None)
                    self.applied += 1
                    return
                self._check_version(value, "changelog_object")
                # The hot path of a replay: no key or model objects, one decode, one get.
                record = self.context.codec.decode("changelog_object", value)
                data: bytes = record["data"]
                stored = self._get(OBJ + raw_key)
                if stored is None:
                    self._put(OBJ + raw_key, encode_count(record["created_at_us"]) + data)
                elif stored[8:] != data:
                    reason = f"{ObjKey.decode(raw_key)}: stored with different bytes"
                    self._drop("objects", partition, offset, reason)
                    return
                self.applied += 1
            elif key is not None and key[:1] == UPDATEABLE_KEY and value is not None:
                if not _kind(headers, "updateable"):
                    raise ValueError("kind header is not 'updateable'")
                self._check_version(value, "changelog_object")
                self._updateable(partition, offset, key, value)
            else:
                raise ValueError(f"unexpected key {key!r} or missing value in objects topic")
        except MALFORMED as exc:
            self._drop("objects", partition, offset, f"malformed: {exc}")

    def _updateable(self, partition: int, offset: int, key: bytes, value: bytes) -> None:
        self._check_partition(partition, key[1:])
        record = self.context.records.decode_updateable(key, value)
        # The epoch floor comes from objects[p] itself (the highest epoch read there so
        # far), not from refs[p]: the two topics are read at independent speeds, and a
        # floor taken from the other topic would make readers decide differently.
        floor = self.floors.get(partition, -1)
        if record.epoch < floor:
            reason = f"{record.key}: epoch {record.epoch} < {floor}"
            self._drop("objects", partition, offset, reason)
            return
        if record.epoch > floor:
            self.floors[partition] = record.epoch
            self._put(floor_key(partition), encode_floor(record.epoch))
        raw_key = UPD + key[1:]
        stored = self._get(raw_key)
        token = None if stored is None else updateable_token(stored)
        if token != record.expected_token:
            self._drop(
                "objects", partition, offset,
                f"{record.key}: expected token {record.expected_token!r}, view has {token!r}",
            )  # fmt: skip
            return
        new = record.new
        self._put(raw_key, None if new is None else encode_updateable(new))
        self.applied += 1

    # --- refs[p] -----------------------------------------------------------------------

    def _decode_refs(
        self,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] | None,
    ) -> Held:
        records = self.context.records
        try:
            if value is None:
                if key is None or key[:1] != REF_KEY or not _kind(headers, "ref"):
                    raise ValueError(f"unexpected tombstone {key!r} in refs topic")
                return Held(offset, ref=records.decode_ref_tombstone(key, headers))
            if key == BARRIER_KEY:
                self._check_version(value, "barrier")
                return Held(offset, barrier=records.decode_barrier(value), value=value)
            if key is None or key[:1] != REF_KEY or not _kind(headers, "ref"):
                raise ValueError(f"unexpected key {key!r} in refs topic")
            self._check_version(value, "changelog_ref")
            return Held(offset, ref=records.decode_ref(key, value))
        except MALFORMED as exc:
            return Held(offset, malformed=f"malformed: {exc}")

    def _drain(self, partition: int) -> None:
        """Apply refs[p] records in order while their objects are in; stop at the first
        that waits (every later one waits behind it)."""
        if partition not in self.queues and not self.state.pending.get(partition):
            return
        queue = self._queue(partition)
        objects_next = self.offsets.get(("objects", partition), 0)
        done = 0
        while done < len(queue):
            entry = queue[done]
            if entry.ref is not None and entry.ref.objects_offset > objects_next:
                break
            self._held(partition, entry)
            self._advance("refs", partition, entry.offset)
            done += 1
        if done:
            del queue[:done]

    def _held(self, partition: int, entry: Held) -> None:
        if entry.malformed is not None:
            self._drop("refs", partition, entry.offset, entry.malformed)
        elif entry.barrier is not None:
            self.barriers[("refs", partition)] = PartitionBarrier(entry.offset, entry.barrier)
            self._put(barrier_key("refs", partition), encode_barrier(entry.offset, entry.value))
            self.applied += 1
        elif entry.ref is not None:
            self._ref(partition, entry.offset, entry.ref)

    def _ref(self, partition: int, offset: int, record: RefRecord) -> None:
        key = record.key
        raw_key = REF + key.encode()
        try:
            self._check_partition(partition, raw_key[1:])
        except ValueError as exc:
            self._drop("refs", partition, offset, f"ref {key}: {exc}")
            return
        current = self.barriers.get(("refs", partition))
        epoch = -1 if current is None else current.offset
        if record.epoch < epoch:
            self._drop("refs", partition, offset, f"ref {key}: epoch {record.epoch} < {epoch}")
            return
        stored = self._get(raw_key)
        head = None if stored is None else decode_ref(self.context.codec, key, stored).head
        marker = deleted_ref_key(raw_key)
        # The first record of a ref the view has never seen applies whatever HEAD it
        # expects: log compaction removes a ref's older records, so a replay of a
        # compacted log starts in the middle of the chain. It cannot resurrect a deleted
        # ref: deletions leave a marker, and only a re-creation (no HEAD expected)
        # passes it. (Where aborted records are visible, nothing is compacted, and
        # every HEAD an owner expects was read from an earlier record of this log.)
        first_seen = stored is None and self._get(marker) is None
        if head != record.expected_head and not first_seen:
            self._drop(
                "refs", partition, offset,
                f"ref {key}: expected HEAD {record.expected_head}, view has {head}",
            )  # fmt: skip
            return
        new = record.new
        self._put(raw_key, None if new is None else encode_ref(self.context.codec, new))
        self._put(marker, encode_count(offset) if new is None else None)
        self.applied += 1

    # --- helpers -------------------------------------------------------------------------

    def _queue(self, partition: int) -> list[Held]:
        queue = self.queues.get(partition)
        if queue is None:
            queue = self.queues[partition] = list(self.state.pending.get(partition, ()))
        return queue

    def _advance(self, role: Role, partition: int, offset: int) -> None:
        self.offsets[(role, partition)] = offset + 1
        self.touched.add((role, partition))

    def _get(self, key: bytes) -> bytes | None:
        if key in self.writes:
            return self.writes[key]
        return self.read(key)

    def _put(self, key: bytes, value: bytes | None) -> None:
        self.writes[key] = value

    def _drop(self, role: Role, partition: int, offset: int, reason: str) -> None:
        self.drops.append(Drop(role, partition, offset, reason))

    def _check_partition(self, partition: int, raw_key: bytes) -> None:
        """``raw_key`` (an encoded ObjKey or RefKey) belongs to ``partition``."""
        cut = raw_key.index(SEP, raw_key.index(SEP) + 1)  # after tenant and catalog
        catalog = raw_key[:cut]
        known = _catalog_partition(catalog, self.context.partitions)
        if known != partition:
            raise ValueError(f"{catalog!r} belongs to partition {known}, not {partition}")

    def _check_version(self, value: bytes, name: str) -> None:
        """A record from a newer release stops the view: dropping it would diverge.
        (The writer's schema version is in the value's codec header.)"""
        if len(value) >= HEADER_LEN and value[0] == FORMAT:
            version = int.from_bytes(value[1:HEADER_LEN], "big")
            if version > self.context.versions[name]:
                raise ViewError(f"{name} v{version} is newer than this node: upgrade it")


def _kind(headers: Sequence[tuple[str, bytes | None]] | None, kind: str) -> bool:
    """The kind header agrees with the key (absent = trust the key)."""
    found = header(headers, H_KIND)
    return found is None or found == kind.encode()


def _bytes(raw: str | bytes | None) -> bytes | None:
    return raw.encode() if isinstance(raw, str) else raw
