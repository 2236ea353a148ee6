"""The materialized view every node keeps: the changelog topics applied to one RocksDB.

The objects, refs and updateables use the layout of ``RocksDBPersistence`` (which
this class extends for the read side), so the catalog logic reads a view like
any store; ``write`` and ``cas_updateable`` raise, because in cluster mode only a
partition owner writes, and it writes to Kafka. Next to the data::

    b"x" + role (b"r" | b"o") + partition (2 bytes BE) -> next offset to read (8 bytes BE)
    b"b" + partition -> latest refs barrier: its offset (= the partition's epoch) + value
    b"c" + partition -> latest objects barrier: its offset + value
    b"e" + partition -> highest updateable epoch read in objects[p] (8 bytes, signed)
    b"d" + b"dropped" -> records dropped so far (8 bytes BE)
    b"m" + b"view"   -> JSON {"prefix", "partitions"}: a view of which topics
    b"z" + ref key   -> offset of the ref's deletion (a deleted ref is never resurrected)

``apply`` writes the records of a consumed batch and the new offsets in one
WriteBatch (STYLE.md 5), so a crash never leaves data and offsets apart. Every
decision depends only on the order of the log, so every node converges to the
same state; records a broker delivers although aborted (Tansu) change nothing
unless they extend the chain the view holds (DESIGN.md, "Correct even where
aborted records are visible").
"""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from rocksdict import WriteBatch

from metastore.cluster.config import ClusterConfig
from metastore.cluster.records import Barrier, RecordCodec
from metastore.cluster.view.apply import BatchApply
from metastore.cluster.view.model import (
    DROPPED,
    EPOCH_FLOOR,
    OBJECTS_BARRIER,
    OFFSETS,
    REFS_BARRIER,
    ROLE_BYTE,
    ROLES,
    VIEW_MARKER,
    ApplyResult,
    Entry,
    Message,
    PartitionBarrier,
    ReadOnlyView,
    Role,
    ViewError,
)
from metastore.codec import Codec
from metastore.keys import ObjKey
from metastore.persistence.base import RefUpdate, StoredObject, UpdateableObject
from metastore.persistence.rocksdb import (
    OBJ,
    REF,
    UPD,
    RocksDBPersistence,
    StoreFormatError,
    _read_page,
)

log = logging.getLogger(__name__)


class ViewStore(RocksDBPersistence):
    """One node's view of ``<prefix>.refs`` and ``<prefix>.objects``; ``apply`` is its writer."""

    def __init__(
        self,
        path: str | Path,
        config: ClusterConfig,
        *,
        codec: Codec | None = None,
        sync: bool = False,  # the log is the source of truth: a lost tail is re-read
    ) -> None:
        super().__init__(path, sync=sync, codec=codec)
        self.config = config
        self._records = RecordCodec(self._codec, node="view")
        self._roles: dict[str, Role] = {config.refs_topic: "refs", config.objects_topic: "objects"}
        self._state = threading.Lock()  # the in-memory mirror below; readers take it briefly
        self._apply_lock = threading.Lock()  # one apply at a time
        self._offsets: dict[tuple[Role, int], int] = {}
        self._barriers: dict[tuple[Role, int], PartitionBarrier] = {}
        self._floors: dict[int, int] = {}
        self._pending: dict[int, list[Entry]] = {}
        self._dropped = 0
        self._recent_drops: dict[tuple[Role, int], deque[int]] = {}  # in memory only
        self._logged: set[tuple[Role, int]] = set()
        self._partition_of: dict[bytes, int] = {}  # encoded (tenant, catalog) -> partition
        try:
            self._load()
        except BaseException:
            self.close()
            raise

    # --- the read side beyond Persistence --------------------------------------------

    def offset(self, role: Role, partition: int) -> int:
        """The next offset to read; every record below it is applied (or dropped)."""
        with self._state:
            return self._offsets.get((role, partition), 0)

    def offsets(self) -> dict[tuple[Role, int], int]:
        with self._state:
            return dict(self._offsets)

    def epoch(self, partition: int) -> int:
        """Offset of the latest barrier in refs[p]; -1 before the first owner."""
        found = self.barrier(partition, "refs")
        return -1 if found is None else found.offset

    def barrier(self, partition: int, role: Role = "refs") -> PartitionBarrier | None:
        with self._state:
            return self._barriers.get((role, partition))

    def barrier_seen(self, partition: int, nonce: str) -> tuple[int, int] | None:
        """(epoch, objects barrier offset) once the latest barrier in BOTH topics has
        ``nonce``: the owner that wrote it is caught up. None otherwise."""
        with self._state:
            refs = self._barriers.get(("refs", partition))
            objects = self._barriers.get(("objects", partition))
        if refs is None or objects is None:
            return None
        if refs.barrier.nonce != nonce or objects.barrier.nonce != nonce:
            return None
        return refs.offset, objects.offset

    def routes(self) -> dict[int, Barrier]:
        """Owner announcement per partition, from the latest refs barriers."""
        with self._state:
            return {p: b.barrier for (role, p), b in self._barriers.items() if role == "refs"}

    def dropped_among(self, role: Role, partition: int, offsets: Sequence[int]) -> list[int]:
        """Which of ``offsets`` (recently applied) this view dropped instead of applying.

        An owner checks its own records with this before acknowledging: a record a
        newer owner's barrier made stale is in the log but changes nothing."""
        with self._state:
            recent = set(self._recent_drops.get((role, partition), ()))
        return [o for o in offsets if o in recent]

    @property
    def dropped(self) -> int:
        with self._state:
            return self._dropped

    def waiting(self) -> dict[int, int]:
        """Refs records held per partition until objects[p] catches up."""
        with self._state:
            return {p: len(q) for p, q in self._pending.items() if q}

    def refs_read(self, partition: int) -> int:
        """The next refs[p] offset the view needs: after those it holds, else the stored one."""
        with self._state:
            queue = self._pending.get(partition)
            if queue:
                return queue[-1].offset + 1
            return self._offsets.get(("refs", partition), 0)

    # --- writes are not for views ------------------------------------------------------

    def write(self, objects: Sequence[StoredObject], ref_update: RefUpdate | None = None) -> None:
        raise ReadOnlyView("a view is read-only: writes go through the partition owner")

    def cas_updateable(
        self, key: ObjKey, expected_token: str | None, new: UpdateableObject | None
    ) -> bool:
        raise ReadOnlyView("a view is read-only: writes go through the partition owner")

    # --- the writer ----------------------------------------------------------------------

    def apply(self, batch: Sequence[Message]) -> ApplyResult:
        """Apply consumed records in order, offsets in the same WriteBatch; then publish."""
        with self._apply_lock:
            work = BatchApply(self)
            for message in batch:
                work.take(message)
            work.commit()
            return ApplyResult(len(batch), work.applied, work.dropped, work.waiting_total)

    def _load(self) -> None:
        db = self._live()
        wanted = json.dumps(
            {"prefix": self.config.prefix, "partitions": self.config.partitions}, sort_keys=True
        ).encode()
        marker = db.get(VIEW_MARKER)
        if marker is None:
            if any(k[:1] in (OBJ, REF, UPD) for k, _ in _read_page(db, b"", b"", limit=8)):
                raise StoreFormatError("this database holds data but is not a view")
            batch = WriteBatch(raw_mode=True)
            batch.put(VIEW_MARKER, wanted)
            db.write(batch, self._write_opt)
        elif marker != wanted:
            raise ViewError(f"this view is of {marker.decode()}, not {wanted.decode()}")
        for role in ROLES:
            prefix = OFFSETS + ROLE_BYTE[role]
            for key, raw in _read_page(db, prefix, prefix, limit=1 << 16):
                self._offsets[(role, int.from_bytes(key[2:], "big"))] = int.from_bytes(raw, "big")
        for role, prefix in (("refs", REFS_BARRIER), ("objects", OBJECTS_BARRIER)):
            for key, raw in _read_page(db, prefix, prefix, limit=1 << 16):
                if len(key) == 3:
                    barrier = self._records.decode_barrier(raw[8:])
                    offset = int.from_bytes(raw[:8], "big")
                    self._barriers[(role, int.from_bytes(key[1:], "big"))] = PartitionBarrier(
                        offset, barrier
                    )
        for key, raw in _read_page(db, EPOCH_FLOOR, EPOCH_FLOOR, limit=1 << 16):
            self._floors[int.from_bytes(key[1:], "big")] = int.from_bytes(raw, "big", signed=True)
        raw_dropped = db.get(DROPPED)
        self._dropped = 0 if raw_dropped is None else int.from_bytes(raw_dropped, "big")

    def _log_drop(self, role: Role, partition: int, offset: int, reason: str) -> None:
        """The first drop of a partition is a warning with its reason; the rest are counted."""
        if (role, partition) in self._logged:
            log.debug("dropped %s[%d]@%d: %s", role, partition, offset, reason)
            return
        self._logged.add((role, partition))
        log.warning(
            "view dropped %s[%d]@%d: %s (further drops of this partition are only counted)",
            role, partition, offset, reason,
        )  # fmt: skip
