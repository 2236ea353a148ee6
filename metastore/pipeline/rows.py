"""Store rows, as every source produces them, read through the persistence contract.

A source yields ``(key, value)`` pairs in the store's layout
(``metastore.persistence.rocksdb_layout``). ``RowsPersistence`` serves one catalog's rows
(and its tenant's, where a job needs both) through the read side of ``Persistence``,
so a job decodes commits, index stripes, entities and Iceberg pieces with the
catalog's own code (``CatalogObjects``, ``IndexView``, ``pieces``) instead of
parsing bytes itself. Rows are a snapshot: nothing writes to them.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence

from metastore.errors import MetastoreError
from metastore.model.codec import Codec
from metastore.model.keys import SEP, ObjKey, RefKey, catalog_prefix, tenant_prefix
from metastore.persistence.base import Ref, RefUpdate, StoredObject, UpdateableObject, decode_ref
from metastore.persistence.rocksdb_layout import (
    DATA_PREFIXES,
    OBJ,
    REF,
    decode_object,
    decode_updateable,
    object_key,
    ref_key,
    updateable_key,
)

Row = tuple[bytes, bytes]
CatalogId = tuple[str, str]  # (tenant, catalog); catalog "" = the tenant's own records


class ReadOnlyRows(MetastoreError):
    """A job tried to write to a snapshot: a bug in the job."""


def catalog_of(key: bytes) -> CatalogId | None:
    """The catalog a data row belongs to; None for anything else (a view's offsets,
    barriers and markers, the format marker)."""
    if key[:1] not in DATA_PREFIXES:
        return None
    parts = key[1:].split(SEP, 2)
    if len(parts) < 3:
        return None
    return parts[0].decode(), parts[1].decode()


def by_catalog(rows: Iterable[Row]) -> dict[CatalogId, dict[bytes, bytes]]:
    """The data rows of ``rows`` grouped by catalog (the rest is dropped)."""
    groups: dict[CatalogId, dict[bytes, bytes]] = defaultdict(dict)
    for key, value in rows:
        found = catalog_of(key)
        if found is not None:
            groups[found][key] = value
    return dict(groups)


class RowsPersistence:
    """The read side of ``Persistence`` over rows held in memory (thread-safe: never
    changes). ``write`` and ``cas_updateable`` raise ``ReadOnlyRows``."""

    def __init__(self, rows: Mapping[bytes, bytes], codec: Codec) -> None:
        self._rows = rows
        self._sorted: list[bytes] | None = None
        self.codec = codec

    def get_objects(self, keys: Sequence[ObjKey]) -> list[StoredObject | None]:
        found = []
        for key in keys:
            raw = self._rows.get(object_key(key))
            found.append(None if raw is None else decode_object(key, raw))
        return found

    def has_object(self, key: ObjKey) -> bool:
        return object_key(key) in self._rows

    def get_ref(self, key: RefKey) -> Ref | None:
        raw = self._rows.get(ref_key(key))
        return None if raw is None else decode_ref(self.codec, key, raw)

    def scan_refs(self, tenant: str | None = None) -> Iterator[Ref]:
        prefix = REF + (b"" if tenant is None else tenant_prefix(tenant))
        for raw_key in self._keys(prefix):
            yield decode_ref(self.codec, RefKey.decode(raw_key[len(REF) :]), self._rows[raw_key])

    def scan_objects(self, tenant: str, catalog: str) -> Iterator[StoredObject]:
        for raw_key in self._keys(OBJ + catalog_prefix(tenant, catalog)):
            yield decode_object(ObjKey.decode(raw_key[len(OBJ) :]), self._rows[raw_key])

    def get_updateable(self, key: ObjKey) -> UpdateableObject | None:
        raw = self._rows.get(updateable_key(key))
        return None if raw is None else decode_updateable(key, raw)

    def write(
        self,
        objects: Sequence[StoredObject],
        ref_update: RefUpdate | None = None,
        deletes: Sequence[ObjKey] = (),
    ) -> None:
        raise ReadOnlyRows("a job's rows are a snapshot: nothing writes to them")

    def cas_updateable(
        self, key: ObjKey, expected_token: str | None, new: UpdateableObject | None
    ) -> bool:
        raise ReadOnlyRows("a job's rows are a snapshot: nothing writes to them")

    def close(self) -> None:
        return None

    def _keys(self, prefix: bytes) -> Iterator[bytes]:
        if self._sorted is None:
            self._sorted = sorted(self._rows)
        for raw_key in self._sorted[bisect.bisect_left(self._sorted, prefix) :]:
            if not raw_key.startswith(prefix):
                return
            yield raw_key
