"""A commit's metadata file serialized from its base's snapshots' JSON is the file a full
serialization writes, for every format version, across a format upgrade, after
snapshots are removed, and on a base parsed from a file (whose snapshots' JSON is not
known: the full serialization)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil, new_table_metadata
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    RemoveSnapshotsUpdate,
    SetSnapshotRefUpdate,
    TableUpdate,
    UpgradeFormatVersionUpdate,
)

from metastore.iceberg.lineage import INITIAL_ROW_ID
from metastore.iceberg.metadata_json import SnapshotsJson, metadata_document, metadata_text
from metastore.iceberg.table_updates import apply_updates
from tests.iceberg.support import SCHEMA

LOCATION = "file:///warehouse/db/t"


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _table(version: int) -> TableMetadata:
    properties = {"format-version": str(version), "note": "naïve ✓"}
    metadata = new_table_metadata(
        SCHEMA, UNPARTITIONED_PARTITION_SPEC, UNSORTED_SORT_ORDER, LOCATION, properties
    )
    if version == 3:
        metadata = metadata.model_copy(update={"next_row_id": INITIAL_ROW_ID})
    return metadata


def _append(metadata: TableMetadata, snapshot_id: int) -> list[TableUpdate]:
    fields: dict[str, Any] = {
        "snapshot-id": snapshot_id,
        "parent-snapshot-id": metadata.current_snapshot_id,
        "sequence-number": metadata.next_sequence_number(),
        "timestamp-ms": 1_700_000_000_000 + snapshot_id,
        "manifest-list": f"{LOCATION}/metadata/snap-{snapshot_id}.avro",
        "summary": Summary(Operation.APPEND, **{"added-data-files": "1"}),
        "schema-id": 0,
    }
    if metadata.format_version == 3:
        fields["added-rows"] = 2
    main = {"ref-name": "main", "type": "branch", "snapshot-id": snapshot_id}
    return [
        AddSnapshotUpdate(snapshot=Snapshot.model_validate(fields)),
        SetSnapshotRefUpdate.model_validate(main),
    ]


@pytest.mark.parametrize("version", [1, 2, 3])
def test_a_chain_of_commits_writes_what_a_full_serialization_writes(version: int) -> None:
    base = _table(version)
    written = metadata_document(base)
    assert written.text == metadata_text(base) and written.document == json.loads(written.text)
    for step in range(40):
        updates = _append(base, 1000 + step)
        if step == 10 and version == 1:
            updates.append(UpgradeFormatVersionUpdate.model_validate({"format-version": 2}))
        if step == 20:  # expiring snapshots: the shared ones are no longer in place
            updates.append(RemoveSnapshotsUpdate(snapshot_ids=[1000, 1003]))
        new = apply_updates(base, updates, f"{LOCATION}/metadata/{step}.json", base)
        written = metadata_document(new, base, written.snapshots)
        full = metadata_text(new)
        assert written.document == json.loads(full), step
        assert written.text == _compact(written.document)  # what a full serialization writes
        if version < 3:  # pyiceberg's own serializer: the same bytes
            assert written.text == full, step
        snapshots = written.snapshots
        if snapshots.texts is not None:  # None after a full serialization (the upgrade)
            assert [_compact(item) for item in snapshots.items] == snapshots.texts
        assert snapshots.items == written.document["snapshots"]
        base = new
    assert len(base.snapshots) == 38


def test_a_base_without_its_snapshots_json_is_serialized_in_full() -> None:
    base = _table(2)
    for step in range(3):
        base = apply_updates(base, _append(base, 10 + step), None, base)
    parsed = TableMetadataUtil.parse_obj(json.loads(metadata_text(base)))
    new = apply_updates(parsed, _append(parsed, 20), None, parsed)
    written = metadata_document(new, parsed, None)
    assert written.text == metadata_text(new) and written.document == json.loads(written.text)
    stale = SnapshotsJson([{"snapshot-id": 0}], ["{}"])  # another length: never used
    assert metadata_document(new, parsed, stale) == written
