"""Which stale commits ``metastore.iceberg.rebase.plan`` rebases, on metadata built in memory
(the file side, with real PyIceberg clients, is tests/iceberg/test_rebase.py)."""

from __future__ import annotations

from typing import Any

import pytest
from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertRefSnapshotId,
    SetPropertiesUpdate,
    SetSnapshotRefUpdate,
    TableRequirement,
    TableUpdate,
)

from metastore.errors import BadRequest
from metastore.iceberg.rebase import Refused, check_setting, enabled, plan

LOCATION = "file:///warehouse/db/t"


def _snapshot(snapshot_id: int, parent: int | None, operation: str = "append") -> dict[str, Any]:
    return {
        "snapshot-id": snapshot_id,
        "parent-snapshot-id": parent,
        "sequence-number": snapshot_id,
        "timestamp-ms": 1000 + snapshot_id,
        "manifest-list": f"{LOCATION}/metadata/snap-{snapshot_id}.avro",
        "summary": {"operation": operation},
        "schema-id": 0,
    }


def _metadata(
    snapshots: list[dict[str, Any]], head: int, ref_type: str = "branch"
) -> TableMetadata:
    return TableMetadataUtil.parse_obj(
        {
            "format-version": 2,
            "table-uuid": "9c12d441-03fe-4693-9a96-a0705ddf69c1",
            "location": LOCATION,
            "last-sequence-number": max(s["sequence-number"] for s in snapshots),
            "last-updated-ms": 5000,
            "last-column-id": 1,
            "schemas": [
                {
                    "type": "struct",
                    "schema-id": 0,
                    "fields": [{"id": 1, "name": "id", "required": False, "type": "long"}],
                }
            ],
            "current-schema-id": 0,
            "partition-specs": [{"spec-id": 0, "fields": []}],
            "default-spec-id": 0,
            "last-partition-id": 999,
            "sort-orders": [{"order-id": 0, "fields": []}],
            "default-sort-order-id": 0,
            "snapshots": snapshots,
            "current-snapshot-id": head,
            "refs": {"main": {"snapshot-id": head, "type": ref_type}},
        }
    )


def _append(
    expected: int | None, snapshot_id: int = 99, operation: str = "append"
) -> tuple[tuple[TableRequirement, ...], tuple[TableUpdate, ...]]:
    requirement = AssertRefSnapshotId.model_validate({"ref": "main", "snapshot-id": expected})
    snapshot = _snapshot(snapshot_id, expected, operation)
    add = AddSnapshotUpdate.model_validate({"snapshot": snapshot})
    ref = SetSnapshotRefUpdate.model_validate(
        {"ref-name": "main", "type": "branch", "snapshot-id": snapshot_id}
    )
    return (requirement,), (add, ref)


CHAIN = [_snapshot(1, None), _snapshot(2, 1), _snapshot(3, 2)]


def test_a_stale_append_over_appends_is_planned() -> None:
    planned = plan(*_append(1), _metadata(CHAIN, 3))
    assert planned.head.snapshot_id == 3
    assert [s.snapshot_id for s in planned.between] == [3, 2]
    planned = plan(*_append(None), _metadata(CHAIN, 3))  # the client saw no branch yet
    assert [s.snapshot_id for s in planned.between] == [3, 2, 1]


@pytest.mark.parametrize(
    ("metadata", "change", "why"),
    [
        (_metadata([*CHAIN[:2], _snapshot(3, 2, "overwrite")], 3), _append(1), r"\(overwrite\)"),
        (_metadata([*CHAIN[:2], _snapshot(3, 2, "delete")], 3), _append(1), r"\(delete\)"),
        (_metadata([_snapshot(5, None), _snapshot(6, 5)], 6), _append(1), "not an ancestor"),
        (_metadata(CHAIN, 3), _append(1, snapshot_id=2), "exists already"),
        (_metadata(CHAIN, 3), _append(1, operation="overwrite"), "not an append"),
        (_metadata(CHAIN, 3, "tag"), _append(1), "not a branch"),
        # a registered history whose parents loop: refused, never walked forever
        (_metadata([_snapshot(1, 3), _snapshot(2, 1), _snapshot(3, 2)], 3), _append(7), "ancestor"),
    ],
)
def test_refused(metadata: TableMetadata, change: Any, why: str) -> None:
    with pytest.raises(Refused, match=why):
        plan(*change, metadata)


def test_refused_without_the_snapshots_schema_id() -> None:
    """A schema change adds no snapshot: only the snapshot's schema-id tells one that
    came since it was written, so without it nothing is rebased."""
    requirements, updates = _append(1)
    add = updates[0]
    assert isinstance(add, AddSnapshotUpdate)
    nameless = add.snapshot.model_copy(update={"schema_id": None})
    updates = (AddSnapshotUpdate(snapshot=nameless), updates[1])
    with pytest.raises(Refused, match="names no schema-id"):
        plan(requirements, updates, _metadata(CHAIN, 3))


def test_refused_with_more_updates_or_requirements() -> None:
    requirements, updates = _append(1)
    more = SetPropertiesUpdate(updates={"a": "b"})
    with pytest.raises(Refused, match="does more"):
        plan(requirements, (*updates, more), _metadata(CHAIN, 3))
    other = AssertRefSnapshotId.model_validate({"ref": "audit", "snapshot-id": 1})
    with pytest.raises(Refused, match="other than"):
        plan((*requirements, other), updates, _metadata(CHAIN, 3))


def test_setting() -> None:
    assert enabled({}, {"metastore.commit.rebase-appends": "true"})
    assert not enabled(
        {"metastore.commit.rebase-appends": "false"}, {"metastore.commit.rebase-appends": "true"}
    )
    assert not enabled({}, {})
    check_setting({"metastore.commit.rebase-appends": "false"})
    check_setting(
        {"metastore.commit.rebase-appends": "x"}, {"metastore.commit.rebase-appends": "x"}
    )
    with pytest.raises(BadRequest):
        check_setting({"metastore.commit.rebase-appends": "yes"})
