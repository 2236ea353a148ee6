"""``metastore audit``: referential integrity of a catalog, a tenant or everything.

Spark tasks check their catalogs (``audit.audit_catalog``); the driver adds the
checks across catalogs (orphans), then writes the report: ``<out>/report.json``
(every finding, the counts by kind, the scope and source) and
``<out>/findings.parquet`` (one row per finding). Exit status 1 when anything
dangles.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import astuple
from functools import partial
from pathlib import Path
from typing import Any

from pyspark import Accumulator
from pyspark.sql import SparkSession

from metastore.model.codec import default_codec
from metastore.pipeline import exits
from metastore.pipeline.audit.file_presence import file_exists
from metastore.pipeline.audit.integrity import CatalogAudit, Finding, audit_catalog, orphans
from metastore.pipeline.catalog_reader import CatalogRows
from metastore.pipeline.exits import JobError
from metastore.pipeline.options import Scope
from metastore.pipeline.progress import Progress
from metastore.pipeline.rows import Row, by_catalog
from metastore.pipeline.source import Source

FINDINGS_DDL = (
    "kind string, tenant string, catalog string, ref string, commit_id bigint, "
    "object_type string, object_id bigint, entity string, detail string"
)


def audit_partition(
    scope: Scope, objects: Accumulator[int], rows: Iterable[Row]
) -> Iterator[CatalogAudit]:
    codec = default_codec()
    for (tenant, catalog), catalog_rows in by_catalog(rows).items():
        if not scope.covers(tenant, catalog):
            continue
        audit = audit_catalog(CatalogRows(tenant, catalog, catalog_rows, codec), file_exists)
        objects.add(audit.objects)
        yield audit


def run(
    spark: SparkSession, source: Source, scope: Scope, out: Path, progress: Progress
) -> dict[str, Any]:
    """Audit ``scope`` of ``source``; the summary (``dangling``, ``report``, counts)."""
    with progress:
        audits: list[CatalogAudit] = (
            source.rows(spark, scope, progress)
            .mapPartitions(partial(audit_partition, scope, progress.objects))
            .collect()
        )
    check_scope(scope, audits)
    findings = [f for a in audits for f in a.findings] + orphans(audits)
    summary = progress.summary()
    out.mkdir(parents=True, exist_ok=True)
    report_path = out / "report.json"
    by_kind = Counter(f.kind for f in findings)
    report = {
        "scope": scope.describe(),
        "source": source.describe(),
        "catalogs": sum(1 for a in audits if a.catalog != ""),
        "tenants": sum(1 for a in audits if a.catalog == ""),
        "dangling": len(findings),
        "by_kind": dict(sorted(by_kind.items())),
        "unchecked_metadata_files": sum(a.unchecked_files for a in audits),
        **summary.to_json(),
        "findings": [f.to_json() for f in findings],
    }
    report_path.write_text(json.dumps(report, indent=2) + "\n")
    write_findings(spark, findings, out / "findings.parquet")
    return {
        "dangling": len(findings),
        "report": str(report_path.resolve()),
        "by_kind": report["by_kind"],
        "catalogs": report["catalogs"],
        **summary.to_json(),
        "summary": summary.render(),
    }


def check_scope(scope: Scope, audits: list[CatalogAudit]) -> None:
    """An unknown tenant or catalog is bad input (sources that can tell earlier do)."""
    if scope.tenant is not None and not any(a.tenant == scope.tenant for a in audits):
        raise JobError(f"unknown tenant {scope.tenant!r}")
    if scope.catalog is not None and not any(a.catalog == scope.catalog for a in audits):
        raise JobError(f"unknown catalog {scope.catalog!r} of tenant {scope.tenant!r}")


def write_findings(spark: SparkSession, findings: list[Finding], path: Path) -> None:
    rows = [astuple(f) for f in findings]  # the fields in FINDINGS_DDL's order
    frame = spark.createDataFrame(rows, schema=FINDINGS_DDL)
    frame.coalesce(1).write.mode("overwrite").parquet(str(path))


def exit_status(summary: dict[str, Any]) -> int:
    return exits.FOUND if summary["dangling"] else exits.OK
