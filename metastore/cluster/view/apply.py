"""One ``ViewStore.apply``: the rules that decide what each changelog record does."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rocksdict import WriteBatch

from metastore.cluster.records import (
    BARRIER_KEY,
    H_KIND,
    OBJECT_KEY,
    REF_KEY,
    UPDATEABLE_KEY,
    RefRecord,
    header,
    partition_for,
)
from metastore.cluster.view.model import (
    DELETED_REF,
    DROPPED,
    EPOCH_FLOOR,
    MALFORMED,
    OBJECTS_BARRIER,
    OFFSETS,
    REFS_BARRIER,
    ROLE_BYTE,
    Entry,
    Message,
    PartitionBarrier,
    Role,
    ViewError,
)
from metastore.codec import FORMAT, HEADER_LEN
from metastore.keys import SEP, ObjKey
from metastore.persistence.base import Ref, encode_ref
from metastore.persistence.rocksdb import (
    OBJ,
    REF,
    UPD,
    _decode_updateable,
    _encode_updateable,
)

if TYPE_CHECKING:
    from metastore.cluster.view.store import ViewStore


RECENT_DROPS = 4096  # per partition and topic: enough for an owner to check its own writes


def _p(partition: int) -> bytes:
    return partition.to_bytes(2, "big")


class BatchApply:
    """One ``apply``: decisions against the store plus this batch's own writes (an
    overlay), published to the in-memory mirror only after the WriteBatch is written."""

    def __init__(self, store: ViewStore) -> None:
        self.store = store
        self.db = store._live()
        self.batch = WriteBatch(raw_mode=True)
        self.kv: dict[bytes, bytes | None] = {}
        with store._state:
            self.offsets = dict(store._offsets)
            self.barriers = dict(store._barriers)
            self.floors = dict(store._floors)
            self.pending = {p: list(q) for p, q in store._pending.items() if q}
        self.applied = 0
        self.dropped = 0
        self.drops: list[tuple[Role, int, int]] = []
        self.waiting_total = 0
        self.touched: set[tuple[Role, int]] = set()
        codec = store._codec
        self.versions = {
            n: codec.version(n) for n in ("barrier", "changelog_object", "changelog_ref")
        }

    def take(self, message: Message) -> None:
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        role = self.store._roles.get(topic or "")
        if role is None or partition is None or offset is None or offset < 0:
            raise ValueError(f"not a record of this view: {topic}[{partition}]@{offset}")
        queue = self.pending.setdefault(partition, []) if role == "refs" else []
        seen = queue[-1].offset + 1 if queue else self.offsets.get((role, partition), 0)
        if offset < seen:
            return  # read twice (a re-fetch): applying again would be a no-op anyway
        key, value = _bytes(message.key()), _bytes(message.value())
        headers = message.headers()
        if role == "objects":
            self._object(partition, offset, key, value, headers)
            self._advance("objects", partition, offset)
            self._drain(partition)
        else:
            queue.append(self._decode_refs(offset, key, value, headers))
            self._drain(partition)

    def commit(self) -> None:
        store = self.store
        for role, partition in self.touched:
            key = OFFSETS + ROLE_BYTE[role] + _p(partition)
            self.batch.put(key, self.offsets[(role, partition)].to_bytes(8, "big"))
        with store._state:
            dropped = store._dropped + self.dropped
        if self.dropped:
            self.batch.put(DROPPED, dropped.to_bytes(8, "big"))
        if not self.batch.is_empty():
            self.db.write(self.batch, store._write_opt)
        with store._state:
            store._offsets = self.offsets
            store._barriers = self.barriers
            store._floors = self.floors
            store._pending = self.pending
            store._dropped = dropped
            for role, partition, offset in self.drops:
                store._recent_drops.setdefault(
                    (role, partition), deque(maxlen=RECENT_DROPS)
                ).append(offset)
        self.waiting_total = sum(len(q) for q in self.pending.values())

    # --- objects[p] --------------------------------------------------------------------

    def _object(
        self,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] | None,
    ) -> None:
        records = self.store._records
        try:
            if key == BARRIER_KEY and value is not None:
                self._check_version(value, "barrier")
                barrier = records.decode_barrier(value)
                self.barriers[("objects", partition)] = PartitionBarrier(offset, barrier)
                self._put(OBJECTS_BARRIER + _p(partition), offset.to_bytes(8, "big") + value)
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
                record = self.store._codec.decode("changelog_object", value)
                data: bytes = record["data"]
                stored = self._get(OBJ + raw_key)
                if stored is None:
                    self._put(OBJ + raw_key, record["created_at_us"].to_bytes(8, "big") + data)
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
        record = self.store._records.decode_updateable(key, value)
        # The epoch floor comes from objects[p] itself (the highest epoch read there so
        # far), not from refs[p]: the two topics are read at independent speeds, and a
        # floor taken from the other topic would make nodes decide differently.
        floor = self.floors.get(partition, -1)
        if record.epoch < floor:
            reason = f"{record.key}: epoch {record.epoch} < {floor}"
            self._drop("objects", partition, offset, reason)
            return
        if record.epoch > floor:
            self.floors[partition] = record.epoch
            self._put(EPOCH_FLOOR + _p(partition), record.epoch.to_bytes(8, "big", signed=True))
        raw_key = UPD + key[1:]
        stored = self._get(raw_key)
        token = None if stored is None else _decode_updateable(record.key, stored).token
        if token != record.expected_token:
            self._drop(
                "objects", partition, offset,
                f"{record.key}: expected token {record.expected_token!r}, view has {token!r}",
            )  # fmt: skip
            return
        new = record.new
        self._put(raw_key, None if new is None else _encode_updateable(new))
        self.applied += 1

    # --- refs[p] -----------------------------------------------------------------------

    def _decode_refs(
        self,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] | None,
    ) -> Entry:
        records = self.store._records
        try:
            if value is None:
                if key is None or key[:1] != REF_KEY or not _kind(headers, "ref"):
                    raise ValueError(f"unexpected tombstone {key!r} in refs topic")
                return Entry(offset, ref=records.decode_ref_tombstone(key, headers))
            if key == BARRIER_KEY:
                self._check_version(value, "barrier")
                return Entry(offset, barrier=records.decode_barrier(value), value=value)
            if key is None or key[:1] != REF_KEY or not _kind(headers, "ref"):
                raise ValueError(f"unexpected key {key!r} in refs topic")
            self._check_version(value, "changelog_ref")
            return Entry(offset, ref=records.decode_ref(key, value))
        except MALFORMED as exc:
            return Entry(offset, malformed=f"malformed: {exc}")

    def _drain(self, partition: int) -> None:
        """Apply refs[p] records in order while their objects are in; stop at the first
        that waits (every later one waits behind it)."""
        queue = self.pending.get(partition)
        objects_next = self.offsets.get(("objects", partition), 0)
        done = 0
        while queue and done < len(queue):
            entry = queue[done]
            if entry.ref is not None and entry.ref.objects_offset > objects_next:
                break
            self._ref_entry(partition, entry)
            self._advance("refs", partition, entry.offset)
            done += 1
        if done and queue is not None:
            del queue[:done]

    def _ref_entry(self, partition: int, entry: Entry) -> None:
        if entry.malformed is not None:
            self._drop("refs", partition, entry.offset, entry.malformed)
        elif entry.barrier is not None:
            self.barriers[("refs", partition)] = PartitionBarrier(entry.offset, entry.barrier)
            self._put(REFS_BARRIER + _p(partition), entry.offset.to_bytes(8, "big") + entry.value)
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
        head = None if stored is None else self.store._decode_ref(raw_key, stored).head
        marker = DELETED_REF + raw_key[1:]
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
        new: Ref | None = record.new
        self._put(raw_key, None if new is None else encode_ref(self.store._codec, new))
        self._put(marker, offset.to_bytes(8, "big") if new is None else None)
        self.applied += 1

    # --- helpers -------------------------------------------------------------------------

    def _advance(self, role: Role, partition: int, offset: int) -> None:
        self.offsets[(role, partition)] = offset + 1
        self.touched.add((role, partition))

    def _get(self, key: bytes) -> bytes | None:
        if key in self.kv:
            return self.kv[key]
        found: bytes | None = self.db.get(key)
        return found

    def _put(self, key: bytes, value: bytes | None) -> None:
        self.kv[key] = value
        if value is None:
            self.batch.delete(key)
        else:
            self.batch.put(key, value)

    def _drop(self, role: Role, partition: int, offset: int, reason: str) -> None:
        self.dropped += 1
        self.drops.append((role, partition, offset))
        self.store._log_drop(role, partition, offset, reason)

    def _check_partition(self, partition: int, raw_key: bytes) -> None:
        """``raw_key`` (an encoded ObjKey or RefKey) belongs to ``partition``."""
        cut = raw_key.index(SEP, raw_key.index(SEP) + 1)  # after tenant and catalog
        catalog = raw_key[:cut]
        known = self.store._partition_of.get(catalog)
        if known is None:
            tenant, name = catalog.split(SEP)
            known = partition_for(tenant.decode(), name.decode(), self.store.config.partitions)
            if len(self.store._partition_of) < 100_000:
                self.store._partition_of[catalog] = known
        if known != partition:
            raise ValueError(f"{catalog!r} belongs to partition {known}, not {partition}")

    def _check_version(self, value: bytes, name: str) -> None:
        """A record from a newer release stops the view: dropping it would diverge.
        (The writer's schema version is in the value's codec header.)"""
        if len(value) >= HEADER_LEN and value[0] == FORMAT:
            version = int.from_bytes(value[1:HEADER_LEN], "big")
            if version > self.versions[name]:
                raise ViewError(f"{name} v{version} is newer than this node: upgrade it")


def _kind(headers: Sequence[tuple[str, bytes | None]] | None, kind: str) -> bool:
    """The kind header agrees with the key (absent = trust the key)."""
    found = header(headers, H_KIND)
    return found is None or found == kind.encode()


def _bytes(raw: str | bytes | None) -> bytes | None:
    return raw.encode() if isinstance(raw, str) else raw
