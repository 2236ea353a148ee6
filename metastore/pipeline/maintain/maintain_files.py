"""What tables' snapshots reference, read in parallel in Spark tasks with pyiceberg.

The driver gives one row per snapshot: its manifest list, the table it belongs to,
the FileIO properties to read it with, and whether it is live (kept by a table) or
expired (removed by this run). A first stage reads the manifest lists (one task
per group of snapshots) and yields their manifests; the manifests are then read
once each, however many snapshots share them, in a second stage; every entry
becomes a row ``(key, path, kind, live, expired_in)``:

- ``live``: a live snapshot needs the file: a manifest list or manifest of a live
  snapshot, or a data or delete file whose entry in such a manifest is not
  ``DELETED`` (a file a live snapshot only records as deleted is not needed);
- ``expired_in``: the location of the table whose expired snapshot referenced it
  (None for a live snapshot's row).

``references`` is that frame; the candidates for deletion are the keys never live
but expired somewhere (``unneeded``); the whole frame is the reachable set orphan
removal spares.

Clients write these files themselves, so each is read within ``read_limit`` bytes
(``BoundedReads``: a regular file, refused past the bound before it is fetched) and a
file that cannot be read, whatever the reason (past the bound, missing, not Avro, a
storage error), becomes an ``unreadable`` row naming it and the problem rather than
failing the job: before, one table's missing manifest list ended every run, of every
tenant, in a Spark traceback. What an unreadable file of a live snapshot references
is unknown, so the job then deletes nothing (``maintain_job``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from metastore.iceberg.bounded_input import DEFAULT_READ_LIMIT, BoundedReads
from metastore.pipeline.maintain.orphans import path_key

SNAPSHOTS_PER_TASK = 64
REFERENCES_DDL = (
    "key string, path string, kind string, live boolean, expired_in string, problem string"
)
UNREADABLE = "unreadable"  # the kind of a row naming a file that could not be read
MAX_PROBLEM_CHARS = 300


@dataclass(frozen=True, slots=True)
class SnapshotFiles:
    """One snapshot to read: its manifest list and how to read it."""

    manifest_list: str
    table_location: str
    io_properties: str  # JSON: picklable, and the same for every snapshot of a table
    live: bool
    read_limit: int = DEFAULT_READ_LIMIT  # bytes of one manifest list or manifest


def _io(snapshot: SnapshotFiles, what: str) -> Any:
    from pyiceberg.io import load_file_io

    inner = load_file_io(json.loads(snapshot.io_properties), snapshot.table_location)
    return BoundedReads(inner, snapshot.read_limit, what)


def _row(path: str, kind: str, live: bool, expired_in: str | None) -> tuple[Any, ...] | None:
    key = path_key(path)
    return None if key is None else (key, path, kind, live, expired_in, None)


def _unreadable(path: str, live: bool, exc: Exception) -> tuple[Any, ...]:
    """The row of a file that could not be read; kept even when its path is malformed,
    so the driver always learns of it."""
    problem = f"{type(exc).__name__}: {exc}"[:MAX_PROBLEM_CHARS]
    return (path_key(path) or path, path, UNREADABLE, live, None, problem)


def read_lists(snapshots: Iterable[SnapshotFiles]) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """Each snapshot's manifest list row, and ``(manifest path, (manifest, snapshot))``
    for each of its manifests (to be read once per manifest)."""
    from pyiceberg.manifest import read_manifest_list

    # consecutive snapshots of a table share most manifests: each task passes a manifest
    # on once per (live, table), not once per snapshot listing it
    manifests: dict[tuple[str, bool, str], tuple[Any, SnapshotFiles]] = {}
    for snapshot in snapshots:
        expired_in = None if snapshot.live else snapshot.table_location
        row = _row(snapshot.manifest_list, "manifest-list", snapshot.live, expired_in)
        if row is not None:
            yield "", row
        io = _io(snapshot, "manifest list")
        try:
            listed = list(read_manifest_list(io.new_input(snapshot.manifest_list)))
        except Exception as exc:  # the client's file: any failure is reported
            yield "", _unreadable(snapshot.manifest_list, snapshot.live, exc)
            continue
        for manifest in listed:
            key = (manifest.manifest_path, snapshot.live, snapshot.table_location)
            manifests.setdefault(key, (manifest, snapshot))
    for (path, _, _), found in manifests.items():
        yield path, found


def read_manifests(
    groups: Iterable[tuple[str, Iterable[tuple[Any, SnapshotFiles]]]],
) -> Iterator[tuple[Any, ...]]:
    """Rows for one manifest and its entries, read once for all its snapshots."""
    from pyiceberg.manifest import ManifestEntryStatus

    for path, users in groups:
        listed = list(users)
        manifest, first = listed[0]
        live = any(s.live for _, s in listed)
        expired: list[str | None] = [*sorted({s.table_location for _, s in listed if not s.live})]
        for expired_in in expired or [None]:
            row = _row(path, "manifest", live, expired_in)
            if row is not None:
                yield row
        io = _io(first, "manifest")
        try:
            entries = manifest.fetch_manifest_entry(io, discard_deleted=False)
        except Exception as exc:  # the client's file: any failure is reported
            yield _unreadable(path, live, exc)
            continue
        for entry in entries:
            file = entry.data_file
            kind = "data" if file.content.value == 0 else "delete"
            needed = live and entry.status != ManifestEntryStatus.DELETED
            for expired_in in expired or [None]:
                row = _row(file.file_path, kind, needed, expired_in)
                if row is not None:
                    yield row


def references(spark: SparkSession, snapshots: list[SnapshotFiles]) -> DataFrame:
    """Every file the ``snapshots`` reference (``REFERENCES_DDL``)."""
    if not snapshots:
        return spark.createDataFrame([], REFERENCES_DDL)
    context = spark.sparkContext
    # a task per SNAPSHOTS_PER_TASK snapshots, up to a few per core: a Python task
    # costs more to start than a small table's manifests take to read
    slices = max(1, min(-(-len(snapshots) // SNAPSHOTS_PER_TASK), context.defaultParallelism * 4))
    listed = context.parallelize(snapshots, slices).mapPartitions(read_lists).cache()
    lists = listed.filter(lambda item: item[0] == "").map(lambda item: item[1])
    manifests = (
        listed.filter(lambda item: item[0] != "")
        .groupByKey(numPartitions=slices)
        .mapPartitions(read_manifests)
    )
    frame = spark.createDataFrame(lists.union(manifests), REFERENCES_DDL)
    return frame


def unneeded(refs: DataFrame) -> DataFrame:
    """Files an expired snapshot referenced and no live snapshot needs:
    ``(key, path, kind, table_location)``, one row per file and expiring table."""
    needed = refs.groupBy("key").agg(F.max("live").alias("needed"))
    expired = refs.where(F.col("expired_in").isNotNull()).select(
        "key", "path", "kind", F.col("expired_in").alias("table_location")
    )
    return (
        expired.join(needed, on="key")
        .where(~F.col("needed"))
        .drop("needed")
        .dropDuplicates(["key", "table_location"])
    )
