"""Iceberg views: metadata as pieces (like tables), updates as tagged models and a pure reducer.

pyiceberg has view metadata models but no view update logic, so the reducer here
follows the spec (and the reference implementation's builder): ``add-schema``
and ``add-view-version`` reuse an identical existing item's id or take the next
one, ``-1`` means "the one added last", ``set-current-view-version`` appends to
the version log.
"""

from __future__ import annotations

import asyncio
import copy
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from functools import singledispatch
from typing import Annotated, Any, Literal

from pydantic import Field
from pyiceberg.schema import Schema
from pyiceberg.table.update import (
    AddSchemaUpdate,
    AssignUUIDUpdate,
    RemovePropertiesUpdate,
    SetLocationUpdate,
    SetPropertiesUpdate,
    UpgradeFormatVersionUpdate,
)
from pyiceberg.typedef import IcebergBaseModel
from pyiceberg.view.metadata import ViewMetadata, ViewVersion

from metastore.changes import Change, CreateEntity, UpdateEntity
from metastore.codec import Codec
from metastore.commits import CommitRequest
from metastore.errors import (
    BadRequest,
    CommitConflict,
    CommitStateUnknown,
    MetastoreError,
    NoSuchView,
)
from metastore.iceberg import pieces
from metastore.iceberg.files import Warehouse
from metastore.iceberg.table_paths import check_properties
from metastore.iceberg.tables import MAX_REBASES, Tables, iceberg_errors
from metastore.keys import EntityKey
from metastore.model import Entity
from metastore.requirements import AssertEntityId, AssertVersion
from metastore.service import Metastore

Json = dict[str, Any]
Record = Callable[[str], Sequence[Change]]  # metadata location -> extra changes (idempotency)


class AddViewVersionUpdate(IcebergBaseModel):
    action: Literal["add-view-version"] = Field(default="add-view-version")
    view_version: ViewVersion = Field(alias="view-version")


class SetCurrentViewVersionUpdate(IcebergBaseModel):
    action: Literal["set-current-view-version"] = Field(default="set-current-view-version")
    view_version_id: int = Field(alias="view-version-id")


ViewUpdate = Annotated[
    AssignUUIDUpdate
    | UpgradeFormatVersionUpdate
    | AddSchemaUpdate
    | SetLocationUpdate
    | SetPropertiesUpdate
    | RemovePropertiesUpdate
    | AddViewVersionUpdate
    | SetCurrentViewVersionUpdate,
    Field(discriminator="action"),
]


class AssertViewUUID(IcebergBaseModel):
    type: Literal["assert-view-uuid"]
    uuid: str

    def validate_view(self, metadata: Json) -> None:
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


# --- the reducer (pure: returns a new dict) --------------------------------------------


class _Context:
    def __init__(self) -> None:
        self.last_schema: int | None = None
        self.last_version: int | None = None


@singledispatch
def _apply(update: object, metadata: Json, ctx: _Context) -> None:
    raise BadRequest(f"unsupported view update {type(update).__name__}")


@_apply.register
def _(update: AssignUUIDUpdate, metadata: Json, ctx: _Context) -> None:
    if str(update.uuid) != metadata["view-uuid"]:
        raise BadRequest("the view uuid is owned by the server and cannot change")


@_apply.register
def _(update: UpgradeFormatVersionUpdate, metadata: Json, ctx: _Context) -> None:
    if update.format_version != 1:
        raise BadRequest(f"unsupported view format version {update.format_version}")


@_apply.register
def _(update: AddSchemaUpdate, metadata: Json, ctx: _Context) -> None:
    schema = _dump(update.schema_)
    for existing in metadata["schemas"]:
        if {**existing, "schema-id": 0} == {**schema, "schema-id": 0}:
            ctx.last_schema = existing["schema-id"]
            return
    new_id = max((s["schema-id"] for s in metadata["schemas"]), default=-1) + 1
    metadata["schemas"] = [*metadata["schemas"], {**schema, "schema-id": new_id}]
    ctx.last_schema = new_id


@_apply.register
def _(update: SetLocationUpdate, metadata: Json, ctx: _Context) -> None:
    metadata["location"] = update.location


@_apply.register
def _(update: SetPropertiesUpdate, metadata: Json, ctx: _Context) -> None:
    metadata["properties"] = {**metadata.get("properties", {}), **update.updates}


@_apply.register
def _(update: RemovePropertiesUpdate, metadata: Json, ctx: _Context) -> None:
    props = metadata.get("properties", {})
    metadata["properties"] = {k: v for k, v in props.items() if k not in update.removals}


@_apply.register
def _(update: AddViewVersionUpdate, metadata: Json, ctx: _Context) -> None:
    version = _dump(update.view_version)
    if version["schema-id"] == -1:
        if ctx.last_schema is None:
            raise BadRequest("view version refers to the last added schema, but none was added")
        version["schema-id"] = ctx.last_schema
    if all(s["schema-id"] != version["schema-id"] for s in metadata["schemas"]):
        raise BadRequest(f"view version refers to unknown schema {version['schema-id']}")
    same = {k: v for k, v in version.items() if k not in ("version-id", "timestamp-ms")}
    for existing in metadata["versions"]:
        if {k: v for k, v in existing.items() if k not in ("version-id", "timestamp-ms")} == same:
            ctx.last_version = existing["version-id"]
            return
    new_id = max((v["version-id"] for v in metadata["versions"]), default=0) + 1
    metadata["versions"] = [*metadata["versions"], {**version, "version-id": new_id}]
    ctx.last_version = new_id


@_apply.register
def _(update: SetCurrentViewVersionUpdate, metadata: Json, ctx: _Context) -> None:
    version_id = update.view_version_id
    if version_id == -1:
        if ctx.last_version is None:
            raise BadRequest("set-current-view-version -1 needs an added view version")
        version_id = ctx.last_version
    if all(v["version-id"] != version_id for v in metadata["versions"]):
        raise BadRequest(f"unknown view version {version_id}")
    if metadata["current-version-id"] == version_id:
        return
    metadata["current-version-id"] = version_id
    entry = {"timestamp-ms": int(time.time() * 1000), "version-id": version_id}
    metadata["version-log"] = [*metadata["version-log"], entry]


def apply_view_updates(metadata: Json, updates: Sequence[Any]) -> Json:
    new = copy.copy(metadata)
    ctx = _Context()
    for update in updates:
        _apply(update, new, ctx)
    with iceberg_errors():
        ViewMetadata.model_validate(new)
    return new


def _dump(model: IcebergBaseModel) -> Json:
    value: Json = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return value


# --- the service ------------------------------------------------------------------------


class Views:
    def __init__(
        self, metastore: Metastore, codec: Codec, warehouse: Warehouse, tables: Tables
    ) -> None:
        self._metastore = metastore
        self._codec = codec
        self._warehouse = warehouse
        self._tables = tables

    def state_of(self, tenant: str, catalog: str, entity: Entity) -> tuple[Json, str | None]:
        if pieces.CORE not in entity.attachments:
            raise NoSuchView(f"view {entity.key.display()} has no Iceberg metadata")
        return pieces.assemble(
            pieces.VIEW_LAYOUT,
            entity.attachments,
            entity.properties,
            self._tables.loader(tenant, catalog),
        )

    def load(self, tenant: str, catalog: str, key: EntityKey) -> Json:
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
        self._metastore.get_entity(tenant, catalog, EntityKey.namespace_key(key.namespace))
        location = await asyncio.to_thread(
            self._location, tenant, catalog, key, body.location, body.properties
        )
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
        return await self._store(tenant, catalog, key, None, metadata, principal, extra)

    async def replace(
        self,
        tenant: str,
        catalog: str,
        key: EntityKey,
        body: CommitViewRequest,
        principal: str,
        extra: Record = lambda _: (),
    ) -> Json:
        for attempt in range(MAX_REBASES):
            entity = self._metastore.get_entity(tenant, catalog, key)
            current, _ = self.state_of(tenant, catalog, entity)
            for requirement in body.requirements:
                requirement.validate_view(current)
            new = apply_view_updates(current, body.updates)
            new["location"] = await asyncio.to_thread(
                self._location,
                tenant,
                catalog,
                key,
                new["location"],
                new.get("properties", {}),
                current.get("location"),
            )
            try:
                return await self._store(tenant, catalog, key, entity, new, principal, extra)
            except CommitConflict:
                if attempt + 1 == MAX_REBASES:
                    raise
        raise AssertionError("unreachable")

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

    async def _store(
        self,
        tenant: str,
        catalog: str,
        key: EntityKey,
        entity: Entity | None,
        metadata: Json,
        principal: str,
        extra: Record,
    ) -> Json:
        previous = None
        old_metadata = None
        if entity is not None:
            old_metadata, previous = self.state_of(tenant, catalog, entity)
        location = self._warehouse.new_view_metadata_location(metadata["location"], previous)
        files = self._warehouse.files(tenant, catalog)
        await asyncio.to_thread(files.write_json, metadata, location)
        split = pieces.split(
            self._codec,
            pieces.VIEW_LAYOUT,
            metadata,
            location,
            entity.attachments if entity is not None else {},
            old_metadata,
            self._tables.loader(tenant, catalog),
        )
        properties = dict(metadata.get("properties", {}))
        change: Change
        requirements: tuple[AssertEntityId | AssertVersion, ...] = ()
        if entity is None:
            change = CreateEntity(key, properties, metadata["location"], split.attachments)
        else:
            removals = tuple(k for k in entity.properties if k not in properties)
            change = UpdateEntity(
                key, properties, removals, metadata["location"], split.attachments
            )
            requirements = (
                AssertEntityId(key, entity.entity_id),
                AssertVersion(key, entity.version),
            )
        request = CommitRequest(
            requirements,
            (change, *extra(location)),
            principal,
            "create view" if entity is None else "replace view",
            objects=split.objects,
        )
        try:
            await self._metastore.commit(tenant, catalog, request)
        except MetastoreError as exc:
            if not isinstance(exc, CommitStateUnknown):  # it may have landed: keep the file
                await asyncio.to_thread(files.delete_quietly, location)
            raise
        return {"metadata-location": location, "metadata": metadata, "config": {}}
