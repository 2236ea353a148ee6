"""JSON forms of entities, commits and refs.

IDs are 64-bit snowflakes, beyond what a JSON number carries exactly in many
clients (2^53), so they are rendered as decimal strings.
"""

from __future__ import annotations

from typing import Any

from metastore.engine.commits import CommitOutcome
from metastore.engine.dropped import Dropped
from metastore.model.changes import DROPPED_BY
from metastore.model.keys import EntityKey, Kind
from metastore.model.records import Commit, Entity
from metastore.persistence.base import Ref


def entity_json(entity: Entity) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": entity.kind.label,
        "entity-id": str(entity.entity_id),
        "version": entity.version,
        "properties": dict(entity.properties),
        "created-at-ms": entity.created_at_us // 1000,
        "updated-at-ms": entity.updated_at_us // 1000,
    }
    if entity.kind is Kind.NAMESPACE:
        body["namespace"] = list(entity.path)
    elif entity.kind is Kind.SYSTEM:
        del body["kind"]
    else:
        body["namespace"] = list(entity.path[:-1])
        body["name"] = entity.path[-1]
        body["location"] = entity.location
    return body


def listed_json(body: dict[str, Any], readable: bool) -> dict[str, Any]:
    """A listing's item (``entity_json``, ``named_json``): whole when the caller may read
    its properties, else without its properties and location. A listing shows every
    item the caller holds something on (or all, with the LIST privilege), and a read of
    one item's properties needs its READ_PROPERTIES privilege: the listing must not
    show more than that read would."""
    if readable:
        return body
    return {k: v for k, v in body.items() if k not in ("properties", "location")}


def dropped_json(dropped: Dropped) -> dict[str, Any]:
    """A kept (dropped) table or view: its last version, when and by whom it was dropped."""
    body = entity_json(dropped.entity)
    body["properties"] = {k: v for k, v in body["properties"].items() if k != DROPPED_BY}
    return {
        **body,
        "dropped-at-ms": dropped.dropped_at_us // 1000,
        "dropped-by": dropped.dropped_by,
    }


def named_json(name: str, entity: Entity) -> dict[str, Any]:
    return {"name": name, **entity_json(entity)}


def change_json(raw_key: bytes, action: str) -> dict[str, Any]:
    key = EntityKey.decode(raw_key)
    return {"kind": key.kind.label, "path": list(key.path), "action": action.lower()}


def commit_json(commit: Commit) -> dict[str, Any]:
    return {
        "id": str(commit.id),
        "parent": str(commit.parent) if commit.parent else None,
        "seq": commit.seq,
        "timestamp-ms": commit.created_at_us // 1000,
        "principal": commit.principal,
        "operation": commit.operation,
        "changes": [change_json(c.key, c.action) for c in commit.changes],
    }


def ref_json(ref: Ref) -> dict[str, Any]:
    return {
        "name": ref.key.name,
        "head": str(ref.head),
        "updated-at-ms": ref.created_at_us // 1000,
        "recent-heads": [str(h) for h in ref.recent],
    }


def outcome_json(outcome: CommitOutcome) -> dict[str, Any]:
    return {
        "commit-id": str(outcome.commit_id),
        "seq": outcome.seq,
        "changes": [
            {"kind": key.kind.label, "path": list(key.path), "deleted": entity is None}
            | ({} if entity is None else {"entity": entity_json(entity)})
            for key, entity in outcome.entities.items()
        ],
    }
