"""The materialized view every node keeps: the changelog topics applied to one RocksDB.

The catalog data uses the layout of an embedded store (``persistence.layout``) and
is read through the same ``RocksDBReader``, so the catalog logic reads a view like
any store. ``write`` and ``cas_updateable`` raise: in cluster mode only a partition
owner writes, and it writes to Kafka. The view's own bookkeeping (offsets,
barriers, epoch floors, the drop count) lives next to the data, in the same
database, and in memory as one ``ViewState``.

``apply`` asks the apply rules (``rules.apply_records``, a pure function) what a
consumed batch changes, writes those changes and the new offsets in one
WriteBatch, so a crash never leaves data and offsets apart, and only then
publishes the new state to readers.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path

from metastore.cluster.changelog_records import Barrier, Role
from metastore.cluster.cluster_config import ClusterConfig
from metastore.cluster.view.apply_rules import ApplyContext, Drop, apply_records
from metastore.cluster.view.view_model import ApplyResult, Message, ReadOnlyView, ViewError
from metastore.cluster.view.view_state import PartitionBarrier, ViewState, decode_state
from metastore.model.codec import Codec, default_codec
from metastore.model.keys import ObjKey, RefKey
from metastore.persistence.base import Ref, RefUpdate, StoredObject, UpdateableObject
from metastore.persistence.rocksdb import RocksDB, RocksDBReader, Snapshot, StoreFormatError
from metastore.persistence.rocksdb_layout import (
    DATA_PREFIXES,
    DROPPED,
    EPOCH_FLOOR,
    OBJ,
    OBJECTS_BARRIER,
    OFFSETS,
    REFS_BARRIER,
    VIEW_MARKER,
    view_marker,
)

log = logging.getLogger(__name__)

RECENT_DROPS = 4096  # per partition and topic: enough for an owner to check its own writes


class ViewStore:
    """One node's view of ``<prefix>.refs`` and ``<prefix>.objects``; ``apply`` is its writer."""

    def __init__(
        self,
        path: str | Path,
        config: ClusterConfig,
        *,
        codec: Codec | None = None,
        sync: bool = False,  # the log is the source of truth: a lost tail is re-read
    ) -> None:
        self.config = config
        self.context = ApplyContext.of(config, codec if codec is not None else default_codec())
        self._db = RocksDB(path, sync=sync)
        self._reader = RocksDBReader(self._db, self.context.codec)
        self._lock = threading.Lock()  # guards the published state and the drop records
        self._apply_lock = threading.Lock()  # one apply at a time
        self._recent_drops: dict[tuple[Role, int], deque[int]] = {}  # in memory only
        self._logged: set[tuple[Role, int]] = set()
        # told the objects each applied batch deleted (the node's object cache listens)
        self.on_deleted: Callable[[list[ObjKey]], None] | None = None
        try:
            self._state = self._load()
        except BaseException:
            self._db.close()
            raise

    # --- the read side of Persistence ----------------------------------------------------

    def get_objects(self, keys: Sequence[ObjKey]) -> list[StoredObject | None]:
        return self._reader.get_objects(keys)

    def get_ref(self, key: RefKey) -> Ref | None:
        return self._reader.get_ref(key)

    def scan_refs(self, tenant: str | None = None) -> Iterator[Ref]:
        return self._reader.scan_refs(tenant)

    def scan_objects(self, tenant: str, catalog: str) -> Iterator[StoredObject]:
        return self._reader.scan_objects(tenant, catalog)

    def get_updateable(self, key: ObjKey) -> UpdateableObject | None:
        return self._reader.get_updateable(key)

    def write(
        self,
        objects: Sequence[StoredObject],
        ref_update: RefUpdate | None = None,
        deletes: Sequence[ObjKey] = (),
    ) -> None:
        raise ReadOnlyView("a view is read-only: writes go through the partition owner")

    def cas_updateable(
        self, key: ObjKey, expected_token: str | None, new: UpdateableObject | None
    ) -> bool:
        raise ReadOnlyView("a view is read-only: writes go through the partition owner")

    def close(self) -> None:
        """Flush and release the database; a later instance on the same path reopens it."""
        with self._apply_lock:
            self._db.close()

    # --- the view's own state -------------------------------------------------------------

    @property
    def state(self) -> ViewState:
        """The state as of the last applied batch (an immutable value)."""
        with self._lock:
            return self._state

    def offset(self, role: Role, partition: int) -> int:
        """The next offset to read; every record below it is applied (or dropped)."""
        return self.state.offset(role, partition)

    def offsets(self) -> dict[tuple[Role, int], int]:
        return dict(self.state.offsets)

    def epoch(self, partition: int) -> int:
        """Offset of the latest barrier in refs[p]; -1 before the first owner."""
        return self.state.epoch(partition)

    def barrier(self, partition: int, role: Role = "refs") -> PartitionBarrier | None:
        return self.state.barrier(partition, role)

    def barrier_seen(self, partition: int, nonce: str) -> tuple[int, int] | None:
        """(epoch, objects barrier offset) once the latest barrier in BOTH topics has
        ``nonce``: the owner that wrote it is caught up. None otherwise."""
        return self.state.barrier_seen(partition, nonce)

    def routes(self) -> dict[int, Barrier]:
        """Owner announcement per partition, from the latest refs barriers."""
        return self.state.routes()

    @property
    def dropped(self) -> int:
        return self.state.dropped

    def waiting(self) -> dict[int, int]:
        """Refs records held per partition until objects[p] catches up."""
        return self.state.waiting()

    def refs_read(self, partition: int) -> int:
        """The next refs[p] offset the view needs: after those it holds, else the stored one."""
        return self.state.refs_read(partition)

    def dropped_among(self, role: Role, partition: int, offsets: Sequence[int]) -> list[int]:
        """Which of ``offsets`` (recently applied) this view dropped instead of applying.

        An owner checks its own records with this before acknowledging: a record a
        newer owner's barrier made stale is in the log but changes nothing."""
        with self._lock:
            recent = set(self._recent_drops.get((role, partition), ()))
        return [o for o in offsets if o in recent]

    @property
    def db(self) -> RocksDB:
        """The database the view is kept in (for consistent copies: ``snapshot``,
        ``checkpoint``). The view's data changes only through ``apply``."""
        return self._db

    def snapshot(self) -> AbstractContextManager[Snapshot]:
        """A consistent reader of the whole database (``digest`` uses it)."""
        return self._db.snapshot()

    # --- the writer ----------------------------------------------------------------------

    def apply(self, batch: Sequence[Message]) -> ApplyResult:
        """Apply consumed records in order, offsets in the same WriteBatch; then publish."""
        with self._apply_lock:
            applied = apply_records(self.state, batch, self._db.get, self.context)
            self._db.write(applied.writes)
            listener = self.on_deleted
            if listener is not None:
                deleted = [
                    ObjKey.decode(key[1:])
                    for key, value in applied.writes.items()
                    if value is None and key[:1] == OBJ
                ]
                if deleted:
                    listener(deleted)
            with self._lock:
                self._state = applied.state
                for drop in applied.drops:
                    self._recent_drops.setdefault(
                        (drop.role, drop.partition), deque(maxlen=RECENT_DROPS)
                    ).append(drop.offset)
            for drop in applied.drops:
                self._log_drop(drop)
            return ApplyResult(applied.consumed, applied.applied, applied.dropped, applied.waiting)

    def _load(self) -> ViewState:
        wanted = view_marker(self.config.prefix, self.config.partitions)
        marker = self._db.get(VIEW_MARKER)
        if marker is None:
            if any(k[:1] in DATA_PREFIXES for k, _ in self._db.page(b"", b"", limit=8)):
                raise StoreFormatError("this database holds data but is not a view")
            self._db.write({VIEW_MARKER: wanted})
        elif marker != wanted:
            raise ViewError(f"this view is of {marker.decode()}, not {wanted.decode()}")
        entries = [
            entry
            for prefix in (OFFSETS, REFS_BARRIER, OBJECTS_BARRIER, EPOCH_FLOOR, DROPPED)
            for entry in self._db.scan(prefix)
        ]
        return decode_state(entries, self.context.records.decode_barrier)

    def _log_drop(self, drop: Drop) -> None:
        """The first drop of a partition is a warning with its reason; the rest are counted."""
        where = (drop.role, drop.partition)
        if where in self._logged:
            log.debug("dropped %s[%d]@%d: %s", drop.role, drop.partition, drop.offset, drop.reason)
            return
        self._logged.add(where)
        log.warning(
            "view dropped %s[%d]@%d: %s (further drops of this partition are only counted)",
            drop.role, drop.partition, drop.offset, drop.reason,
        )  # fmt: skip
