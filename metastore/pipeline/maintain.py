"""Running ``metastore maintain`` (parser: ``commands``; the work: ``maintain_job``).

Maintenance commits through a node, so it takes ``--url`` (the node whose store it
reads from a checkpoint and whose Iceberg REST API it commits expiries to). The
driver opens and checks the source before it starts Spark, takes the scope's task
lease, and gives it back with the summary. Exit status 0, 1 when a path was
skipped as outside its table or a deletion failed, 2 for bad input or an
unreachable node (or another run holding the lease).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from pyspark.sql import SparkSession

from metastore.pipeline import exits, maintain_job
from metastore.pipeline.exits import JobError
from metastore.pipeline.maintain_commit import IcebergClient
from metastore.pipeline.maintain_lease import Lease
from metastore.pipeline.node import NodeClient
from metastore.pipeline.options import MAX_AGE_S, JobOptions, check_seconds
from metastore.pipeline.progress import Progress
from metastore.pipeline.session import start
from metastore.pipeline.sources import open_source


def run(
    args: argparse.Namespace, out: TextIO = sys.stdout, spark: SparkSession | None = None
) -> int:
    try:
        return _run(args, out, spark)
    except JobError as exc:
        print(f"metastore maintain: {exc.message}", file=sys.stderr)
        return exits.USAGE


def _run(args: argparse.Namespace, out: TextIO, spark: SparkSession | None) -> int:
    options = JobOptions.from_args(args, "maintain")
    if options.source != "url":
        raise JobError("maintain commits through a node: give --url")
    check_seconds("--older-than", args.older_than, 0, MAX_AGE_S)
    settings = maintain_job.Settings(dry_run=args.dry_run, older_than_s=args.older_than)
    node = NodeClient(options.where, token=options.token, credential=options.credential)
    source = open_source(options, node)
    try:
        source.check(options.scope)
        with Lease(node, options.scope) as lease:
            log = options.claim_out() / "spark.log"
            session = spark or start(options.master, "metastore maintain", log)
            try:
                progress = Progress(session.sparkContext, "maintain", enabled=options.progress)
                summary = maintain_job.run(
                    session,
                    source,
                    options.scope,
                    options.out,
                    progress,
                    IcebergClient(node),
                    settings,
                    lease,
                )
            finally:
                if spark is None:
                    session.stop()
            lease.finish({k: v for k, v in summary.items() if k not in ("summary", "log")})
    finally:
        source.close()
    _print(summary, out)
    if options.json:
        print(json.dumps({k: v for k, v in summary.items() if k != "summary"}), file=out)
    return exits.FOUND if summary["outside_skipped"] or summary["failed"] else exits.OK


def _print(summary: dict[str, Any], out: TextIO) -> None:
    print(summary["summary"], file=out)
    if summary["outside_skipped"]:
        print(f"  {summary['outside_skipped']} paths outside their table skipped", file=out)
    if summary["failed"]:
        print(f"  {summary['failed']} deletions failed", file=out)
    print(f"log: {summary['log']}", file=out)
