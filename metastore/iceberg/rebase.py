"""Server-side append rebase: a stale append committed on top of the branch's new head.

Many writers appending to one table all read the same head, and all but one
lose the ``assert-ref-snapshot-id`` race; each loser refreshes, rewrites its
manifest list and retries, and under steady load some give up. An append
needs none of that: its new data files do not depend on the files that other
appends added meanwhile. A table (or its catalog, as the default for its
tables) that sets ``metastore.commit.rebase-appends=true`` lets the server do
the retry itself, in the commit, instead of answering 409:

- the commit adds one snapshot whose operation is ``append`` and points one
  branch at it (``add-snapshot`` + ``set-snapshot-ref``, nothing else: a schema,
  spec, sort order or properties change in the same commit is still a 409);
- its only failed requirement is that branch's ``assert-ref-snapshot-id``, and
  the snapshot the client expected is an ancestor of the branch's head (or the
  client expected no branch yet);
- every snapshot added to the branch since is an ``append`` too (an
  ``overwrite``, ``delete`` or ``replace`` in between may have removed files the
  client's snapshot still lists: 409), and the table's current schema is the one
  the client wrote with;
- the client's manifest list is the expected snapshot's manifests plus its own
  new ones, and its own hold added data files only (no existing or deleted
  entries, which a merging writer rewrites from the old head).

The rebased snapshot keeps its id (its manifest entries carry it) and gets the
head as parent, the table's next sequence number, totals recomputed from the
head's summary plus its own ``added-*`` counts (pyiceberg's
``update_snapshot_summaries``) and a new manifest list: its own manifests, then
the head's, written inside the table's location (``manifest_list_files``: for a
version 2 table with pyiceberg's Avro writer, the head's records as encoded when
its list was written; otherwise with pyiceberg's ``write_manifest_list``). Its own
manifests take the commit's sequence number (so do their entries, which inherit
it), as the spec wants for manifests a commit adds.

Version 3 tables are not rebased: their manifest lists carry each manifest's
first row id, which pyiceberg's manifest list reader drops and its writers
cannot write, so a rewritten list would lose the head's row lineage.

Reading and writing the lists is blocking: ``rebase`` runs in the commit's
worker thread, never on the event loop. Lists read, and the list each rebase
writes (the branch's next head), are kept for the next rebase
(``manifest_lists``): racing appenders mostly share their parent, and each
rebase builds on the list the one before it wrote. A commit waiting for its turn
behind others on the same table reads its own list meanwhile (``warm``), so the
rebase in its turn finds every list it needs already read.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from copy import copy
from dataclasses import dataclass

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.io import FileIO
from pyiceberg.manifest import UNASSIGNED_SEQ, ManifestContent, ManifestFile
from pyiceberg.table import TableProperties
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot, Summary, update_snapshot_summaries
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertRefSnapshotId,
    SetSnapshotRefUpdate,
    TableRequirement,
    TableUpdate,
)

from metastore.errors import BadRequest, CommitConflict, MetastoreError
from metastore.iceberg import manifest_list_files
from metastore.iceberg.manifest_lists import ManifestLists
from metastore.iceberg.table_paths import check_paths

REBASE_APPENDS = "metastore.commit.rebase-appends"  # table property, and catalog default
ROW_LINEAGE_VERSION = 3
_TOTALS = "total-"


def check_setting(properties: Mapping[str, str], before: Mapping[str, str] | None = None) -> None:
    """400 unless the rebase setting, when ``properties`` set it (to something other than
    it was ``before``), is ``true`` or ``false``."""
    value = properties.get(REBASE_APPENDS)
    if before is not None and value == before.get(REBASE_APPENDS):
        return
    if value is not None and value not in ("true", "false"):
        raise BadRequest(f"{REBASE_APPENDS} must be 'true' or 'false', got {value!r}")


def enabled(table: Mapping[str, str], catalog: Mapping[str, str]) -> bool:
    """The table's setting, else its catalog's; off unless one says ``true``."""
    value = table.get(REBASE_APPENDS, catalog.get(REBASE_APPENDS))
    return value == "true"


@dataclass(frozen=True, slots=True)
class Plan:
    """A stale append that may be rebased: what it adds, and where the branch is now."""

    snapshot: Snapshot
    ref: SetSnapshotRefUpdate
    expected: int | None  # the head the client wrote against (None: no branch yet)
    head: Snapshot
    between: tuple[Snapshot, ...]  # added to the branch since ``expected``, newest first


class Refused(CommitConflict):
    """Why a stale commit is not rebased: still the conflict it was (409), with the reason."""


def failed_requirements(
    requirements: Sequence[TableRequirement], base: TableMetadata
) -> list[tuple[TableRequirement, CommitFailedException]]:
    """Every requirement ``base`` fails, with pyiceberg's reason."""
    failed = []
    for requirement in requirements:
        try:
            requirement.validate(base)
        except CommitFailedException as exc:
            failed.append((requirement, exc))
    return failed


def plan(
    requirements: Sequence[TableRequirement],
    updates: Sequence[TableUpdate],
    base: TableMetadata,
) -> Plan:
    """The rebase of a commit whose requirements ``base`` fails, if it is a stale append
    (the rules above, except the manifest checks ``rebase`` makes); ``Refused`` if not."""
    if base.format_version >= ROW_LINEAGE_VERSION:
        raise Refused("version 3 tables are not rebased (row lineage in manifest lists)")
    snapshot, ref = _append_of(updates)
    failed = failed_requirements(requirements, base)
    stale = [r for r, _ in failed if isinstance(r, AssertRefSnapshotId) and r.ref == ref.ref_name]
    if len(failed) != 1 or len(stale) != 1:
        raise Refused("a requirement other than the branch's snapshot failed")
    assert isinstance(stale[0], AssertRefSnapshotId)
    expected = stale[0].snapshot_id
    if snapshot.parent_snapshot_id != expected:
        raise Refused("the snapshot's parent is not the snapshot the commit expected")
    if any(s.snapshot_id == snapshot.snapshot_id for s in base.snapshots):
        raise Refused(f"snapshot id {snapshot.snapshot_id} exists already")
    current = base.refs.get(ref.ref_name)
    if current is None or current.snapshot_ref_type != SnapshotRefType.BRANCH:
        raise Refused(f"{ref.ref_name} is not a branch of the table")
    head = base.snapshot_by_id(current.snapshot_id)
    if head is None:
        raise Refused(f"the head of {ref.ref_name} is not in the table's snapshots")
    if snapshot.schema_id is None:  # a schema change since could not be told
        raise Refused("the snapshot names no schema-id: whether the schema changed is unknown")
    if snapshot.schema_id != base.current_schema_id:
        raise Refused("the table's schema changed since the snapshot was written")
    between = _since(base, head, expected)
    for other in between:
        operation = other.summary.operation if other.summary is not None else None
        if operation != Operation.APPEND:
            name = operation.value if operation is not None else "unknown"
            raise Refused(f"snapshot {other.snapshot_id} ({name}) was committed since")
    return Plan(snapshot, ref, expected, head, between)


def _append_of(updates: Sequence[TableUpdate]) -> tuple[Snapshot, SetSnapshotRefUpdate]:
    """The snapshot an append-only commit adds and the branch update that points at it."""
    adds = [u for u in updates if isinstance(u, AddSnapshotUpdate)]
    refs = [u for u in updates if isinstance(u, SetSnapshotRefUpdate)]
    if len(updates) != 2 or len(adds) != 1 or len(refs) != 1:
        raise Refused("the commit does more than add one snapshot to a branch")
    snapshot, ref = adds[0].snapshot, refs[0]
    if ref.type != SnapshotRefType.BRANCH or ref.snapshot_id != snapshot.snapshot_id:
        raise Refused("the commit does not point a branch at its new snapshot")
    if snapshot.summary is None or snapshot.summary.operation != Operation.APPEND:
        raise Refused("the commit's snapshot is not an append")
    return snapshot, ref


def _since(base: TableMetadata, head: Snapshot, expected: int | None) -> tuple[Snapshot, ...]:
    """The branch's snapshots after ``expected`` up to ``head``, newest first; ``Refused``
    if ``expected`` is not an ancestor of ``head`` (or a snapshot in between is gone)."""
    between = [head]
    while (parent := between[-1].parent_snapshot_id) != expected:
        if parent is None or len(between) > len(base.snapshots):  # (a registered cycle)
            raise Refused(f"snapshot {expected} is not an ancestor of the branch's head")
        snapshot = base.snapshot_by_id(parent)
        if snapshot is None:
            raise Refused(f"snapshot {parent} of the branch's history is no longer in the table")
        between.append(snapshot)
    return tuple(between)


def rebase(
    planned: Plan, base: TableMetadata, io: FileIO, location: str, lists: ManifestLists
) -> Snapshot:
    """Write the rebased manifest list to ``location`` and return the rebased snapshot
    (blocking). ``location`` must be new and inside the table; the caller deletes it
    if the commit then fails. ``Refused`` if the client's manifest list is not a plain
    append's; 400 if it lies outside the table's location or cannot be read."""
    snapshot, head = planned.snapshot, planned.head
    check_paths([("manifest list", snapshot.manifest_list)], base.location)
    listed = lists.read(io, snapshot.manifest_list)
    own = [m for m in listed if m.added_snapshot_id == snapshot.snapshot_id]
    inherited = {m.manifest_path for m in listed if m.added_snapshot_id != snapshot.snapshot_id}
    expected = base.snapshot_by_id(planned.expected) if planned.expected is not None else None
    if not inherited <= {m.manifest_path for m in _manifests(lists, io, expected)}:
        raise Refused("the snapshot lists manifests its parent did not have")
    spec_ids = {spec.spec_id for spec in base.partition_specs}
    for manifest in own:
        _check_own(manifest, spec_ids)
    sequence_number = base.next_sequence_number()
    codec = base.properties.get(
        TableProperties.WRITE_AVRO_COMPRESSION, TableProperties.WRITE_AVRO_COMPRESSION_DEFAULT
    )
    written = manifest_list_files.write(
        io.new_output(location),
        base.format_version,
        snapshot.snapshot_id,
        head.snapshot_id,
        sequence_number,
        codec,  # type: ignore[arg-type]  # a table property: text
        [_unassigned(m) for m in own],
        lists.listed(io, head.manifest_list),
    )
    if written is not None:  # the next rebase's head, most likely
        lists.put(location, written)
    return snapshot.model_copy(
        update={
            "parent_snapshot_id": head.snapshot_id,
            "sequence_number": sequence_number,
            "manifest_list": location,
            "summary": _summary(snapshot, head),
            # never before the commits it lands after (the snapshot log stays in order)
            "timestamp_ms": max(snapshot.timestamp_ms, base.last_updated_ms),
        }
    )


def manifest_list_location(planned: Plan, table_location: str) -> str:
    """Where the rebased manifest list goes: a new file next to the client's, both
    inside the table's location (400 otherwise, before anything is read or written)."""
    client = planned.snapshot.manifest_list
    name = f"snap-{planned.snapshot.snapshot_id}-rebased-{uuid.uuid4()}.avro"
    location = f"{client.rsplit('/', 1)[0]}/{name}"
    check_paths([("manifest list", client), ("rebased manifest list", location)], table_location)
    return location


def rebased_commit(
    requirements: Sequence[TableRequirement],
    updates: Sequence[TableUpdate],
    base: TableMetadata,
    io: Callable[[str], FileIO],
    written: list[str],
    lists: ManifestLists,
    *,
    durable: Callable[[str], None],
) -> tuple[tuple[TableRequirement, ...], tuple[TableUpdate, ...]]:
    """A stale append's requirements and updates rebased on ``base`` (blocking): its
    snapshot on the branch's head, its branch requirement the head. The new manifest
    list's location is added to ``written`` before it is written (the caller deletes
    what ``written`` names when the commit fails), and handed to ``durable`` once it is
    written, before the commit can name it (``TableFiles.make_durable``). ``Refused`` if
    it is no such append."""
    planned = plan(requirements, updates, base)
    location = manifest_list_location(planned, base.location)
    written.append(location)
    snapshot = rebase(planned, base, io(location), location, lists)
    durable(location)
    branch = planned.ref.ref_name
    kept = [r for r in requirements if not (isinstance(r, AssertRefSnapshotId) and r.ref == branch)]
    head = AssertRefSnapshotId.model_validate(
        {"ref": branch, "snapshot-id": planned.head.snapshot_id}
    )
    return (*kept, head), (AddSnapshotUpdate(snapshot=snapshot), planned.ref)


def is_append(updates: Sequence[TableUpdate]) -> bool:
    """Whether a commit of ``updates`` is an append that could be rebased (its shape
    only: one ``append`` snapshot and the branch update that points at it)."""
    try:
        _append_of(updates)
    except Refused:
        return False
    return True


def warm(
    updates: Sequence[TableUpdate],
    table_location: str,
    io: Callable[[str], FileIO],
    lists: ManifestLists,
) -> None:
    """Read the manifest list of an append that may turn out to be stale into ``lists``
    (blocking), while it waits for its turn: the rebase in its turn then finds it read.
    Best effort: anything wrong with the commit or its list is found, and answered, by
    ``plan`` and ``rebase`` later. A list outside the table's location is never read."""
    try:
        snapshot, _ = _append_of(updates)
        check_paths([("manifest list", snapshot.manifest_list)], table_location)
        lists.read(io(snapshot.manifest_list), snapshot.manifest_list)
    except MetastoreError:
        return


def _manifests(lists: ManifestLists, io: FileIO, snapshot: Snapshot | None) -> list[ManifestFile]:
    return list(lists.read(io, snapshot.manifest_list)) if snapshot is not None else []


def _check_own(manifest: ManifestFile, spec_ids: set[int]) -> None:
    """The snapshot's own manifest holds added data files only, with inherited sequence
    numbers, in one of the table's partition specs."""
    if manifest.content != ManifestContent.DATA:
        raise Refused(f"manifest {manifest.manifest_path} holds delete files")
    if manifest.existing_files_count != 0 or manifest.deleted_files_count != 0:
        raise Refused(f"manifest {manifest.manifest_path} rewrites existing files")
    if manifest.min_sequence_number != manifest.sequence_number:
        raise Refused(f"manifest {manifest.manifest_path} has entries with their own sequence")
    if manifest.partition_spec_id not in spec_ids:
        raise Refused(f"manifest {manifest.manifest_path} has an unknown partition spec")


def _unassigned(listed: ManifestFile) -> ManifestFile:
    """A manifest this commit adds, with its sequence numbers left to the writer (a
    copy: the one read stays as it was, in ``ManifestLists``)."""
    manifest = copy(listed)
    manifest.sequence_number = UNASSIGNED_SEQ
    manifest.min_sequence_number = UNASSIGNED_SEQ
    return manifest


def _summary(snapshot: Snapshot, head: Snapshot) -> Summary:
    """The snapshot's own summary with its totals counted from the head's (a total the
    head's summary lacks stays unknown, rather than counted from zero)."""
    assert snapshot.summary is not None
    own = snapshot.summary.additional_properties
    kept = {k: v for k, v in own.items() if not k.startswith(_TOTALS)}
    previous = dict(head.summary.additional_properties) if head.summary is not None else {}
    previous["operation"] = "append"  # never empty: pyiceberg counts from zero then
    return update_snapshot_summaries(Summary(Operation.APPEND, **kept), previous)
