"""Running ``metastore audit`` and ``metastore export`` (parsers: ``commands``).

The driver opens and checks the source before it starts Spark, so bad input (an
unknown tenant or catalog, an unreachable node or broker, a directory that is not a
store) is one line on standard error and exit status 2 within a second. With
``--json`` the last line of standard output is the summary as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from pyspark.sql import SparkSession

from metastore.pipeline import exits
from metastore.pipeline.audit import audit_job
from metastore.pipeline.exits import JobError
from metastore.pipeline.export import export_job
from metastore.pipeline.export import export_register as register
from metastore.pipeline.export.export_rows import TABLES
from metastore.pipeline.node_client import NodeClient
from metastore.pipeline.options import JobOptions
from metastore.pipeline.progress import Progress
from metastore.pipeline.source_opening import open_source
from metastore.pipeline.spark_session import start

SHOWN_FINDINGS = 20


def run(
    args: argparse.Namespace, out: TextIO = sys.stdout, spark: SparkSession | None = None
) -> int:
    """Run the job ``args.command``; ``spark`` is a session to use (else one is started
    and stopped here)."""
    job = args.command
    try:
        return _run(job, args, out, spark)
    except JobError as exc:
        print(f"metastore {job}: {exc.message}", file=sys.stderr)
        return exits.USAGE


def _run(job: str, args: argparse.Namespace, out: TextIO, spark: SparkSession | None) -> int:
    options = JobOptions.from_args(args, job)
    node = None
    if options.source == "url":
        node = NodeClient(options.where, token=options.token, credential=options.credential)
    registering = job == "export" and args.register is not None
    if registering and node is None:
        raise JobError("--register needs --url (the node whose catalog receives the tables)")
    if registering:
        assert node is not None
        register.check_targets(node, TABLES, args.register, args.register_namespace)
    source = open_source(options, node)
    try:
        source.check(options.scope)
        log = options.claim_out() / "spark.log"
        session = spark or start(options.master, f"metastore {job}", log)
        try:
            progress = Progress(session.sparkContext, job, enabled=options.progress)
            runner = audit_job.run if job == "audit" else export_job.run
            summary = runner(session, source, options.scope, options.out, progress)
        finally:
            if spark is None:
                session.stop()
    finally:
        source.close()
    if registering:
        assert node is not None
        summary["registered"] = register.register(
            node, options.out, summary["tables"], args.register, args.register_namespace
        )
    _print(job, summary, out)
    if options.json:
        print(json.dumps({k: v for k, v in summary.items() if k != "summary"}), file=out)
    return audit_job.exit_status(summary) if job == "audit" else exits.OK


def _print(job: str, summary: dict[str, Any], out: TextIO) -> None:
    print(summary["summary"], file=out)
    if job == "export":
        for name, count in summary["tables"].items():
            print(f"  {name}: {count:,} rows", file=out)
        print(f"written to {summary['out']}", file=out)
        for name, identifier in summary.get("registered", {}).items():
            print(f"  registered {name} as {identifier}", file=out)
        return
    dangling = summary["dangling"]
    kinds = ", ".join(f"{kind} {count}" for kind, count in summary["by_kind"].items())
    verdict = "nothing dangles" if not dangling else f"{dangling} dangling ({kinds})"
    print(f"audit of {summary['catalogs']} catalogs: {verdict}", file=out)
    if dangling:
        report = json.loads(Path(summary["report"]).read_text())
        for finding in report["findings"][:SHOWN_FINDINGS]:
            where = f"{finding['tenant']}/{finding['catalog'] or '(tenant)'}"
            what = finding["entity"] or finding["object_type"] or ""
            print(f"  {finding['kind']}: {where} {what} {finding['detail']}".rstrip(), file=out)
        if dangling > SHOWN_FINDINGS:
            print(f"  ... {dangling - SHOWN_FINDINGS} more in the report", file=out)
    print(f"report: {summary['report']}", file=out)
