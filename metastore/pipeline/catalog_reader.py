"""One catalog's rows, read with the catalog's own code.

``CatalogRows`` is what a job's task works on: the refs, commits, index and
entities of one catalog (or of a tenant's own records, catalog ""), decoded by
``CatalogObjects`` over ``RowsPersistence``, plus the Iceberg metadata of a table
or view assembled from its pieces exactly as the Iceberg API assembles it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from metastore.engine.object_cache import ObjectCache
from metastore.engine.objects import CatalogObjects, MissingObject
from metastore.errors import NoSuchCommit
from metastore.iceberg import pieces
from metastore.model.codec import Codec
from metastore.model.keys import MAIN_REF, EntityKey, Kind, ObjKey
from metastore.model.objtypes import METADATA_PIECE
from metastore.model.records import Commit, Entity
from metastore.persistence.base import Ref
from metastore.pipeline.rows import RowsPersistence
from metastore.storage.settings import STORAGE_RECORD, Storage

CACHE_BYTES = 32 * 1024 * 1024  # per task: decoded stripes and entities reused across commits


class CatalogRows:
    def __init__(self, tenant: str, catalog: str, rows: Mapping[bytes, bytes], codec: Codec):
        self.tenant = tenant
        self.catalog = catalog
        self.codec = codec
        self.persistence = RowsPersistence(rows, codec)
        self.objects = CatalogObjects(
            self.persistence, codec, ObjectCache(CACHE_BYTES), tenant, catalog
        )

    def refs(self) -> list[Ref]:
        return [r for r in self.persistence.scan_refs(self.tenant) if r.key.catalog == self.catalog]

    def main(self) -> Ref | None:
        return next((r for r in self.refs() if r.key.name == MAIN_REF), None)

    def exists(self, type_name: str, obj_id: int) -> bool:
        return self.persistence.has_object(ObjKey(self.tenant, self.catalog, type_name, obj_id))

    def commit(self, commit_id: int) -> Commit | None:
        try:
            return self.objects.commit(commit_id)
        except NoSuchCommit:
            return None

    def history(self, head: int) -> Iterator[Commit]:
        """The commits from ``head`` back to the root, newest first; stops at a missing one."""
        next_id = head
        while next_id:
            commit = self.commit(next_id)
            if commit is None:
                return
            yield commit
            next_id = commit.parent

    def live(self, commit: Commit, kind: Kind | None = None) -> Iterator[tuple[EntityKey, Entity]]:
        """The entities live at ``commit`` (of one ``kind``), in key order.

        Raises ``MissingObject`` where a stripe or an entity is missing (audit reports
        those one by one; export stops)."""
        view = self.objects.index(commit)
        assert view is not None
        for raw_key, (_, obj_id) in view.items():
            key = EntityKey.decode(raw_key)
            if kind is None or key.kind is kind:
                yield key, self.objects.entity(obj_id)

    def piece(self, obj_id: int) -> Any:
        """One Iceberg metadata piece, decoded (a ``pieces.Loader``)."""
        value = self.objects.load(
            METADATA_PIECE.name, obj_id, lambda data: pieces.decode_piece(self.codec, data)
        )
        if value is None:
            raise MissingObject(f"metadata piece {obj_id} missing in catalog {self.catalog!r}")
        return value

    def iceberg(self, entity: Entity) -> tuple[dict[str, Any], str | None] | None:
        """The Iceberg metadata (spec JSON) of a table or view and its metadata file's
        location; None for one created through the native API (it has none)."""
        if pieces.CORE not in entity.attachments:
            return None
        layout = pieces.TABLE_LAYOUT if entity.kind is Kind.TABLE else pieces.VIEW_LAYOUT
        return pieces.assemble(layout, entity.attachments, entity.properties, self.piece)

    def storage(self, commit: Commit) -> Storage | None:
        """The catalog's storage record at ``commit`` (None: not recorded)."""
        view = self.objects.index(commit)
        found = view.get(STORAGE_RECORD.encode()) if view is not None else None
        if found is None:
            return None
        entity = self.objects.entity(found[1])
        return Storage.from_properties(entity.properties, entity.version)
