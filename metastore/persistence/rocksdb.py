"""RocksDB backend (rocksdict, raw mode): one database, the keys of ``layout``.

Three pieces, each with one job: ``RocksDB`` is the open database (point reads,
paged range reads, one atomic batch of raw keys); ``RocksDBReader`` is the read
side of the ``Persistence`` contract over such a database (a cluster node's view
reads through it too); ``RocksDBPersistence`` adds the writes of an embedded
store.

``write`` validates under a process lock and applies objects and the ref change
in one WriteBatch, so a commit is all or nothing even across a crash. The WAL
stays on: with ``sync=False`` a write survives the process being killed (the WAL
is in the OS page cache), only a machine crash can lose it; ``sync=True`` also
covers that. Scans read in short pages, each with its own iterator, because a
live rocksdict iterator keeps the database open and would make ``close`` lie.

With ``sync=True`` a commit's batch is written unsynced and then waits for a
group sync of the WAL (``metastore.persistence.wal_sync``): batches of different
catalogs share one fsync, and no thread holds the interpreter lock while the disk
works. Until that sync returns, readers are shown the ref as it was on disk
before the write (``_hidden``), so nobody reads a HEAD that a machine crash could
still take back; only the write's own compare-and-swap sees it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from rocksdict import Checkpoint, Options, Rdict, WriteBatch, WriteOptions

from metastore.errors import MetastoreError, ObjectConflict, RefConditionFailed
from metastore.model.codec import Codec, default_codec
from metastore.model.keys import ObjKey, RefKey, catalog_prefix, tenant_prefix
from metastore.persistence.base import (
    Ref,
    RefUpdate,
    StoredObject,
    UpdateableObject,
    Write,
    decode_ref,
    encode_ref,
)
from metastore.persistence.rocksdb_layout import (
    FORMAT,
    FORMAT_KEY,
    OBJ,
    REF,
    decode_object,
    decode_updateable,
    encode_object,
    encode_updateable,
    object_key,
    ref_key,
    updateable_key,
    updateable_token,
)
from metastore.persistence.wal_sync import GroupSync
from metastore.persistence.write_rules import (
    check_ref_update,
    check_updateable_key,
    deleted_keys,
    new_objects,
)
from metastore.util.memory_only import check as may_wait

PAGE = 256  # entries per scan page (one short-lived iterator each)
REMEMBERED_KEYS = 100_000  # values ``get_remembered`` keeps (refs); all dropped past it
DECODED_REFS = 100_000  # refs kept decoded (a few hundred bytes each); all dropped past it


@dataclass
class _Batch:
    """What ``write_each`` has accepted so far: the raw writes, in order, and the refs
    they change with each one's value in the database before the batch."""

    writes: dict[bytes, bytes | None] = field(default_factory=dict)
    refs: dict[bytes, bytes | None] = field(default_factory=dict)
    accepted: int = 0


class StoreFormatError(MetastoreError):
    """The database was written in a layout this release cannot read."""


class StoreLocked(MetastoreError):
    """Another process has the database open (RocksDB's ``LOCK`` file is held)."""


class StoreUnreadable(MetastoreError):
    """RocksDB refused to open the directory: not a database, or a damaged one."""


def _open_error(path: str, exc: Exception) -> MetastoreError:
    """rocksdict's bare ``Exception`` (RocksDB's status text) as one of our outcomes."""
    status = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if "lock file" in status.lower() or "/LOCK" in status:
        return StoreLocked(f"RocksDB: {status}")
    return StoreUnreadable(f"RocksDB: {status}")


class RocksDB:
    """One open RocksDB in raw mode: keys and bytes, no objects or refs.

    Opening checks (or, on an empty database, writes) the format marker, so a
    database of another layout is refused before anything reads it.
    """

    def __init__(self, path: str | Path, *, sync: bool) -> None:
        self.path = str(path)
        self.sync = sync
        self._write_opt = WriteOptions()
        self._write_opt.sync = sync
        self._unsynced_opt = WriteOptions()
        self._unsynced_opt.sync = False
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        try:
            db = Rdict(self.path, options)
        except Exception as exc:  # rocksdict raises a bare Exception with RocksDB's status
            raise _open_error(self.path, exc) from None
        self._db: Rdict | None = db
        # what ``get_remembered`` read, forgotten by every write of the key through this
        # handle; ``_generation`` counts the writes' start and end (see ``_forget``)
        self._remembered: dict[bytes, bytes | None] = {}
        self._remembered_lock = threading.Lock()
        self._generation = 0
        try:
            self._check_format()
        except BaseException:
            self.close()  # release the LOCK file: a refused open must not block a fixed one
            raise

    def get(self, key: bytes) -> bytes | None:
        found: bytes | None = self._live().get(key)
        return found

    def get_remembered(self, key: bytes) -> bytes | None:
        """``get`` of a key read on every request (a ref), from memory once read.

        Every write goes through ``write`` or ``write_unsynced`` of this handle (one
        process holds the database), and each forgets the keys it writes twice: before
        RocksDB takes it and after (when it remembers again the keys that were
        remembered, with the values it wrote). A value read from the database is
        remembered only if no write started or ended while it was read, so what is
        remembered after a write's end was read or written by that write or after it,
        and what a reader remembered during a write is forgotten at its end. A read
        during a write may return the value before it, as a read that came a moment
        earlier would.
        """
        with self._remembered_lock:
            if key in self._remembered:
                return self._remembered[key]
            generation = self._generation
        found: bytes | None = self._live().get(key)
        with self._remembered_lock:
            if self._generation == generation:
                if len(self._remembered) >= REMEMBERED_KEYS:
                    self._remembered.clear()
                self._remembered[key] = found
        return found

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        if not keys:
            return []
        found = self._live().get(cast(Any, list(keys)))  # the stub's list parameter is invariant
        return cast("list[bytes | None]", found)

    def page(self, start: bytes, prefix: bytes, limit: int = PAGE) -> list[tuple[bytes, bytes]]:
        """Up to ``limit`` pairs from ``start`` on whose key starts with ``prefix``."""
        it: Any = self._live().iter()
        try:
            it.seek(start)
            page: list[tuple[bytes, bytes]] = []
            while len(page) < limit and it.valid():
                key: bytes = it.key()
                if not key.startswith(prefix):
                    break
                page.append((key, it.value()))
                it.next()
            return page
        finally:
            del it

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Key/value pairs under ``prefix`` in key order, read a page at a time.

        Each page uses a fresh iterator that is gone before the page is yielded,
        so an abandoned scan never pins the database open.
        """
        start = prefix
        while True:
            page = self.page(start, prefix)
            yield from page
            if len(page) < PAGE:
                return
            start = page[-1][0] + b"\x00"  # the smallest key after the last one read

    def write(self, writes: Mapping[bytes, bytes | None]) -> None:
        """Put (or, for None, delete) every key in one WriteBatch: all or nothing."""
        self._write(writes, self._write_opt)

    def write_unsynced(self, writes: Mapping[bytes, bytes | None]) -> None:
        """``write`` without waiting for the disk: durable only after ``sync_wal``."""
        self._write(writes, self._unsynced_opt)

    def _write(self, writes: Mapping[bytes, bytes | None], options: WriteOptions) -> None:
        """Every write of this handle: what ``get_remembered`` holds of its keys is
        forgotten before RocksDB takes the batch and again after; then a key that was
        remembered before is remembered with the value just written (a ref read on every
        request stays in memory through the commits that move it). That value is the
        database's: the handle's writers never write one key at once (the persistence's
        lock, the view's one apply), and a read under way meanwhile remembers nothing."""
        if writes:
            kept = self._forget(writes)
            written = False
            try:
                self._live().write(_batch(writes), options)
                written = True
            finally:
                self._forget(writes, {key: writes[key] for key in kept} if written else None)

    def _forget(
        self,
        writes: Mapping[bytes, bytes | None],
        then: Mapping[bytes, bytes | None] | None = None,
    ) -> list[bytes]:
        """Drop what ``get_remembered`` holds of ``writes``' keys, count a write's start or
        end (reads under way then remember nothing) and remember ``then``; return the
        keys that were remembered."""
        with self._remembered_lock:
            self._generation += 1
            remembered = self._remembered
            dropped: list[bytes] = []
            if remembered:
                if len(writes) <= len(remembered):
                    dropped = [key for key in writes if key in remembered]
                else:
                    dropped = [key for key in remembered if key in writes]
                for key in dropped:
                    del remembered[key]
            if then:
                remembered.update(then)
            return dropped

    def sync_wal(self) -> None:
        """fsync the WAL: every write made before this call is on disk when it returns
        (rocksdict releases the interpreter lock meanwhile)."""
        self._live().flush_wal(True)

    @contextmanager
    def snapshot(self) -> Iterator[Snapshot]:
        """A consistent point-in-time reader, released when the block ends."""
        snapshot = Snapshot(self._live().snapshot())
        try:
            yield snapshot
        finally:
            snapshot.release()

    def checkpoint(self, path: str | Path) -> None:
        """A consistent copy of the whole database in the new directory ``path``, taken
        while writes go on (hard links to the immutable SST files plus the flushed
        memtable, so it is cheap). Jobs read it opened read-only, never this database.
        The WAL is synced first, so the copy holds no batch still waiting for its sync."""
        self.sync_wal()
        Checkpoint(self._live()).create_checkpoint(str(path))

    def close(self) -> None:
        """Flush and release the database; a later handle on the same path reopens it."""
        db, self._db = self._db, None
        with self._remembered_lock:
            self._remembered.clear()
            self._generation += 1
        if db is not None:
            db.close()

    def _live(self) -> Rdict:
        may_wait()  # every read and write reaches the database here: never from memory
        db = self._db
        if db is None:
            raise RuntimeError(f"RocksDB({self.path!r}) is closed")
        return db

    def _check_format(self) -> None:
        found = self.get(FORMAT_KEY)
        if found is None:
            if self.page(b"", b"", limit=1):
                raise StoreFormatError(
                    "database has data but no format marker: not a metastore store"
                )
            self.write({FORMAT_KEY: FORMAT})
        elif found != FORMAT:
            raise StoreFormatError(
                f"database format {found!r} is not {FORMAT!r}: written by another release"
            )


def _batch(writes: Mapping[bytes, bytes | None]) -> WriteBatch:
    batch = WriteBatch(raw_mode=True)
    for key, value in writes.items():
        if value is None:
            batch.delete(key)
        else:
            batch.put(key, value)
    return batch


class Snapshot:
    """One RocksDB snapshot: every read sees the database as it was when taken."""

    def __init__(self, snapshot: Any) -> None:
        self._snapshot: Any = snapshot

    def items(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Every pair under ``prefix``, in key order."""
        it: Any = self._snapshot.iter()
        try:
            it.seek(prefix)
            while it.valid():
                key: bytes = it.key()
                if not key.startswith(prefix):
                    return
                value: bytes = it.value()
                yield key, value
                it.next()
        finally:
            del it

    def release(self) -> None:
        self._snapshot = None


class RocksDBReader:
    """The read side of ``Persistence`` over an open ``RocksDB`` (thread-safe).

    Refs are read on every request (the catalog's HEAD, the tenant's, a caller's
    principal records), and decoding one costs more than reading it; ``_refs`` keeps
    each ref's last bytes with their decoded value, so an unchanged ref is one read
    and one byte comparison.
    """

    def __init__(self, db: RocksDB, codec: Codec) -> None:
        self.db = db
        self.codec = codec
        self._refs: dict[RefKey, tuple[bytes, Ref]] = {}

    def decode_ref(self, key: RefKey, raw: bytes) -> Ref:
        known = self._refs.get(key)
        if known is not None and known[0] == raw:
            return known[1]
        ref = decode_ref(self.codec, key, raw)
        self.remember_ref(key, raw, ref)
        return ref

    def remember_ref(self, key: RefKey, raw: bytes, ref: Ref) -> None:
        """``raw`` is ``key``'s ref ``ref`` (decoded or just encoded): a later read of
        these very bytes needs no decoding; other bytes are decoded as ever."""
        if len(self._refs) >= DECODED_REFS:
            self._refs.clear()
        self._refs[key] = (raw, ref)

    def get_objects(self, keys: Sequence[ObjKey]) -> list[StoredObject | None]:
        raws = self.db.get_many([object_key(key) for key in keys])
        return [
            None if raw is None else decode_object(key, raw)
            for key, raw in zip(keys, raws, strict=True)
        ]

    def get_ref(self, key: RefKey) -> Ref | None:
        raw = self.db.get_remembered(ref_key(key))
        return None if raw is None else self.decode_ref(key, raw)

    def scan_refs(self, tenant: str | None = None) -> Iterator[Ref]:
        prefix = REF + (b"" if tenant is None else tenant_prefix(tenant))
        for raw_key, raw in self.db.scan(prefix):
            yield decode_ref(self.codec, RefKey.decode(raw_key[len(REF) :]), raw)

    def scan_objects(self, tenant: str, catalog: str) -> Iterator[StoredObject]:
        for raw_key, raw in self.db.scan(OBJ + catalog_prefix(tenant, catalog)):
            yield decode_object(ObjKey.decode(raw_key[len(OBJ) :]), raw)

    def get_updateable(self, key: ObjKey) -> UpdateableObject | None:
        raw = self.db.get(updateable_key(key))
        return None if raw is None else decode_updateable(key, raw)


class RocksDBPersistence(RocksDBReader):
    """``Persistence`` over one local RocksDB; one instance per path per process."""

    def __init__(self, path: str | Path, *, sync: bool = True, codec: Codec | None = None) -> None:
        super().__init__(RocksDB(path, sync=sync), codec if codec is not None else default_codec())
        self._lock = threading.Lock()
        self._group = GroupSync(lambda: self.db.sync_wal()) if sync else None
        # refs written but not yet synced: raw key -> (the value on disk, the write's ticket;
        # 0 while RocksDB takes the write). Readers get the value on disk.
        self._hidden: dict[bytes, tuple[bytes | None, int]] = {}

    @property
    def syncs(self) -> int:
        """WAL fsyncs made for commits so far (each covers one or more writes)."""
        return self._group.syncs if self._group is not None else 0

    def get_ref(self, key: RefKey) -> Ref | None:
        raw_key = ref_key(key)
        raw = self.db.get_remembered(raw_key)
        # read after the database: a write hides its ref before RocksDB takes it, so a
        # value read from a write not yet synced is always replaced here
        hidden = self._hidden.get(raw_key)
        if hidden is not None:
            raw = hidden[0]
        return None if raw is None else self.decode_ref(key, raw)

    def scan_refs(self, tenant: str | None = None) -> Iterator[Ref]:
        if self._group is None:
            yield from super().scan_refs(tenant)
            return
        prefix = REF + (b"" if tenant is None else tenant_prefix(tenant))
        start = prefix
        while True:
            page = self.db.page(start, prefix)
            last = len(page) < PAGE
            hidden = dict(self._hidden)  # after the page: see ``get_ref``
            found: dict[bytes, bytes | None] = dict(page)
            for raw_key, (on_disk, _) in hidden.items():
                inside = raw_key.startswith(prefix) and raw_key >= start
                if inside and (last or raw_key <= page[-1][0]):
                    found[raw_key] = on_disk
            for raw_key in sorted(found):
                raw = found[raw_key]
                if raw is not None:
                    yield decode_ref(self.codec, RefKey.decode(raw_key[len(REF) :]), raw)
            if last:
                return
            start = page[-1][0] + b"\x00"

    def write(
        self,
        objects: Sequence[StoredObject],
        ref_update: RefUpdate | None = None,
        deletes: Sequence[ObjKey] = (),
    ) -> None:
        (refused,) = self.write_each([Write(objects, ref_update, deletes)])
        if refused is not None:
            raise refused

    def write_each(self, writes: Sequence[Write]) -> list[MetastoreError | None]:
        """Every write validated in turn under the lock (against the database and the
        writes before it in ``writes``), the accepted ones applied in one WriteBatch
        and covered by one group sync."""
        batch: _Batch = _Batch()
        outcomes: list[MetastoreError | None] = []
        with self._lock:
            for write in writes:
                try:
                    self._add(batch, write)
                except (RefConditionFailed, ObjectConflict) as exc:
                    outcomes.append(exc)
                else:
                    outcomes.append(None)
            if not batch.accepted:
                return outcomes
            if self._group is None:
                self.db.write(batch.writes)
                return outcomes
            ticket = self._write_hidden(batch.writes, batch.refs)
        try:
            self._group.wait(ticket)
        finally:
            if batch.refs:
                with self._lock:
                    for raw_ref in batch.refs:
                        hidden = self._hidden.get(raw_ref)
                        if hidden is not None and hidden[1] == ticket:
                            del self._hidden[raw_ref]  # synced (or failed: outcome unknown)
        return outcomes

    def _add(self, batch: _Batch, write: Write) -> None:
        """Validate ``write`` against the database and ``batch`` and add it to the batch;
        raise (adding nothing) if it is refused. Under the lock.

        The ref is checked before the objects (a stale writer must see "conflict,
        retry", not a bug); the deletions go in before the objects, so an object this
        write also stores overrides them."""
        writes: dict[bytes, bytes | None] = {}
        remember: tuple[RefKey, bytes, Ref] | None = None
        raw_ref: bytes | None = None
        update = write.ref_update
        if update is not None:
            raw_ref = ref_key(update.key)
            # synced or not: the swap is against it (or against an earlier write of the batch)
            current = batch.writes[raw_ref] if raw_ref in batch.writes else self.db.get(raw_ref)
            head = None if current is None else self.decode_ref(update.key, current)
            check_ref_update(update, None if head is None else head.head)
            new_raw = None if update.new is None else encode_ref(self.codec, update.new)
            writes[raw_ref] = new_raw
            if update.new is not None and new_raw is not None:
                remember = (update.key, new_raw, update.new)
        deleted = deleted_keys(write.deletes)
        raw_keys = [obj.key.encode() for obj in write.objects]
        unseen = [k for k in raw_keys if OBJ + k not in batch.writes]
        stored = dict(zip(unseen, self.db.get_many([OBJ + k for k in unseen]), strict=True))

        def lookup(raw_key: bytes) -> StoredObject | None:
            full = OBJ + raw_key
            raw = batch.writes[full] if full in batch.writes else stored.get(raw_key)
            return None if raw is None else decode_object(ObjKey.decode(raw_key), raw)

        fresh = new_objects(write.objects, lookup, deleted)
        for raw_key in deleted:
            writes[OBJ + raw_key] = None
        for raw_key, obj in fresh.items():
            writes[OBJ + raw_key] = encode_object(obj)
        if raw_ref is not None and raw_ref not in batch.refs:
            batch.refs[raw_ref] = self.db.get(raw_ref)  # its value before this batch
        batch.writes.update(writes)
        batch.accepted += 1
        if remember is not None:
            # the writer's next batch reads these bytes back (once synced)
            self.remember_ref(*remember)

    def _write_hidden(
        self, writes: dict[bytes, bytes | None], refs: Mapping[bytes, bytes | None]
    ) -> int:
        """The unsynced write, its refs hidden from readers until the sync (under the
        lock; ``refs``: each ref's value in the database, read under it)."""
        assert self._group is not None
        before = {raw_ref: self._hidden.get(raw_ref) for raw_ref in refs}
        on_disk = {
            raw_ref: (hidden[0] if hidden is not None else refs[raw_ref])
            for raw_ref, hidden in before.items()
        }
        for raw_ref, value in on_disk.items():
            self._hidden[raw_ref] = (value, 0)
        try:
            self.db.write_unsynced(writes)
        except BaseException:
            for raw_ref, hidden in before.items():
                if hidden is None:
                    del self._hidden[raw_ref]
                else:
                    self._hidden[raw_ref] = hidden
            raise
        ticket = self._group.written()
        for raw_ref, value in on_disk.items():
            self._hidden[raw_ref] = (value, ticket)
        return ticket

    def cas_updateable(
        self, key: ObjKey, expected_token: str | None, new: UpdateableObject | None
    ) -> bool:
        check_updateable_key(key, new)
        raw_key = updateable_key(key)
        value = None if new is None else encode_updateable(new)
        with self._lock:
            current = self.db.get(raw_key)
            if (None if current is None else updateable_token(current)) != expected_token:
                return False
            self.db.write({raw_key: value})
            return True

    def close(self) -> None:
        """Flush and release the database; a later instance on the same path reopens it."""
        with self._lock:
            self.db.close()
