"""Running ``metastore maintain`` (parser: ``commands``; the work: ``maintain_job``).

Maintenance commits through a node, so it takes ``--url`` (the node whose store it
reads from a checkpoint and whose Iceberg REST API it commits expiries to). The
driver opens and checks the source before it starts Spark, takes the scope's task
lease, and gives it back with the summary. Exit status 0, 1 when a path was
skipped as outside its table, a deletion failed or a manifest list or manifest could
not be read, 2 for bad input or an unreachable node (or another run holding the
lease). The manifests are read within the node's bound,
``METASTORE_MAX_METADATA_FILE_BYTES`` (read from the environment as the node reads it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from pyspark.sql import SparkSession

from metastore.config.server_config import DEFAULT_MAX_METADATA_FILE_BYTES, env_int
from metastore.pipeline import exits
from metastore.pipeline.exits import JobError
from metastore.pipeline.maintain import maintain_job
from metastore.pipeline.maintain.maintain_commit import IcebergClient
from metastore.pipeline.maintain.maintain_lease import Lease
from metastore.pipeline.node_client import NodeClient
from metastore.pipeline.options import MAX_AGE_S, JobOptions, check_seconds
from metastore.pipeline.progress import Progress
from metastore.pipeline.source_opening import open_source
from metastore.pipeline.spark_session import start
from metastore.util.setting_rules import ConfigError


def run(
    args: argparse.Namespace,
    out: TextIO = sys.stdout,
    spark: SparkSession | None = None,
    client: Callable[[NodeClient], IcebergClient] = IcebergClient,
) -> int:
    """``client``: the Iceberg calls' client of the node (a test's may act between them)."""
    try:
        return _run(args, out, spark, client)
    except JobError as exc:
        print(f"metastore maintain: {exc.message}", file=sys.stderr)
        return exits.USAGE


def _run(
    args: argparse.Namespace,
    out: TextIO,
    spark: SparkSession | None,
    client: Callable[[NodeClient], IcebergClient],
) -> int:
    options = JobOptions.from_args(args, "maintain")
    if options.source != "url":
        raise JobError("maintain commits through a node: give --url")
    check_seconds("--older-than", args.older_than, 0, MAX_AGE_S)
    settings = maintain_job.Settings(
        dry_run=args.dry_run, older_than_s=args.older_than, read_limit=read_limit(os.environ)
    )
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
                    client(node),
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
    found = summary["outside_skipped"] or summary["failed"] or summary["unreadable"]
    return exits.FOUND if found else exits.OK


def read_limit(env: Mapping[str, str]) -> int:
    """The bound on one manifest list or manifest, the node's own setting."""
    try:
        return env_int(env, "METASTORE_MAX_METADATA_FILE_BYTES", DEFAULT_MAX_METADATA_FILE_BYTES)
    except ConfigError as exc:
        raise JobError(str(exc)) from None


def _print(summary: dict[str, Any], out: TextIO) -> None:
    print(summary["summary"], file=out)
    if summary["outside_skipped"]:
        print(f"  {summary['outside_skipped']} paths outside their table skipped", file=out)
    if summary["failed"]:
        print(f"  {summary['failed']} deletions failed", file=out)
    if summary["unreadable"]:
        print(f"  {summary['unreadable']} manifest lists or manifests unreadable", file=out)
    if summary["deletion_blocked"]:
        print("  no file deleted: a live snapshot's files could not all be read", file=out)
    print(f"log: {summary['log']}", file=out)
