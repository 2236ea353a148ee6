"""RocksDB backend (rocksdict, raw mode): one database, one-byte key prefixes.

Layout::

    b"o" + ObjKey.encode()  -> created_at_us (8 bytes, big-endian) + data
    b"r" + RefKey.encode()  -> encode_ref bytes
    b"u" + ObjKey.encode()  -> token length (1 byte) + token (utf-8) + data
    b"m" + b"format"        -> FORMAT

``write`` validates under a process lock and applies objects and the ref change
in one WriteBatch, so a commit is all or nothing even across a crash. The WAL
stays on: with ``sync=False`` a write survives the process being killed (the WAL
is in the OS page cache), only a machine crash can lose it; ``sync=True`` also
covers that. Scans read in short pages, each with its own iterator, because a
live rocksdict iterator keeps the database open and would make ``close`` lie.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, cast

from rocksdict import Options, Rdict, WriteBatch, WriteOptions

from metastore.codec import Codec, default_codec
from metastore.errors import MetastoreError
from metastore.keys import ObjKey, RefKey, catalog_prefix, tenant_prefix
from metastore.persistence.base import (
    Ref,
    RefUpdate,
    StoredObject,
    UpdateableObject,
    decode_ref,
    encode_ref,
)
from metastore.persistence.rules import check_ref_update, check_updateable_key, new_objects

OBJ = b"o"
REF = b"r"
UPD = b"u"
FORMAT_KEY = b"m" + b"format"
FORMAT = b"1"
PAGE = 256  # entries per scan page (one short-lived iterator each)


class StoreFormatError(MetastoreError):
    """The database was written in a layout this release cannot read."""


class RocksDBPersistence:
    """``Persistence`` over one local RocksDB; one instance per path per process."""

    def __init__(self, path: str | Path, *, sync: bool = True, codec: Codec | None = None) -> None:
        self._codec = codec if codec is not None else default_codec()
        self._path = str(path)
        self._lock = threading.Lock()
        self._write_opt = WriteOptions()
        self._write_opt.sync = sync
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        db = Rdict(self._path, options)
        try:
            _check_format(db, self._write_opt)
        except BaseException:
            db.close()  # release the LOCK file: a refused open must not block a fixed one
            raise
        self._db: Rdict | None = db

    def get_objects(self, keys: Sequence[ObjKey]) -> list[StoredObject | None]:
        raws = _multi_get(self._live(), [OBJ + key.encode() for key in keys])
        return [
            None if raw is None else _decode_obj(key, raw)
            for key, raw in zip(keys, raws, strict=True)
        ]

    def write(self, objects: Sequence[StoredObject], ref_update: RefUpdate | None = None) -> None:
        batch = WriteBatch(raw_mode=True)
        with self._lock:
            db = self._live()
            # Validate everything first, the ref before the objects (a stale writer
            # must see "conflict, retry", not a bug); then apply one batch.
            if ref_update is not None:
                raw_ref = REF + ref_update.key.encode()
                current = db.get(raw_ref)
                head = None if current is None else self._decode_ref(raw_ref, current).head
                check_ref_update(ref_update, head)
                if ref_update.new is None:
                    batch.delete(raw_ref)
                else:
                    batch.put(raw_ref, encode_ref(self._codec, ref_update.new))
            raw_keys = [obj.key.encode() for obj in objects]
            stored = dict(zip(raw_keys, _multi_get(db, [OBJ + k for k in raw_keys]), strict=True))

            def lookup(raw_key: bytes) -> StoredObject | None:
                raw = stored.get(raw_key)
                return None if raw is None else _decode_obj(ObjKey.decode(raw_key), raw)

            for raw_key, obj in new_objects(objects, lookup).items():
                batch.put(OBJ + raw_key, _encode_obj(obj))
            if not batch.is_empty():
                db.write(batch, self._write_opt)

    def get_ref(self, key: RefKey) -> Ref | None:
        raw_key = REF + key.encode()
        raw = self._live().get(raw_key)
        return None if raw is None else self._decode_ref(raw_key, raw)

    def scan_refs(self, tenant: str | None = None) -> Iterator[Ref]:
        prefix = REF + (b"" if tenant is None else tenant_prefix(tenant))
        for raw_key, raw in self._scan(prefix):
            yield self._decode_ref(raw_key, raw)

    def scan_objects(self, tenant: str, catalog: str) -> Iterator[StoredObject]:
        for raw_key, raw in self._scan(OBJ + catalog_prefix(tenant, catalog)):
            yield _decode_obj(ObjKey.decode(raw_key[1:]), raw)

    def get_updateable(self, key: ObjKey) -> UpdateableObject | None:
        raw = self._live().get(UPD + key.encode())
        return None if raw is None else _decode_updateable(key, raw)

    def cas_updateable(
        self, key: ObjKey, expected_token: str | None, new: UpdateableObject | None
    ) -> bool:
        check_updateable_key(key, new)
        raw_key = UPD + key.encode()
        value = None if new is None else _encode_updateable(new)
        with self._lock:
            db = self._live()
            current = db.get(raw_key)
            current_token = None if current is None else _decode_updateable(key, current).token
            if current_token != expected_token:
                return False
            batch = WriteBatch(raw_mode=True)
            if value is None:
                batch.delete(raw_key)
            else:
                batch.put(raw_key, value)
            db.write(batch, self._write_opt)
            return True

    def close(self) -> None:
        """Flush and release the database; a later instance on the same path reopens it."""
        with self._lock:
            db, self._db = self._db, None
            if db is not None:
                db.close()

    def _live(self) -> Rdict:
        db = self._db
        if db is None:
            raise RuntimeError(f"RocksDBPersistence({self._path!r}) is closed")
        return db

    def _decode_ref(self, raw_key: bytes, raw: bytes) -> Ref:
        return decode_ref(self._codec, RefKey.decode(raw_key[1:]), raw)

    def _scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Key/value pairs under ``prefix`` in key order, read a page at a time.

        Each page uses a fresh iterator that is gone before the page is yielded,
        so an abandoned scan never pins the database open.
        """
        start = prefix
        while True:
            page = _read_page(self._live(), start, prefix)
            yield from page
            if len(page) < PAGE:
                return
            start = page[-1][0] + b"\x00"  # the smallest key after the last one read


def _multi_get(db: Rdict, keys: list[bytes]) -> list[bytes | None]:
    if not keys:
        return []
    found = db.get(cast(Any, keys))  # the stub's list parameter is invariant
    return cast("list[bytes | None]", found)


def _read_page(
    db: Rdict, start: bytes, prefix: bytes, limit: int = PAGE
) -> list[tuple[bytes, bytes]]:
    it: Any = db.iter()
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


def _check_format(db: Rdict, write_opt: WriteOptions) -> None:
    found = db.get(FORMAT_KEY)
    if found is None:
        if _read_page(db, b"", b"", limit=1):
            raise StoreFormatError("database has data but no format marker: not a metastore store")
        batch = WriteBatch(raw_mode=True)
        batch.put(FORMAT_KEY, FORMAT)
        db.write(batch, write_opt)
    elif found != FORMAT:
        raise StoreFormatError(
            f"database format {found!r} is not {FORMAT!r}: written by another release"
        )


def _encode_obj(obj: StoredObject) -> bytes:
    return obj.created_at_us.to_bytes(8, "big") + obj.data


def _decode_obj(key: ObjKey, raw: bytes) -> StoredObject:
    return StoredObject(key, raw[8:], int.from_bytes(raw[:8], "big"))


def _encode_updateable(obj: UpdateableObject) -> bytes:
    token = obj.token.encode()
    if len(token) > 255:
        raise ValueError(f"updateable {obj.key}: token longer than 255 bytes")
    return bytes((len(token),)) + token + obj.data


def _decode_updateable(key: ObjKey, raw: bytes) -> UpdateableObject:
    end = 1 + raw[0]
    return UpdateableObject(key, raw[end:], raw[1:end].decode())
