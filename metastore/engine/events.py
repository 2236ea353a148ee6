"""Change events: what one commit did to the entities of a catalog, one event per entity.

A commit records the keys it changed and how (``Commit.changes``: CREATE, UPDATE,
DELETE, in the order the engine applied them); the entities before and after are the
ones its parent's index and its own index name. ``derive`` turns that into events,
generically, from the stored commit alone, so every node (and every later reader of
a retained history) derives exactly the same events with the same positions:

- a DELETE and a CREATE in one commit of the same entity id is one ``rename`` (the
  engine records a rename as both; the entity keeps its id);
- a CREATE of an entity whose version is past 1 is an ``undrop`` (a restored entity
  keeps its id and continues its versions; a new one always starts at 1), as is every
  CREATE of a commit whose operation says ``undrop``;
- any other CREATE is a ``create``, a DELETE a ``drop``, an UPDATE an ``update``; a
  drop that keeps the entity restorable (it moved under a ``dropped:<entity id>``
  record in the same commit, ``metastore.engine.dropped``) is marked ``kept``.

Namespaces, tables, views and the catalog's own record are reported; the other system
records (idempotency outcomes, location records, storage, principals, grants) are the
engine's and the security layer's bookkeeping, never events. For an Iceberg table
whose current snapshot changed, the event names the new snapshot and its operation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from metastore.engine.objects import Objects
from metastore.errors import NoSuchCommit
from metastore.model.index import IndexView
from metastore.model.keys import CATALOG_RECORD, EntityKey, Kind
from metastore.model.records import Commit, Entity

OPERATIONS = ("create", "update", "rename", "drop", "undrop")
_ACTIONS = {"CREATE": "create", "UPDATE": "update", "DELETE": "drop"}
_CORE = "core"  # the Iceberg metadata piece of scalar fields (``metastore.iceberg.pieces``)
_SNAPSHOTS = "snapshots"  # the Iceberg snapshot log's head page
_KEPT = "dropped:"  # system records of dropped, restorable entities (``metastore.engine.dropped``)
_PAGES_SEARCHED = 4  # log pages read back for a current snapshot (it is nearly always newest)


@dataclass(frozen=True, slots=True)
class Event:
    """One entity change of one commit; ``index`` is its place among the commit's events."""

    tenant: str
    catalog: str
    commit_id: int
    commit_seq: int
    index: int
    time_us: int
    principal: str
    commit_operation: str
    operation: str  # one of OPERATIONS
    kind: str  # namespace | table | view | catalog
    name: tuple[str, ...]
    key: EntityKey  # the entity's key after the change (before it, for a drop)
    previous_key: EntityKey | None = None  # a rename's old key
    entity_id: int | None = None
    before_version: int | None = None
    after_version: int | None = None
    snapshot_id: int | None = None
    snapshot_operation: str | None = None
    kept: bool = False  # a drop that keeps the entity restorable (undrop)

    @property
    def previous_name(self) -> tuple[str, ...] | None:
        return None if self.previous_key is None else self.previous_key.path

    def to_json(self) -> dict[str, Any]:
        """The event as the native API and the events topic show it (without its cursor)."""
        body: dict[str, Any] = {
            "tenant": self.tenant,
            "catalog": self.catalog,
            "commit-id": str(self.commit_id),
            "commit-seq": self.commit_seq,
            "index": self.index,
            "time-us": self.time_us,
            "principal": self.principal,
            "commit-operation": self.commit_operation,
            "operation": self.operation,
            "kind": self.kind,
            "name": list(self.name),
            "entity-id": None if self.entity_id is None else str(self.entity_id),
            "before-version": self.before_version,
            "after-version": self.after_version,
        }
        if self.previous_name is not None:
            body["previous-name"] = list(self.previous_name)
        if self.operation == "drop":
            body["kept"] = self.kept
        if self.snapshot_id is not None:
            body["snapshot-id"] = self.snapshot_id
            body["snapshot-operation"] = self.snapshot_operation
        return body


def reported(key: EntityKey) -> bool:
    """Whether changes of ``key`` are events (entities and the catalog's own record)."""
    return key.kind is not Kind.SYSTEM or key == CATALOG_RECORD


def derive(objects: Objects, commit: Commit) -> tuple[Event, ...]:
    """The events of ``commit`` of the catalog ``objects`` reads (blocking reads)."""
    decoded = [(EntityKey.decode(c.key), c.action) for c in commit.changes]
    changes = [(key, action) for key, action in decoded if reported(key)]
    if not changes:
        return ()
    kept = {_kept_id(key) for key, action in decoded if action == "CREATE"} - {None}
    before_view = _parent_view(objects, commit)
    after_view = objects.index(commit)
    before = {k: _entity(objects, before_view, k) for k, a in changes if a != "CREATE"}
    after = {k: _entity(objects, after_view, k) for k, a in changes if a != "DELETE"}
    dropped_ids = {
        entity.entity_id: key
        for key, action in changes
        if action == "DELETE" and (entity := before.get(key)) is not None
    }
    renamed: dict[EntityKey, EntityKey] = {}  # new key -> old key
    for key, action in changes:
        entity = after.get(key)
        if action == "CREATE" and entity is not None and entity.entity_id in dropped_ids:
            renamed[key] = dropped_ids[entity.entity_id]
    consumed = set(renamed.values())
    undrop = commit.operation.startswith("undrop")
    events: list[Event] = []
    for key, action in changes:
        if key in consumed:
            continue
        old_key = renamed.get(key)
        was = before.get(old_key if old_key is not None else key)
        now = after.get(key)
        operation = _operation(action, old_key, now, undrop)
        event = _event(objects, commit, len(events), operation, key, old_key, was, now)
        if operation == "drop" and event.entity_id in kept:
            event = replace(event, kept=True)
        events.append(event)
    return tuple(events)


def _kept_id(key: EntityKey) -> int | None:
    """The entity id a ``dropped:<entity id>`` record keeps, else None."""
    if key.kind is not Kind.SYSTEM or not key.name.startswith(_KEPT):
        return None
    raw = key.name[len(_KEPT) :]
    return int(raw) if raw.isascii() and raw.isdigit() else None


def _operation(action: str, old_key: EntityKey | None, now: Entity | None, undrop: bool) -> str:
    if old_key is not None:
        return "rename"
    if action == "CREATE" and (undrop or (now is not None and now.version > 1)):
        return "undrop"
    return _ACTIONS[action]


def _event(
    objects: Objects,
    commit: Commit,
    index: int,
    operation: str,
    key: EntityKey,
    old_key: EntityKey | None,
    was: Entity | None,
    now: Entity | None,
) -> Event:
    name: tuple[str, ...]
    if key == CATALOG_RECORD:
        kind, name = "catalog", (objects.catalog,)
    else:
        kind, name = key.kind.label, key.path
    snapshot = _new_snapshot(objects, was, now) if key.kind is Kind.TABLE else None
    entity = now if now is not None else was
    return Event(
        tenant=objects.tenant,
        catalog=objects.catalog,
        commit_id=commit.id,
        commit_seq=commit.seq,
        index=index,
        time_us=commit.created_at_us,
        principal=commit.principal,
        commit_operation=commit.operation,
        operation=operation,
        kind=kind,
        name=name,
        key=key,
        previous_key=old_key,
        entity_id=None if entity is None else entity.entity_id,
        before_version=None if was is None else was.version,
        after_version=None if now is None else now.version,
        snapshot_id=None if snapshot is None else snapshot[0],
        snapshot_operation=None if snapshot is None else snapshot[1],
    )


def _parent_view(objects: Objects, commit: Commit) -> IndexView | None:
    if not commit.parent:
        return None
    try:
        return objects.index(objects.commit(commit.parent))
    except NoSuchCommit:  # past the retained history: the versions before are unknown
        return None


def _entity(objects: Objects, view: IndexView | None, key: EntityKey) -> Entity | None:
    value = view.get(key.encode()) if view is not None else None
    return None if value is None else objects.entity(value[1])


def _new_snapshot(
    objects: Objects, was: Entity | None, now: Entity | None
) -> tuple[int, str | None] | None:
    """The current snapshot of an Iceberg table and its operation, iff this change
    made it current; None for other tables and changes."""
    current = _current_snapshot(objects, now)
    if current is None or current == _current_snapshot(objects, was):
        return None
    assert now is not None
    return current, _snapshot_operation(objects, now.attachments, current)


def _current_snapshot(objects: Objects, entity: Entity | None) -> int | None:
    if entity is None or _CORE not in entity.attachments:
        return None
    core = objects.piece(entity.attachments[_CORE])
    value = core.get("current-snapshot-id") if isinstance(core, Mapping) else None
    return value if isinstance(value, int) and value >= 0 else None


def _snapshot_operation(
    objects: Objects, attachments: Mapping[str, int], snapshot: int
) -> str | None:
    page_id = attachments.get(_SNAPSHOTS, 0)
    for _ in range(_PAGES_SEARCHED):
        page = objects.piece(page_id) if page_id else None
        if not isinstance(page, Mapping):
            return None
        items: Sequence[Any] = page.get("items", ())
        for item in reversed(items):
            if isinstance(item, Mapping) and item.get("snapshot-id") == snapshot:
                summary = item.get("summary")
                operation = summary.get("operation") if isinstance(summary, Mapping) else None
                return operation if isinstance(operation, str) else None
        page_id = page.get("prev", 0)
    return None
