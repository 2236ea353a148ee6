"""Iceberg views over the commit engine: create, load, replace.

A view's metadata is stored as pieces, like a table's (``pieces.py``); its
updates are tagged models applied by a pure reducer (``view_updates.py``). A
replace is optimistic like a table commit: read the view, check the client's
requirements, apply its updates, write the new metadata.json, then commit with
``AssertEntityId`` + ``AssertVersion``; if another commit moved the view in
between, the whole request is redone on the fresh state (``REBASES``). Reading
the store, building metadata and file I/O run in a worker thread, never on the
event loop; only the commit itself is awaited there.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field
from pyiceberg.schema import Schema
from pyiceberg.typedef import IcebergBaseModel
from pyiceberg.view.metadata import ViewMetadata, ViewVersion

from metastore.catalog.service import Metastore
from metastore.engine.commits import CommitRequest, NewObject
from metastore.errors import CommitConflict, CommitStateUnknown, MetastoreError, NoSuchView
from metastore.iceberg import pieces
from metastore.iceberg.files import TableFiles, Warehouse
from metastore.iceberg.table_paths import check_properties
from metastore.iceberg.table_state import REBASES, iceberg_errors
from metastore.iceberg.tables import Tables
from metastore.iceberg.view_updates import Json, ViewUpdate, apply_view_updates
from metastore.model.changes import Change, CreateEntity, UpdateEntity
from metastore.model.codec import Codec
from metastore.model.keys import EntityKey
from metastore.model.records import Entity
from metastore.model.requirements import AssertEntityId, AssertVersion, Requirement
from metastore.util.clock import Clock, SystemClock

Record = Callable[[str], Sequence[Change]]  # metadata location -> extra changes (idempotency)


class AssertViewUUID(IcebergBaseModel):
    type: Literal["assert-view-uuid"]
    uuid: str

    def validate_view(self, metadata: Mapping[str, Any]) -> None:
        if metadata["view-uuid"] != self.uuid:
            raise CommitConflict(
                f"requirement failed: view uuid {metadata['view-uuid']} is not {self.uuid}"
            )


class CommitViewRequest(IcebergBaseModel):
    identifier: Any = None
    requirements: list[AssertViewUUID] = Field(default_factory=list)
    updates: list[ViewUpdate]


class CreateViewRequest(IcebergBaseModel):
    name: str
    location: str | None = None
    view_schema: Schema = Field(alias="schema")
    view_version: ViewVersion = Field(alias="view-version")
    properties: dict[str, str]


@dataclass(frozen=True, slots=True)
class _Staged:
    """A view change ready to commit: its metadata file is written, its pieces split."""

    requirements: tuple[Requirement, ...]
    change: Change
    objects: tuple[NewObject, ...]
    files: TableFiles
    location: str  # the new metadata.json (deleted if the commit surely failed)
    metadata: Json
    operation: str


# --- the service ------------------------------------------------------------------------


class Views:
    def __init__(
        self,
        metastore: Metastore,
        codec: Codec,
        warehouse: Warehouse,
        tables: Tables,
        clock: Clock | None = None,
    ) -> None:
        self._metastore = metastore
        self._codec = codec
        self._warehouse = warehouse
        self._tables = tables
        self._clock = clock or SystemClock()  # the time a replace records in the version log

    def state_of(self, tenant: str, catalog: str, entity: Entity) -> tuple[Json, str | None]:
        """The view's metadata and its metadata location (blocking: reads pieces)."""
        if pieces.CORE not in entity.attachments:
            raise NoSuchView(f"view {entity.key.display()} has no Iceberg metadata")
        return pieces.assemble(
            pieces.VIEW_LAYOUT,
            entity.attachments,
            entity.properties,
            self._tables.loader(tenant, catalog),
        )

    def load(self, tenant: str, catalog: str, key: EntityKey) -> Json:
        """The view's load result (blocking: reads the store)."""
        metadata, location = self.state_of(
            tenant, catalog, self._metastore.get_entity(tenant, catalog, key)
        )
        return {"metadata-location": location, "metadata": metadata, "config": {}}

    async def create(
        self,
        tenant: str,
        catalog: str,
        key: EntityKey,
        body: CreateViewRequest,
        principal: str,
        extra: Record = lambda _: (),
    ) -> Json:
        staged = await asyncio.to_thread(self._stage_create, tenant, catalog, key, body)
        return await self._commit(tenant, catalog, staged, principal, extra)

    async def replace(
        self,
        tenant: str,
        catalog: str,
        key: EntityKey,
        body: CommitViewRequest,
        principal: str,
        extra: Record = lambda _: (),
    ) -> Json:
        attempts = REBASES.start()
        while True:
            now_ms = self._clock.now_us() // 1000
            staged = await asyncio.to_thread(
                self._stage_replace, tenant, catalog, key, body, now_ms
            )
            try:
                return await self._commit(tenant, catalog, staged, principal, extra)
            except CommitConflict:  # another commit moved the view: redo on the fresh state
                if not await attempts.abackoff():
                    raise

    def _stage_create(
        self, tenant: str, catalog: str, key: EntityKey, body: CreateViewRequest
    ) -> _Staged:
        self._metastore.get_entity(tenant, catalog, EntityKey.namespace_key(key.namespace))
        location = self._location(tenant, catalog, key, body.location, body.properties)
        schema = {**_dump(body.view_schema), "schema-id": 0}
        version = {**_dump(body.view_version), "schema-id": 0, "version-id": 1}
        metadata: Json = {
            "view-uuid": str(uuid.uuid4()),
            "format-version": 1,
            "location": location,
            "current-version-id": 1,
            "versions": [version],
            "version-log": [{"timestamp-ms": version["timestamp-ms"], "version-id": 1}],
            "schemas": [schema],
            "properties": dict(body.properties),
        }
        with iceberg_errors():
            ViewMetadata.model_validate(metadata)
        return self._stage(tenant, catalog, key, None, None, None, metadata)

    def _stage_replace(
        self, tenant: str, catalog: str, key: EntityKey, body: CommitViewRequest, now_ms: int
    ) -> _Staged:
        entity = self._metastore.get_entity(tenant, catalog, key)
        current, previous = self.state_of(tenant, catalog, entity)
        for requirement in body.requirements:
            requirement.validate_view(current)
        new = apply_view_updates(current, body.updates, now_ms)
        new["location"] = self._location(
            tenant,
            catalog,
            key,
            new["location"],
            new.get("properties", {}),
            current.get("location"),
        )
        return self._stage(tenant, catalog, key, entity, current, previous, new)

    def _location(
        self,
        tenant: str,
        catalog: str,
        key: EntityKey,
        location: str | None,
        properties: Mapping[str, str],
        kept: str | None = None,
    ) -> str:
        """The view's normalized location inside the catalog, and its location properties
        inside it (blocking: symlinks); 400 otherwise. ``kept``: the view's location
        before this change (unchanged, it stays even where the catalog no longer allows
        new views)."""
        what = "view location"
        if location and location == kept:
            location = self._warehouse.check_kept_location(location, tenant, catalog, what)
        elif location:
            location = self._warehouse.check_location(location, tenant, catalog, what)
        else:
            location = self._tables.default_location(tenant, catalog, key)
        check_properties(properties, location)
        return location

    def _stage(
        self,
        tenant: str,
        catalog: str,
        key: EntityKey,
        entity: Entity | None,
        old_metadata: Json | None,
        previous: str | None,
        metadata: Json,
    ) -> _Staged:
        """Write the new metadata.json and split the metadata into pieces (blocking)."""
        location = self._warehouse.new_view_metadata_location(metadata["location"], previous)
        files = self._warehouse.files(tenant, catalog)
        files.write_json(metadata, location)
        try:
            split = pieces.split(
                self._codec,
                pieces.VIEW_LAYOUT,
                metadata,
                location,
                entity.attachments if entity is not None else {},
                old_metadata,
                self._tables.loader(tenant, catalog),
            )
        except BaseException:  # nothing refers to the file yet
            files.delete_quietly(location)
            raise
        properties = dict(metadata.get("properties", {}))
        if entity is None:
            return _Staged(
                (),
                CreateEntity(key, properties, metadata["location"], split.attachments),
                split.objects,
                files,
                location,
                metadata,
                "create view",
            )
        removals = tuple(k for k in entity.properties if k not in properties)
        return _Staged(
            (AssertEntityId(key, entity.entity_id), AssertVersion(key, entity.version)),
            UpdateEntity(key, properties, removals, metadata["location"], split.attachments),
            split.objects,
            files,
            location,
            metadata,
            "replace view",
        )

    async def _commit(
        self, tenant: str, catalog: str, staged: _Staged, principal: str, extra: Record
    ) -> Json:
        request = CommitRequest(
            staged.requirements,
            (staged.change, *extra(staged.location)),
            principal,
            staged.operation,
            objects=staged.objects,
        )
        try:
            await self._metastore.commit(tenant, catalog, request)
        except MetastoreError as exc:
            if not isinstance(exc, CommitStateUnknown):  # it may have landed: keep the file
                await asyncio.to_thread(staged.files.delete_quietly, staged.location)
            raise
        return {"metadata-location": staged.location, "metadata": staged.metadata, "config": {}}


def _dump(model: IcebergBaseModel) -> Json:
    value: Json = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return value
