"""Entity changes as frozen, tagged data, and the pure reducer that applies them.

``apply_change(change, current, ctx)`` returns the entity's next version (or
None for a deletion) and never mutates ``current``. Existence rules (a create of
something present, an update of something absent, a non-empty namespace) are
the commit engine's: it knows the whole state, the reducer only one entity.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import singledispatch
from types import MappingProxyType

from metastore.model.keys import EntityKey
from metastore.model.records import Entity

_UNSET = "\x00unset"
# property of a dropped version: who dropped it (reserved; an undrop removes it)
DROPPED_BY = "metastore.engine.dropped-by"


@dataclass(frozen=True, slots=True)
class CreateEntity:
    key: EntityKey
    properties: Mapping[str, str] = field(default_factory=dict)
    location: str | None = None
    attachments: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class UpdateEntity:
    key: EntityKey
    updates: Mapping[str, str] = field(default_factory=dict)
    removals: tuple[str, ...] = ()
    location: str | None = _UNSET  # _UNSET = keep; None = clear
    attachments: Mapping[str, int] | None = None  # None = keep; a mapping replaces them all

    @property
    def sets_location(self) -> bool:
        return self.location != _UNSET


@dataclass(frozen=True, slots=True)
class DeleteEntity:
    key: EntityKey


@dataclass(frozen=True, slots=True)
class RenameEntity:
    key: EntityKey
    to: EntityKey


@dataclass(frozen=True, slots=True)
class DropEntity:
    """Drop a table or view but keep it, restorable, until garbage collection collects it.

    The engine moves the entity's next version (``by``, the dropping principal, recorded
    in it) from ``key`` to its dropped record (``metastore.engine.dropped``); its location stays
    held, so its files stay its own until it is collected. With ``purge`` it moves to its
    purging record instead: kept only until the purge of its files that follows ends.
    """

    key: EntityKey
    by: str
    purge: bool = False


@dataclass(frozen=True, slots=True)
class UndropEntity:
    """Restore a dropped table or view under ``key``, its name when it was dropped.

    ``entity_id`` picks one dropped instance of that name; None: the one dropped last.
    """

    key: EntityKey
    entity_id: int | None = None


@dataclass(frozen=True, slots=True)
class PurgeDropped:
    """Purge a dropped table or view kept until now: the engine moves its next version
    from its dropped record ``key`` to its purging record (``metastore.engine.dropped``), where it
    stays, never undropped, until the purge of its files that follows ends."""

    key: EntityKey


Change = (
    CreateEntity
    | UpdateEntity
    | DeleteEntity
    | RenameEntity
    | DropEntity
    | UndropEntity
    | PurgeDropped
)


@dataclass(frozen=True, slots=True)
class ApplyContext:
    new_id: int  # object id of the new version
    now_us: int


@singledispatch
def apply_change(change: object, current: Entity | None, ctx: ApplyContext) -> Entity | None:
    raise TypeError(f"unknown change {type(change).__name__}")


@apply_change.register
def _create(change: CreateEntity, current: Entity | None, ctx: ApplyContext) -> Entity | None:
    return Entity(
        entity_id=ctx.new_id,
        kind=change.key.kind,
        path=change.key.path,
        properties=MappingProxyType(dict(change.properties)),
        location=change.location,
        version=1,
        created_at_us=ctx.now_us,
        updated_at_us=ctx.now_us,
        attachments=MappingProxyType(dict(change.attachments)),
    )


@apply_change.register
def _update(change: UpdateEntity, current: Entity | None, ctx: ApplyContext) -> Entity | None:
    assert current is not None, "engine checks existence first"
    props = {k: v for k, v in current.properties.items() if k not in change.removals}
    props.update(change.updates)
    return Entity(
        entity_id=current.entity_id,
        kind=current.kind,
        path=current.path,
        properties=MappingProxyType(props),
        location=change.location if change.sets_location else current.location,
        version=current.version + 1,
        created_at_us=current.created_at_us,
        updated_at_us=ctx.now_us,
        attachments=(
            current.attachments
            if change.attachments is None
            else MappingProxyType(dict(change.attachments))
        ),
    )


@apply_change.register
def _delete(change: DeleteEntity, current: Entity | None, ctx: ApplyContext) -> Entity | None:
    return None


@apply_change.register
def _drop(change: DropEntity, current: Entity | None, ctx: ApplyContext) -> Entity | None:
    """The dropped version (stored under the dropped record): the same entity, marked."""
    assert current is not None, "engine checks existence first"
    props = {**current.properties, DROPPED_BY: change.by}
    return _next(current, current.path, props, ctx)


@apply_change.register
def _purge_dropped(
    change: PurgeDropped, current: Entity | None, ctx: ApplyContext
) -> Entity | None:
    """The version kept until its purge ends (``current``: the dropped one), unchanged."""
    assert current is not None, "engine checks existence first"
    return _next(current, current.path, current.properties, ctx)


@apply_change.register
def _undrop(change: UndropEntity, current: Entity | None, ctx: ApplyContext) -> Entity | None:
    """The restored version (``current``: the dropped one): unmarked, live again."""
    assert current is not None, "engine finds the dropped record first"
    props = {k: v for k, v in current.properties.items() if k != DROPPED_BY}
    return _next(current, change.key.path, props, ctx)


def _next(
    current: Entity, path: tuple[str, ...], props: Mapping[str, str], ctx: ApplyContext
) -> Entity:
    return Entity(
        entity_id=current.entity_id,
        kind=current.kind,
        path=path,
        properties=MappingProxyType(dict(props)),
        location=current.location,
        version=current.version + 1,
        created_at_us=current.created_at_us,
        updated_at_us=ctx.now_us,
        attachments=current.attachments,
    )


@apply_change.register
def _rename(change: RenameEntity, current: Entity | None, ctx: ApplyContext) -> Entity | None:
    """The renamed entity (stored under ``change.to``); the engine deletes the old key."""
    assert current is not None, "engine checks existence first"
    return Entity(
        entity_id=current.entity_id,
        kind=current.kind,
        path=change.to.path,
        properties=current.properties,
        location=current.location,
        version=current.version + 1,
        created_at_us=current.created_at_us,
        updated_at_us=ctx.now_us,
        attachments=current.attachments,
    )
