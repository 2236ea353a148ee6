"""``metastore export``: current state and full commit history of a scope, to Parquet.

One Spark job: every task turns its catalogs' rows into table rows
(``export.export_catalog``) and writes them as one Parquet file per table
(``<out>/<table>/part-<task>.parquet``, Arrow schemas in ``export.TABLES``), then
reports its row counts; the driver only adds them up. With ``--register`` the
tables are also registered as Iceberg tables of a catalog of the metastore itself
(``register``). An export replaces the table directories of an earlier one in
``--out``.
"""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Iterable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark import Accumulator
from pyspark.sql import SparkSession

from metastore.model.codec import default_codec
from metastore.pipeline.catalog_reader import CatalogRows
from metastore.pipeline.exits import JobError
from metastore.pipeline.export.export_rows import TABLES, export_catalog
from metastore.pipeline.options import Scope
from metastore.pipeline.progress import Progress
from metastore.pipeline.rows import CatalogId, Row, by_catalog
from metastore.pipeline.source import Source

Written = tuple[dict[str, int], list[CatalogId]]  # a task's row counts and catalogs read


def export_partition(
    scope: Scope, out: str, objects: Accumulator[int], index: int, rows: Iterable[Row]
) -> Iterator[Written]:
    codec = default_codec()
    tables: dict[str, list[tuple[Any, ...]]] = {name: [] for name in TABLES}
    seen: list[CatalogId] = []
    for (tenant, catalog), catalog_rows in by_catalog(rows).items():
        if not scope.covers(tenant, catalog):
            continue
        seen.append((tenant, catalog))
        count = 0
        for name, row in export_catalog(
            CatalogRows(tenant, catalog, catalog_rows, codec), scope.catalog
        ):
            tables[name].append(row)
            count += 1
        objects.add(count)
    counts = {}
    for name, values in tables.items():
        if values:
            write(Path(out) / name / f"part-{index:05d}.parquet", TABLES[name], values)
        counts[name] = len(values)
    yield counts, seen


def write(path: Path, schema: pa.Schema, values: list[tuple[Any, ...]]) -> None:
    columns: list[Any] = list(zip(*values, strict=True)) if values else [() for _ in schema]
    table = pa.Table.from_arrays(
        [pa.array(column, type=f.type) for column, f in zip(columns, schema, strict=True)],
        schema=schema,
    )
    pq.write_table(table, path)


def run(
    spark: SparkSession, source: Source, scope: Scope, out: Path, progress: Progress
) -> dict[str, Any]:
    """Export ``scope`` of ``source`` to ``out``; the summary (``tables``, ``out``)."""
    out.mkdir(parents=True, exist_ok=True)
    for name in TABLES:
        shutil.rmtree(out / name, ignore_errors=True)
        (out / name).mkdir()
    with progress:
        written: list[Written] = (
            source.rows(spark, scope, progress)
            .mapPartitionsWithIndex(
                partial(export_partition, scope, str(out.resolve()), progress.objects)
            )
            .collect()
        )
    check_scope(scope, [c for _, seen in written for c in seen])
    counts: Counter[str] = Counter()
    for task_counts, _ in written:
        counts.update(task_counts)
    for name, schema in TABLES.items():
        if not counts[name]:  # every table has a file, so readers know its columns
            write(out / name / "part-empty.parquet", schema, [])
    summary = progress.summary()
    return {
        "tables": {name: counts[name] for name in TABLES},
        "out": str(out.resolve()),
        **summary.to_json(),
        "summary": summary.render(),
    }


def check_scope(scope: Scope, seen: list[CatalogId]) -> None:
    if scope.tenant is not None and not any(t == scope.tenant for t, _ in seen):
        raise JobError(f"unknown tenant {scope.tenant!r}")
    if scope.catalog is not None and (scope.tenant, scope.catalog) not in seen:
        raise JobError(f"unknown catalog {scope.catalog!r} of tenant {scope.tenant!r}")
