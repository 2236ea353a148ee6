"""Typed, cached access to one catalog's immutable objects.

``CatalogObjects`` decodes commits, index stripes and entities and keeps them in
the shared ``ObjectCache``. ``StagedObjects`` layers not-yet-written objects over
it, so the commit engine can build several commits in a row (group commit) and
read what the earlier ones produced before anything reaches the backend.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from metastore.engine.object_cache import ObjectCache
from metastore.errors import MetastoreError, NoSuchCommit
from metastore.model.codec import Codec
from metastore.model.index import Entry, IndexView
from metastore.model.keys import ObjKey
from metastore.model.objtypes import COMMIT, ENTITY, INDEX, METADATA_PIECE
from metastore.model.records import Commit, Entity, stripe_decode
from metastore.persistence.base import Persistence, StoredObject

T = TypeVar("T")


class MissingObject(MetastoreError):
    """A referenced object is absent: the store is damaged (audit will report it)."""


class Objects(Protocol):
    tenant: str
    catalog: str

    def key(self, type_name: str, obj_id: int) -> ObjKey: ...

    def commit(self, obj_id: int) -> Commit: ...

    def stripe(self, obj_id: int) -> Sequence[Entry]: ...

    def entity(self, obj_id: int) -> Entity: ...

    def index(self, commit: Commit | None) -> IndexView | None: ...

    def piece(self, obj_id: int) -> Any:
        """A metadata piece's JSON value, or None when it is not stored."""


def decode_piece(codec: Codec, data: bytes) -> Any:
    """A stored metadata piece's JSON value (its record also names its kind)."""
    return json.loads(codec.decode(METADATA_PIECE.schema, data)["json"])


class CatalogObjects:
    def __init__(
        self, persistence: Persistence, codec: Codec, cache: ObjectCache, tenant: str, catalog: str
    ) -> None:
        self._persistence = persistence
        self._codec = codec
        self._cache = cache
        self.tenant = tenant
        self.catalog = catalog

    def key(self, type_name: str, obj_id: int) -> ObjKey:
        return ObjKey(self.tenant, self.catalog, type_name, obj_id)

    def load(self, type_name: str, obj_id: int, decode: Callable[[bytes], T]) -> T | None:
        """An immutable object of this catalog, decoded by ``decode``, cached; None if absent."""
        value: T | None = self._load(type_name, obj_id, lambda s: decode(s.data))
        return value

    def _load(self, type_name: str, obj_id: int, decode: Any) -> Any:
        key = self.key(type_name, obj_id)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        (stored,) = self._persistence.get_objects([key])
        if stored is None:
            return None
        value = decode(stored)
        self._cache.put(key, value, len(stored.data))
        return value

    def commit(self, obj_id: int) -> Commit:
        if not 0 <= obj_id < 1 << 64:  # a forged ?at=, path or page token: no such key
            raise NoSuchCommit(f"no commit {obj_id} in catalog {self.catalog!r}")
        value: Commit | None = self._load(
            COMMIT.name, obj_id, lambda s: Commit.decode(self._codec, obj_id, s.data)
        )
        if value is None:
            raise NoSuchCommit(f"no commit {obj_id} in catalog {self.catalog!r}")
        return value

    def stripe(self, obj_id: int) -> Sequence[Entry]:
        value: Sequence[Entry] | None = self._load(
            INDEX.name, obj_id, lambda s: stripe_decode(self._codec, s.data)
        )
        if value is None:
            raise MissingObject(f"index stripe {obj_id} missing in catalog {self.catalog!r}")
        return value

    def entity(self, obj_id: int) -> Entity:
        value: Entity | None = self._load(
            ENTITY.name, obj_id, lambda s: Entity.decode(self._codec, s.data)
        )
        if value is None:
            raise MissingObject(f"entity object {obj_id} missing in catalog {self.catalog!r}")
        return value

    def index(self, commit: Commit | None) -> IndexView | None:
        if commit is None:
            return None
        return IndexView(commit.index, commit.stripes, self.stripe)

    def piece(self, obj_id: int) -> Any:
        return self.load(METADATA_PIECE.name, obj_id, lambda data: decode_piece(self._codec, data))

    def forget(self, deleted: Sequence[ObjKey]) -> None:
        """Drop deleted objects from the cache (a sweep's deletions)."""
        if deleted:
            self._cache.discard(deleted)

    def remember(self, written: Sequence[tuple[StoredObject, Any]]) -> None:
        """Warm the cache with objects just written (they are immutable)."""
        for stored, value in written:
            if value is not None:
                self._cache.put(stored.key, value, len(stored.data))


class StagedObjects:
    """Objects produced by commits not yet written, over a ``CatalogObjects``."""

    def __init__(self, base: Objects) -> None:
        self._base = base
        self.tenant = base.tenant
        self.catalog = base.catalog
        self._staged: dict[ObjKey, Any] = {}
        self.written: list[tuple[StoredObject, Any]] = []

    def stage(self, stored: StoredObject, value: Any) -> None:
        self._staged[stored.key] = value
        self.written.append((stored, value))

    def key(self, type_name: str, obj_id: int) -> ObjKey:
        return self._base.key(type_name, obj_id)

    def commit(self, obj_id: int) -> Commit:
        staged: Commit | None = self._staged.get(self.key(COMMIT.name, obj_id))
        return staged if staged is not None else self._base.commit(obj_id)

    def stripe(self, obj_id: int) -> Sequence[Entry]:
        staged: Sequence[Entry] | None = self._staged.get(self.key(INDEX.name, obj_id))
        return staged if staged is not None else self._base.stripe(obj_id)

    def entity(self, obj_id: int) -> Entity:
        staged: Entity | None = self._staged.get(self.key(ENTITY.name, obj_id))
        return staged if staged is not None else self._base.entity(obj_id)

    def index(self, commit: Commit | None) -> IndexView | None:
        if commit is None:
            return None
        return IndexView(commit.index, commit.stripes, self.stripe)

    def piece(self, obj_id: int) -> Any:
        key = self.key(METADATA_PIECE.name, obj_id)
        return self._staged[key] if key in self._staged else self._base.piece(obj_id)
