"""In-memory backend: the reference implementation of the persistence contract.

Used by unit tests and single-process runs. Refs are kept as codec-encoded bytes,
exactly as the RocksDB backend stores them, so both backends exercise the same
codec path and a schema problem shows up in the fast tests too. One lock covers
every check-and-apply, which is what makes ``write`` all-or-nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

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
from metastore.persistence.write_rules import (
    check_ref_update,
    check_updateable_key,
    deleted_keys,
    new_objects,
)


class MemoryPersistence:
    """``Persistence`` over three dicts keyed by encoded keys; nothing survives the process."""

    def __init__(self, codec: Codec | None = None) -> None:
        self._codec = codec if codec is not None else default_codec()
        self._lock = threading.Lock()
        self._objects: dict[bytes, StoredObject] = {}
        self._refs: dict[bytes, bytes] = {}  # encoded RefKey -> encode_ref bytes
        self._updateables: dict[bytes, UpdateableObject] = {}

    def get_objects(self, keys: Sequence[ObjKey]) -> list[StoredObject | None]:
        with self._lock:
            return [self._objects.get(key.encode()) for key in keys]

    def write(
        self,
        objects: Sequence[StoredObject],
        ref_update: RefUpdate | None = None,
        deletes: Sequence[ObjKey] = (),
    ) -> None:
        deleted = deleted_keys(deletes)
        with self._lock:
            # Validate everything before touching anything: that is the atomicity.
            # The ref first: a stale writer must see "conflict, retry", not a bug.
            if ref_update is not None:
                raw_key = ref_update.key.encode()
                check_ref_update(ref_update, self._head(ref_update.key, self._refs.get(raw_key)))
                new = ref_update.new
                new_value = None if new is None else encode_ref(self._codec, new)
            fresh = new_objects(objects, self._objects.get, deleted)
            for gone in deleted:
                self._objects.pop(gone, None)
            if ref_update is not None:
                if new_value is None:
                    self._refs.pop(raw_key, None)
                else:
                    self._refs[raw_key] = new_value
            self._objects.update(fresh)

    def write_each(self, writes: Sequence[Write]) -> list[MetastoreError | None]:
        """Each write on its own, in order (nothing here is durable, so nothing is shared)."""
        outcomes: list[MetastoreError | None] = []
        for write in writes:
            try:
                self.write(write.objects, write.ref_update, write.deletes)
            except (RefConditionFailed, ObjectConflict) as exc:
                outcomes.append(exc)
            else:
                outcomes.append(None)
        return outcomes

    def _head(self, key: RefKey, raw: bytes | None) -> int | None:
        return None if raw is None else decode_ref(self._codec, key, raw).head

    def get_ref(self, key: RefKey) -> Ref | None:
        with self._lock:
            raw = self._refs.get(key.encode())
        return None if raw is None else decode_ref(self._codec, key, raw)

    def scan_refs(self, tenant: str | None = None) -> Iterator[Ref]:
        prefix = b"" if tenant is None else tenant_prefix(tenant)
        with self._lock:  # snapshot, so callers may write while iterating
            items = sorted((k, v) for k, v in self._refs.items() if k.startswith(prefix))
        for raw_key, raw in items:
            yield decode_ref(self._codec, RefKey.decode(raw_key), raw)

    def scan_objects(self, tenant: str, catalog: str) -> Iterator[StoredObject]:
        prefix = catalog_prefix(tenant, catalog)
        with self._lock:
            keys = sorted(k for k in self._objects if k.startswith(prefix))
            snapshot = [self._objects[k] for k in keys]
        yield from snapshot

    def get_updateable(self, key: ObjKey) -> UpdateableObject | None:
        with self._lock:
            return self._updateables.get(key.encode())

    def cas_updateable(
        self, key: ObjKey, expected_token: str | None, new: UpdateableObject | None
    ) -> bool:
        check_updateable_key(key, new)
        raw_key = key.encode()
        with self._lock:
            current = self._updateables.get(raw_key)
            current_token = None if current is None else current.token
            if current_token != expected_token:
                return False
            if new is None:
                self._updateables.pop(raw_key, None)
            else:
                self._updateables[raw_key] = new
            return True

    def close(self) -> None:
        """Nothing to release; the data stays readable (tests inspect it after close)."""
