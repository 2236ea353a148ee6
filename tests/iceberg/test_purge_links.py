"""A purge deletes only what is still its table's own when it deletes it.

A purge queues a table's files as it reads them and deletes them once it has read
every manifest, which a table's owner can make take seconds. A folder inside the
table's location, swapped meanwhile for a link to another table's folder, sent the
deletions of the files queued under it there: another table's manifest list and
metadata were deleted by the purge of a table whose owner could not write them.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.types import LongType, NestedField

from metastore.iceberg.purge import Purge

SCHEMA = Schema(NestedField(1, "x", LongType(), required=False))


def test_a_folder_swapped_for_a_link_while_a_purge_reads_keeps_the_other_tables_files(
    tmp_path: Path,
) -> None:
    own = tmp_path / "wh" / "att" / "a"
    victim = tmp_path / "wh" / "vic" / "v" / "metadata"
    victim.mkdir(parents=True)
    (victim / "snap-1.avro").write_bytes(b"the victim's manifest list")
    (own / "x").mkdir(parents=True)
    (own / "x" / "snap-1.avro").write_bytes(b"the purged table's own")
    metadata = new_table_metadata(
        SCHEMA, UNPARTITIONED_PARTITION_SPEC, UNSORTED_SORT_ORDER, own.as_uri(), {}
    )
    now = int(time.time() * 1000)
    snapshots = [
        Snapshot(
            snapshot_id=n,
            sequence_number=n,
            timestamp_ms=now,
            manifest_list=f"{own.as_uri()}/x/snap-{n}.avro",
            summary=Summary(Operation.APPEND),
            schema_id=0,
        )
        for n in (1, 2)
    ]
    metadata = metadata.model_copy(update={"snapshots": snapshots})
    swapped: list[str] = []

    def io(path: str) -> FileIO:
        """The owner's move, made while the purge reads the second snapshot's list: the
        first list is queued by then, under a folder that now leads to the victim's."""
        if path.endswith("snap-2.avro") and not swapped:
            shutil.rmtree(own / "x")
            os.symlink(victim, own / "x")
            swapped.append(path)
        return PyArrowFileIO()

    report = Purge(metadata, None, (), io).run()
    assert swapped, "the purge never read the second snapshot's list"
    assert (victim / "snap-1.avro").read_bytes() == b"the victim's manifest list"
    assert report.deleted == 0 and report.kept >= 1, report
