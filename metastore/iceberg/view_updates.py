"""Iceberg view updates as tagged models, and the pure reducer that applies them.

pyiceberg has view metadata models but no view update logic, so the reducer here
follows the spec (and the reference implementation's builder): ``add-schema``
and ``add-view-version`` reuse an identical existing item's id or take the next
one, ``-1`` means "the one added last", ``set-current-view-version`` appends to
the version log.

``apply_view_updates(metadata, updates, now_ms)`` returns new metadata and never
mutates its input (which is shared with the object cache): each update builds a
new mapping over the previous one. It reads no clock: the time a version-log
entry records is the caller's, so the same updates on the same metadata at the
same time give the same result, and a commit's updates applied again to its own
result change nothing (every item they add is found and reused).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import singledispatch
from typing import Annotated, Any, Literal

from pydantic import Field
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

from metastore.errors import BadRequest
from metastore.iceberg.table_state import iceberg_errors

Json = dict[str, Any]


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


@dataclass(frozen=True, slots=True)
class ViewBuild:
    """The metadata so far, and what ``-1`` refers to in the updates still to come."""

    metadata: Mapping[str, Any]  # the spec's JSON; never mutated, each update makes a new one
    now_ms: int  # the time a version-log entry records
    last_schema: int | None = None  # the schema an add-schema of this commit added or found
    last_version: int | None = None  # likewise for add-view-version

    def with_(self, **fields: Any) -> ViewBuild:
        """This build with some top-level metadata fields replaced."""
        return replace(self, metadata={**self.metadata, **fields})


def apply_view_updates(metadata: Mapping[str, Any], updates: Sequence[Any], now_ms: int) -> Json:
    """The view's metadata after ``updates`` (a new dict; ``metadata`` is left as it was).

    Raises ``BadRequest`` for an update that cannot apply and ``ValidationFailed``
    when the result is not valid view metadata.
    """
    build = ViewBuild(metadata, now_ms)
    for update in updates:
        build = apply_view_update(update, build)
    new = dict(build.metadata)
    with iceberg_errors():
        ViewMetadata.model_validate(new)
    return new


@singledispatch
def apply_view_update(update: object, build: ViewBuild) -> ViewBuild:
    raise BadRequest(f"unsupported view update {type(update).__name__}")


@apply_view_update.register
def _assign_uuid(update: AssignUUIDUpdate, build: ViewBuild) -> ViewBuild:
    if str(update.uuid) != build.metadata["view-uuid"]:
        raise BadRequest("the view uuid is owned by the server and cannot change")
    return build


@apply_view_update.register
def _upgrade_format(update: UpgradeFormatVersionUpdate, build: ViewBuild) -> ViewBuild:
    if update.format_version != 1:
        raise BadRequest(f"unsupported view format version {update.format_version}")
    return build


@apply_view_update.register
def _add_schema(update: AddSchemaUpdate, build: ViewBuild) -> ViewBuild:
    schema = _dump(update.schema_)
    schemas = build.metadata["schemas"]
    for existing in schemas:
        if {**existing, "schema-id": 0} == {**schema, "schema-id": 0}:
            return replace(build, last_schema=existing["schema-id"])
    new_id = max((s["schema-id"] for s in schemas), default=-1) + 1
    added = build.with_(schemas=[*schemas, {**schema, "schema-id": new_id}])
    return replace(added, last_schema=new_id)


@apply_view_update.register
def _set_location(update: SetLocationUpdate, build: ViewBuild) -> ViewBuild:
    return build.with_(location=update.location)


@apply_view_update.register
def _set_properties(update: SetPropertiesUpdate, build: ViewBuild) -> ViewBuild:
    return build.with_(properties={**build.metadata.get("properties", {}), **update.updates})


@apply_view_update.register
def _remove_properties(update: RemovePropertiesUpdate, build: ViewBuild) -> ViewBuild:
    props = build.metadata.get("properties", {})
    return build.with_(properties={k: v for k, v in props.items() if k not in update.removals})


_NOT_IDENTITY = ("version-id", "timestamp-ms")  # two versions differing only here are one


@apply_view_update.register
def _add_version(update: AddViewVersionUpdate, build: ViewBuild) -> ViewBuild:
    version = _dump(update.view_version)
    if version["schema-id"] == -1:
        if build.last_schema is None:
            raise BadRequest("view version refers to the last added schema, but none was added")
        version = {**version, "schema-id": build.last_schema}
    if all(s["schema-id"] != version["schema-id"] for s in build.metadata["schemas"]):
        raise BadRequest(f"view version refers to unknown schema {version['schema-id']}")
    same = _identity(version)
    versions = build.metadata["versions"]
    for existing in versions:
        if _identity(existing) == same:
            return replace(build, last_version=existing["version-id"])
    new_id = max((v["version-id"] for v in versions), default=0) + 1
    added = build.with_(versions=[*versions, {**version, "version-id": new_id}])
    return replace(added, last_version=new_id)


@apply_view_update.register
def _set_current_version(update: SetCurrentViewVersionUpdate, build: ViewBuild) -> ViewBuild:
    version_id = update.view_version_id
    if version_id == -1:
        if build.last_version is None:
            raise BadRequest("set-current-view-version -1 needs an added view version")
        version_id = build.last_version
    metadata = build.metadata
    if all(v["version-id"] != version_id for v in metadata["versions"]):
        raise BadRequest(f"unknown view version {version_id}")
    if metadata["current-version-id"] == version_id:
        return build
    entry = {"timestamp-ms": build.now_ms, "version-id": version_id}
    return build.with_(
        **{"current-version-id": version_id, "version-log": [*metadata["version-log"], entry]}
    )


def _identity(version: Mapping[str, Any]) -> Json:
    return {k: v for k, v in version.items() if k not in _NOT_IDENTITY}


def _dump(model: IcebergBaseModel) -> Json:
    value: Json = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return value
