"""Format version 3 in table commits: the upgrade to it, and row lineage.

Version 3 tables give every row an id: the table's ``next-row-id`` is the first
id not yet handed out; a snapshot's ``first-row-id`` is where its new rows'
ids start and ``added-rows`` how many it hands out; committing the snapshot
moves ``next-row-id`` past them, on whatever branch the snapshot lands. The
server owns that counter, so two writers never hand out the same ids:

- a new version 3 table, and a table upgraded to version 3, start at 0 (no
  earlier row has an id);
- a snapshot without ``first-row-id`` gets the table's ``next-row-id``;
- a ``first-row-id`` behind it means another commit handed those ids out since
  the client read the table: a conflict (409), the client refreshes and retries;
- ``added-rows`` is required (the server cannot count the rows of a snapshot
  without reading its manifests), 400 without it;
- ``next-row-id`` becomes ``first-row-id + added-rows``.

pyiceberg's reducer refuses to upgrade a table to version 3 and leaves these
rules to the writer, so the two updates go through here first
(``metastore.iceberg.table_updates``).
"""

from __future__ import annotations

from pyiceberg.table.metadata import TableMetadata, TableMetadataV3
from pyiceberg.table.update import AddSnapshotUpdate, UpgradeFormatVersionUpdate

from metastore.errors import BadRequest, CommitConflict
from metastore.iceberg.metadata_json import FORMAT_VERSIONS

ROW_LINEAGE_VERSION = 3  # the first format version whose tables assign row ids
INITIAL_ROW_ID = 0


def check_format_version(version: object) -> None:
    """400 for a format version the server cannot write (naming the ones it can); a
    create's ``format-version`` property is text, an upgrade's an integer."""
    if str(version).strip() not in {str(v) for v in FORMAT_VERSIONS}:
        known = ", ".join(str(v) for v in FORMAT_VERSIONS)
        raise BadRequest(f"format version {version!r} is not supported (supported: {known})")


def upgraded_to_v3(base: TableMetadata) -> TableMetadataV3:
    """``base`` (version 2) as a version 3 table: the same fields, row ids from 0.

    Built without revalidation, like pyiceberg's own upgrade: the fields are the
    base's, already valid, and version 3 only adds ``next-row-id``.
    """
    fields = {**dict(base), "format_version": ROW_LINEAGE_VERSION, "next_row_id": INITIAL_ROW_ID}
    return TableMetadataV3.model_construct(**fields)


def involves_v3(update: UpgradeFormatVersionUpdate, base: TableMetadata) -> bool:
    """Whether ``update`` goes to or from version 3, which the server handles itself:
    pyiceberg's reducer refuses version 3 even when the table is there already. A
    version the server cannot write, or a downgrade, is a 400."""
    check_format_version(update.format_version)
    if update.format_version < base.format_version:
        raise BadRequest(
            f"cannot downgrade a format version {base.format_version} table "
            f"to version {update.format_version}"
        )
    return ROW_LINEAGE_VERSION in (update.format_version, base.format_version)


def assign_row_ids(
    update: AddSnapshotUpdate, base: TableMetadataV3
) -> tuple[AddSnapshotUpdate, int]:
    """``update`` with its snapshot's ``first-row-id`` assigned, and the table's next
    ``next-row-id`` once it is added (the rules above)."""
    snapshot = update.snapshot
    next_row_id = base.next_row_id if base.next_row_id is not None else INITIAL_ROW_ID
    first = snapshot.first_row_id
    if first is None:
        first = next_row_id
    elif first < next_row_id:
        raise CommitConflict(
            f"snapshot {snapshot.snapshot_id}: first-row-id {first} is behind the table's "
            f"next-row-id {next_row_id} (another commit added rows): refresh and retry"
        )
    if snapshot.added_rows is None:
        raise BadRequest(
            f"snapshot {snapshot.snapshot_id} of a format version 3 table needs added-rows "
            "(row lineage)"
        )
    if snapshot.added_rows < 0:
        raise BadRequest(
            f"snapshot {snapshot.snapshot_id}: added-rows must not be negative, "
            f"got {snapshot.added_rows}"
        )
    assigned = snapshot.model_copy(update={"first_row_id": first})
    return update.model_copy(update={"snapshot": assigned}), first + snapshot.added_rows
