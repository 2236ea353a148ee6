"""``metastore maintain``: Iceberg table maintenance by the catalog, in three phases.

1. **Expire snapshots** of every table in scope by its retention policy
   (``maintain_policy``), each a table commit through the node's Iceberg REST API
   (``maintain_commit``): never over a concurrent append.
2. **Delete the files no snapshot needs any more**: manifest lists, manifests, data
   and delete files of the expired snapshots that no live snapshot of any table of
   the store references (``maintain_files``: manifests read in Spark tasks).
3. **Remove orphan files**: files below a table's location, older than
   ``--older-than``, that nothing references: every snapshot's manifest list,
   manifests and data/delete files, every metadata file of the metadata log and
   every statistics file, of every table, and the metadata file of every table
   version the store still keeps (the history may name it; garbage collection
   removes those once their versions are collected) (``orphans``).

Every deletion is contained in its table's location and logged to
``<out>/maintain-log.jsonl`` (one JSON object per expiry and per file, with its
outcome). With ``--dry-run`` nothing is committed or deleted; the counts are what
a run would expire and delete.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from metastore.iceberg.bounded_input import DEFAULT_READ_LIMIT
from metastore.model.locations import linked_below
from metastore.pipeline.exits import JobError
from metastore.pipeline.maintain.maintain_commit import Expired, IcebergClient, Loaded, expire
from metastore.pipeline.maintain.maintain_delete import LINKED, Outcome, delete
from metastore.pipeline.maintain.maintain_files import (
    UNREADABLE,
    SnapshotFiles,
    references,
    unneeded,
)
from metastore.pipeline.maintain.maintain_lease import Lease
from metastore.pipeline.maintain.maintain_tables import TableState, tables_partition
from metastore.pipeline.maintain.orphans import Root, listing, orphans, reachable_frame
from metastore.pipeline.options import Scope
from metastore.pipeline.progress import Progress
from metastore.pipeline.source import Source


@dataclass(frozen=True, slots=True)
class Settings:
    dry_run: bool
    older_than_s: float
    read_limit: int = DEFAULT_READ_LIMIT  # bytes of one client-written manifest (list)


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A manifest list or manifest the run could not read, and whether a live snapshot
    needs it (then nothing is known to be unneeded, so nothing is deleted)."""

    path: str
    live: bool
    problem: str


def same_table(loaded: Mapping[str, Any], read: Mapping[str, Any]) -> bool:
    """Whether a table loaded by name now is the one the store's rows held: the same
    ``table-uuid`` (a table made again under a dropped one's name has its own)."""
    return loaded.get("table-uuid") == read.get("table-uuid")


def metadata_files(metadata: dict[str, Any] | Any, location: str | None) -> Iterable[str]:
    """The files a table's metadata names outside its snapshots: its metadata file, the
    metadata log's files and the statistics files."""
    if location:
        yield location
    for entry in metadata.get("metadata-log") or []:
        yield entry["metadata-file"]
    for key in ("statistics", "partition-statistics"):
        for entry in metadata.get(key) or []:
            yield entry["statistics-path"]


def snapshot_files(
    metadata: dict[str, Any] | Any,
    io: str,
    limit: int,
    *,
    live: bool,
    only: set[int] | None = None,
) -> Iterable[SnapshotFiles]:
    for snapshot in metadata.get("snapshots") or []:
        if only is not None and int(snapshot["snapshot-id"]) not in only:
            continue
        if snapshot.get("manifest-list"):
            yield SnapshotFiles(snapshot["manifest-list"], metadata["location"], io, live, limit)


def run(
    spark: SparkSession,
    source: Source,
    scope: Scope,
    out: Path,
    progress: Progress,
    client: IcebergClient,
    settings: Settings,
    lease: Lease,
    err: TextIO | None = None,
) -> dict[str, Any]:
    err = err or sys.stderr  # the stream of the moment, not of the import
    started = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    with progress:
        read: list[TableState | str] = (
            source.rows(spark, Scope(), progress).mapPartitions(tables_partition).collect()
        )
    tables = [t for t in read if isinstance(t, TableState)]
    stored = [t for t in read if isinstance(t, str)]  # metadata files of stored versions
    mine = [t for t in tables if scope.covers(t.name.tenant, t.name.catalog) and not t.dropped]

    # 1. expiry, table by table, through the node
    expired: list[Expired] = []
    for table in mine:
        expired.append(expire(client, table.name, table.defaults, dry_run=settings.dry_run))
    lease.record(phase="expired", tables=len(mine))
    fresh: dict[str, Loaded] = {}
    for table in mine:
        loaded = client.load(table.name)
        # the name may hold another table by now (this one dropped, kept and made again
        # at its location): its snapshots are not this one's, which stays as read, live
        if loaded is not None and same_table(loaded.metadata, table.metadata):
            fresh[table.name.display()] = loaded

    # 2. the files of expired snapshots nothing needs
    limit = settings.read_limit
    snapshots: list[SnapshotFiles] = []
    named: list[str] = stored  # + metadata-log and statistics files of every table
    io_by_location: dict[str, str] = {}
    expiring = {e.table.display(): set(e.expiry.snapshot_ids) for e in expired}
    for table in tables:
        io_by_location[table.location] = table.io_properties
        named.extend(metadata_files(table.metadata, table.metadata_location))
        loaded = None if table.dropped else fresh.get(table.name.display())
        if loaded is None:  # a dropped one kept for its retention: all its files are live
            snapshots.extend(snapshot_files(table.metadata, table.io_properties, limit, live=True))
            continue
        io_by_location[loaded.metadata["location"]] = table.io_properties
        named.extend(metadata_files(loaded.metadata, loaded.metadata_location))
        gone = expiring.get(table.name.display(), set())  # still there in a dry run
        live = {int(s["snapshot-id"]) for s in loaded.metadata.get("snapshots") or []} - gone
        snapshots.extend(
            snapshot_files(loaded.metadata, table.io_properties, limit, live=True, only=live)
        )
    for result in expired:
        if result.expiry.snapshot_ids:
            state = next(t for t in mine if t.name == result.table)
            only = set(result.expiry.snapshot_ids)
            snapshots.extend(
                snapshot_files(result.before, state.io_properties, limit, live=False, only=only)
            )
            named.extend(metadata_files(result.before, None))
    # written out before anything is deleted: a recomputation would read deleted files
    references(spark, snapshots).write.mode("overwrite").parquet(str(out / "references"))
    refs = spark.read.parquet(str(out / "references"))
    unreadable = [
        Unreadable(row["path"], row["live"], row["problem"])
        for row in refs.where(F.col("kind") == UNREADABLE)
        .select("path", "live", "problem")
        .distinct()
        .orderBy("path")
        .collect()
    ]
    blocked = any(u.live for u in unreadable)
    # a location that is (now) a link's is another folder: nothing below it is deleted
    roots_of = {t.location: t.storage_roots for t in tables}
    for table in mine:
        loaded = fresh.get(table.name.display())
        if loaded is not None:  # as the node answers it now
            roots_of[loaded.metadata["location"]] = table.storage_roots
    linked = frozenset(loc for loc, roots in roots_of.items() if linked_below(loc, roots))
    for location in sorted(linked):
        print(f"maintain: not deleting below {location}: {LINKED}", file=err)
    check_lease(lease)
    outcomes = [] if blocked else delete(unneeded(refs), io_by_location, settings.dry_run, linked)
    lease.record(phase="files", files=len(outcomes))

    # 3. orphans below the tables' locations
    roots = sorted({loaded.metadata["location"] for loaded in fresh.values()} - linked)
    cutoff_ms = int((time.time() - settings.older_than_s) * 1000)
    listed = listing(
        spark, [Root(r, json.loads(io_by_location.get(r, "{}"))) for r in roots], cutoff_ms
    ).cache()
    reachable = refs.select("key").union(reachable_frame(spark, named))
    found = orphans(listed, reachable).select(
        "path", F.lit("orphan").alias("kind"), F.col("root").alias("table_location")
    )
    examined = refs.select("key").distinct().count() + listed.count()
    check_lease(lease)
    orphan_outcomes = [] if blocked else delete(found, io_by_location, settings.dry_run)
    listed.unpersist()
    seconds = time.monotonic() - started
    log = write_log(out, expired, outcomes + orphan_outcomes)
    for outcome in outcomes + orphan_outcomes:
        if outcome.outcome in ("outside", "failed"):
            print(f"maintain: {outcome.outcome}: {outcome.path} ({outcome.detail})", file=err)
    for u in unreadable:
        needs = "a live snapshot needs it" if u.live else "an expired snapshot's"
        print(f"maintain: unreadable: {u.path} ({needs}): {u.problem}", file=err)
    if blocked:
        print(
            "maintain: no file was deleted: what an unreadable file of a live snapshot "
            "references is unknown, so no file is known to be unneeded",
            file=err,
        )
    done = "would-delete" if settings.dry_run else "deleted"
    files = Counter(o.outcome for o in outcomes)
    orphaned = Counter(o.outcome for o in orphan_outcomes)
    summary = {
        "dry_run": settings.dry_run,
        "tables": len(mine),
        "snapshots_expired": sum(len(e.expiry.snapshot_ids) for e in expired),
        "refs_expired": sum(len(e.expiry.refs) for e in expired),
        "files_deleted": files[done],
        "orphans_deleted": orphaned[done],
        "outside_skipped": files["outside"] + orphaned["outside"],
        "failed": files["failed"] + orphaned["failed"],
        "unreadable": len(unreadable),
        "deletion_blocked": blocked,
        "files_examined": examined,
        "seconds": round(seconds, 3),
        "files_per_s": round(examined / seconds, 1) if seconds > 0 else 0.0,
        "log": str(log.resolve()),
    }
    verb = "would expire" if settings.dry_run else "expired"
    summary["summary"] = (
        f"maintain of {len(mine)} tables: {verb} {summary['snapshots_expired']} snapshots, "
        f"{done} {summary['files_deleted']} files and {summary['orphans_deleted']} orphans "
        f"({examined:,} files examined in {seconds:.1f} s, {summary['files_per_s']:,.0f} files/s)"
    )
    return summary


def check_lease(lease: Lease) -> None:
    if lease.lost:
        raise JobError("the task lease was lost to another run; nothing more is deleted")


def write_log(out: Path, expired: list[Expired], outcomes: list[Outcome]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "maintain-log.jsonl"
    with path.open("w") as log:
        for result in expired:
            if result.expiry:
                entry = {
                    "table": result.table.display(),
                    "snapshots-expired": [str(s) for s in result.expiry.snapshot_ids],
                    "refs-expired": list(result.expiry.refs),
                    "attempts": result.attempts,
                }
                log.write(json.dumps(entry) + "\n")
        for outcome in outcomes:
            log.write(json.dumps(outcome.to_json()) + "\n")
    return path
