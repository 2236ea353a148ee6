"""``metastore gc``: two-phase garbage collection, leased and resumable.

1. **Mark** (Spark, ``gc_mark_job``): the candidates of every catalog in scope,
   stored as Parquet under ``--out`` with each catalog's ``mark_head``; the mark
   (time, file, per-catalog heads and counts) is recorded in the task's progress.
2. **Grace**: with ``--phase both`` the job waits until ``mark + grace`` (with
   grace 0 it runs straight through), renewing its lease.
3. **Sweep** (``gc_sweep``): the node deletes each catalog's candidates that are
   still unreachable; the job deletes orphaned metadata files; the node also drops
   expired idempotency records and long-expired node leases. Each catalog swept is
   recorded, so a rerun after a crash (its lease expires) sweeps only the rest. A
   ``--phase mark`` run leaves its mark in the finished task's summary, where a later
   ``--phase sweep`` run on the same scope finds it.

The job holds the task lease on its scope for the whole run: a second run on the
same scope refuses with one line (exit 2). ``--dry-run`` marks and asks the node
what a sweep would delete and spare, deleting nothing (no mark is kept to resume).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from pyspark.sql import SparkSession

from metastore.pipeline import exits
from metastore.pipeline.exits import JobError
from metastore.pipeline.gc.gc_lease import Lease, scope_name
from metastore.pipeline.gc.gc_mark import MarkTimes
from metastore.pipeline.gc.gc_mark_job import MarkedCatalog, mark
from metastore.pipeline.gc.gc_sweep import SweepCounts, Sweeper
from metastore.pipeline.node_client import NodeClient
from metastore.pipeline.options import MAX_AGE_S, JobOptions, check_node_url, check_seconds
from metastore.pipeline.progress import Progress
from metastore.pipeline.source_opening import open_source
from metastore.pipeline.spark_session import start

JOB = "gc"
DEFAULT_GRACE_S = 3 * 24 * 3600
DEFAULT_RETENTION_S = 7 * 24 * 3600
PHASES = ("mark", "sweep", "both")


@dataclass(frozen=True, slots=True)
class GcOptions:
    grace_s: float
    retention_s: float
    phase: str
    dry_run: bool
    lease_s: int
    node: str | None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> GcOptions:
        check_seconds("--grace", args.grace, 0, MAX_AGE_S)
        check_seconds("--retention", args.retention, 0, MAX_AGE_S)
        if args.phase not in PHASES:
            raise JobError(f"--phase must be one of {', '.join(PHASES)}")
        if not 1 <= args.lease_seconds <= 86400:
            raise JobError("--lease-seconds must be 1-86400")
        if args.node is not None:
            check_node_url("--node", args.node)
        return cls(
            args.grace, args.retention, args.phase, args.dry_run, args.lease_seconds, args.node
        )


def main(
    args: argparse.Namespace, out: TextIO = sys.stdout, spark: SparkSession | None = None
) -> int:
    """Run ``metastore gc``; ``spark`` is a session to use (else one is started here)."""
    try:
        summary = _run(args, out, spark)
    except JobError as exc:
        print(f"metastore gc: {exc.message}", file=sys.stderr)
        return exits.USAGE
    print(summary.pop("summary"), file=out)
    if args.json:
        print(json.dumps(summary), file=out)
    return exits.OK


def _run(args: argparse.Namespace, out: TextIO, spark: SparkSession | None) -> dict[str, Any]:
    options = JobOptions.from_args(args, JOB)
    gc = GcOptions.from_args(args)
    url = options.where if options.source == "url" else gc.node
    if url is None:
        raise JobError("gc deletes through a node: pass --url, or --node with --kafka/--data-dir")
    node = NodeClient(url, token=options.token, credential=options.credential)
    lease = Lease(node, JOB, scope_name(options.scope.tenant, options.scope.catalog), gc.lease_s)
    started = time.monotonic()
    recorded = lease.acquire()
    try:
        summary = _phases(options, gc, lease, node, recorded, out, spark)
    except BaseException:
        lease.abandon()  # the progress stays; the lease expires; a rerun resumes
        raise
    summary["seconds"] = round(time.monotonic() - started, 3)
    finished = {k: v for k, v in summary.items() if k != "summary"}
    if gc.phase == "mark" and not gc.dry_run:  # a later --phase sweep finds it here
        finished["pending_mark"] = lease.progress["mark"]
    elif gc.dry_run and "pending_mark" in lease.record.get("summary", {}):
        finished["pending_mark"] = lease.record["summary"]["pending_mark"]  # kept for it
    lease.finish(finished)
    return summary


def _phases(
    options: JobOptions,
    gc: GcOptions,
    lease: Lease,
    node: NodeClient,
    recorded: dict[str, Any],
    out: TextIO,
    spark: SparkSession | None,
) -> dict[str, Any]:
    mark_state: dict[str, Any] | None = recorded.get("mark")
    if mark_state is None and gc.phase == "sweep":  # the mark of a --phase mark run
        mark_state = lease.record.get("summary", {}).get("pending_mark")
    resumed = mark_state is not None and gc.phase != "mark" and not gc.dry_run
    if resumed:
        assert mark_state is not None
        _check_own_mark(mark_state, options.out)
        if not Path(mark_state["file"]).exists():
            resumed, mark_state = False, None
    if not resumed and gc.phase == "sweep":
        raise JobError("no mark to sweep in this scope: run --phase mark (or both) first")
    if not resumed:
        mark_state = _mark(options, gc, node, out, spark)
        if not gc.dry_run:
            lease.save({"mark": mark_state, "swept": 0, "counts": {}})
    assert mark_state is not None
    marked = json.loads(Path(mark_state["file"]).read_text())
    catalogs = [MarkedCatalog.from_json(c) for c in marked["catalogs"]]
    summary: dict[str, Any] = {
        "marked": mark_state["marked"],
        "candidates": mark_state["candidates"],
        "candidate_files": sum(len(c.files) for c in catalogs),
        "reachable": sum(c.reachable for c in catalogs),
        "catalogs": len(catalogs),
        "mark_us": mark_state["mark_us"],
        "mark_objects_per_s": mark_state["objects_per_s"],
        "candidates_file": mark_state["path"],
        "resumed": resumed,
        "dry_run": gc.dry_run,
    }
    totals = SweepCounts()
    if gc.phase != "mark":
        if not gc.dry_run:
            _wait_grace(mark_state["mark_us"], gc, lease, options.progress)
        totals = _sweep(gc, lease, node, mark_state, catalogs, options.progress)
    summary.update(totals.to_json())
    summary["summary"] = _render(summary, gc)
    return summary


_MARK_DIR = re.compile(r"mark-[0-9]{1,20}")


def _check_own_mark(mark_state: dict[str, Any], out: Path) -> None:
    """A mark to resume from is one a run of this job wrote under ``--out``: the task
    record that names it is the node's, and a record naming a file elsewhere (any
    service admin may write one) made the sweep delete whatever that file listed."""
    own = out.resolve()
    for key, name in (("file", "mark.json"), ("path", "candidates.parquet")):
        raw = mark_state.get(key)
        path = Path(raw).resolve() if isinstance(raw, str) else None
        if (
            path is None
            or path.name != name
            or path.parent.parent != own
            or _MARK_DIR.fullmatch(path.parent.name) is None
        ):
            raise JobError(
                f"the task's recorded mark {str(raw)[:200]!r} is not one this job wrote "
                f"under --out {str(out)!r}: not resumed (run with that --out, or --phase "
                "mark again)"
            )


def _mark(
    options: JobOptions, gc: GcOptions, node: NodeClient, out: TextIO, spark: SparkSession | None
) -> dict[str, Any]:
    mark_us = time.time_ns() // 1000  # before the source is read: see gc_mark
    times = MarkTimes(mark_us, int(gc.grace_s * 1e6), int(gc.retention_s * 1e6))
    source = open_source(options, node if options.source == "url" else None)
    path = (options.out / f"mark-{mark_us}" / "candidates.parquet").resolve()
    try:
        source.check(options.scope)
        log = options.claim_out() / "spark.log"
        session = spark or start(options.master, "metastore gc", log)
        try:
            progress = Progress(session.sparkContext, "gc mark", enabled=options.progress)
            catalogs = mark(session, source, options.scope, times, path, progress)
            done = progress.summary()
        finally:
            if spark is None:
                session.stop()
    finally:
        source.close()
    file = path.parent / "mark.json"
    state: dict[str, Any] = {
        "mark_us": mark_us,
        "grace_s": gc.grace_s,
        "retention_s": gc.retention_s,
        "path": str(path),
        "file": str(file),
        "marked": sum(c.objects for c in catalogs),
        "candidates": sum(c.candidates for c in catalogs),
        "objects_per_s": round(done.throughput, 1),
    }
    # the task's progress stays small: the catalogs' heads and files are in mark.json
    body = {**state, "catalogs": [c.to_json() for c in catalogs]}
    file.write_text(json.dumps(body, indent=2) + "\n")
    if gc.dry_run:
        for catalog in catalogs:
            for orphan in catalog.files:
                print(f"would delete {orphan['path']}", file=out)
    return state


def _wait_grace(mark_us: int, gc: GcOptions, lease: Lease, show: bool) -> None:
    """Until ``mark + grace`` (the lease thread renews meanwhile)."""
    until_s = mark_us / 1e6 + gc.grace_s
    remaining = until_s - time.time()
    if remaining > 0 and show:
        print(f"gc: waiting {remaining:,.0f} s for the grace period to end", file=sys.stderr)
    while (remaining := until_s - time.time()) > 0:
        lease.check()
        time.sleep(min(remaining, 5.0))


def _sweep(
    gc: GcOptions,
    lease: Lease,
    node: NodeClient,
    mark_state: dict[str, Any],
    catalogs: list[MarkedCatalog],
    show: bool,
) -> SweepCounts:
    """Catalog after catalog in the mark's order; the progress records how many are
    done and the counts so far, so a rerun starts at the first catalog not done."""
    path = Path(mark_state["path"])
    sweeper = Sweeper(node, dry_run=gc.dry_run, show=show)
    swept = 0 if gc.dry_run else int(lease.progress.get("swept") or 0)
    if swept:
        sweeper.total.add(SweepCounts.from_json(lease.progress.get("counts") or {}))
    for position, catalog in enumerate(catalogs):
        if position < swept:
            continue
        lease.check()
        if catalog.mark_head:  # no main: the catalog was dropped; nothing sweeps it
            sweeper.catalog(path, catalog.tenant, catalog.catalog, catalog.mark_head)
        sweeper.files(catalog.files)
        if not gc.dry_run:
            progress = {"mark": mark_state, "swept": position + 1}
            lease.save({**progress, "counts": sweeper.total.to_json()})
    sweeper.leases()
    return sweeper.total


def _render(summary: dict[str, Any], gc: GcOptions) -> str:
    line = (
        f"gc: marked {summary['marked']:,} objects in {summary['catalogs']} catalogs "
        f"({summary['mark_objects_per_s']:,.0f} objects/s), {summary['candidates']:,} candidates, "
        f"{summary['candidate_files']} orphaned metadata files"
    )
    if gc.phase == "mark":
        return line + f"; mark stored in {summary['candidates_file']}"
    if gc.dry_run:
        return line + (
            f"; dry run: would delete {summary['would_delete']:,} objects "
            f"({summary['spared']:,} spared) and {summary['candidate_files']} files"
        )
    return line + (
        f"; deleted {summary['deleted']:,} objects ({summary['spared']:,} spared), "
        f"{summary['files_deleted']} files, {summary['expired']} idempotency records, "
        f"{summary['collected']} dropped tables and views collected"
    )
