"""The mark phase on Spark: each task marks the whole catalogs of its partition.

Tasks run ``gc_mark.mark_catalog`` over their catalogs' rows and list each catalog's
orphaned metadata files (``gc_files``); each task writes its catalogs' candidates
itself with pyarrow, one Parquet file per Spark partition
(``<out>/mark-<mark time>/candidates.parquet/part-<n>.parquet``: tenant, catalog,
type, id as a decimal string for 64-bit ids, created_at_us, size; written under a
temporary name and renamed, so a retried task replaces its file), and only the
per-catalog results (mark_head, the refs' HEADs, counts, orphan files) come back to
the driver: candidates never cross into the JVM. ``--out`` must therefore be a
directory the executors share with the driver (as on a local master).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark import Accumulator, TaskContext
from pyspark.sql import SparkSession

from metastore.model.codec import default_codec
from metastore.pipeline.catalog_reader import CatalogRows
from metastore.pipeline.gc.gc_files import orphan_metadata_files
from metastore.pipeline.gc.gc_mark import CatalogMark, MarkTimes, mark_catalog
from metastore.pipeline.options import Scope
from metastore.pipeline.progress import Progress
from metastore.pipeline.rows import Row, by_catalog
from metastore.pipeline.source import Source

CANDIDATES_SCHEMA = pa.schema(
    [
        ("tenant", pa.string()),
        ("catalog", pa.string()),
        ("type", pa.string()),
        ("id", pa.string()),  # up to 2**64 - 1: beyond a signed 64-bit column
        ("created_at_us", pa.int64()),
        ("size", pa.int64()),
    ]
)
CANDIDATE_COLUMNS = tuple(CANDIDATES_SCHEMA.names)


@dataclass
class MarkedCatalog:
    """What the driver keeps of one catalog's mark (the candidates are in Parquet)."""

    tenant: str
    catalog: str
    mark_head: int
    heads: dict[str, list[int]]
    objects: int
    reachable: int
    candidates: int
    candidate_bytes: int
    files: list[dict[str, Any]] = field(default_factory=list)  # orphan metadata files
    unlisted_locations: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "catalog": self.catalog,
            "mark_head": str(self.mark_head),
            "heads": {ref: [str(h) for h in heads] for ref, heads in self.heads.items()},
            "objects": self.objects,
            "reachable": self.reachable,
            "candidates": self.candidates,
            "candidate_bytes": self.candidate_bytes,
            "files": self.files,
            "unlisted_locations": self.unlisted_locations,
        }

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> MarkedCatalog:
        return cls(
            body["tenant"],
            body["catalog"],
            int(body["mark_head"]),
            {ref: [int(h) for h in heads] for ref, heads in body["heads"].items()},
            body["objects"],
            body["reachable"],
            body["candidates"],
            body["candidate_bytes"],
            list(body["files"]),
            body["unlisted_locations"],
        )


def sweepable(tenant: str, catalog: str) -> bool:
    """Catalogs the node sweeps: a tenant's own records (catalog "") and the system
    tenant's are not collected."""
    return tenant != "" and catalog != ""


def mark_partition(
    scope: Scope,
    times: MarkTimes,
    objects: Accumulator[int],
    candidates_path: str,
    rows: Iterable[Row],
) -> Iterator[MarkedCatalog]:
    codec = default_codec()
    columns: dict[str, list[Any]] = {name: [] for name in CANDIDATE_COLUMNS}
    kept = []
    for (tenant, catalog), catalog_rows in by_catalog(rows).items():
        if not scope.covers(tenant, catalog) or not sweepable(tenant, catalog):
            continue
        mark = mark_catalog(CatalogRows(tenant, catalog, catalog_rows, codec), times)
        objects.add(mark.objects)
        for type_name, obj_id, created_at_us, size in mark.candidates:
            for name, value in zip(
                CANDIDATE_COLUMNS,
                (tenant, catalog, type_name, str(obj_id), created_at_us, size),
                strict=True,
            ):
                columns[name].append(value)
        kept.append(_kept(mark, times))
    _write_part(Path(candidates_path), columns)
    yield from kept


def _write_part(directory: Path, columns: dict[str, list[Any]]) -> None:
    part = TaskContext.get()
    number = part.partitionId() if part is not None else 0
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"part-{number:05d}.parquet"
    temporary = directory / f".{final.name}.{os.getpid()}.tmp"
    pq.write_table(pa.table(columns, schema=CANDIDATES_SCHEMA), temporary)
    temporary.replace(final)


def _kept(mark: CatalogMark, times: MarkTimes) -> MarkedCatalog:
    listing = orphan_metadata_files(
        mark.table_locations,
        mark.metadata_files,
        times.created_before_us,
        mark.storage_roots,
        spared=mark.view_locations,
    )
    return MarkedCatalog(
        mark.tenant,
        mark.catalog,
        mark.mark_head,
        mark.heads,
        mark.objects,
        mark.reachable,
        len(mark.candidates),
        mark.candidate_bytes,
        [
            {"location": o.location, "path": o.path, "modified_us": o.modified_us, "size": o.size}
            for o in listing.orphans
        ],
        listing.unlisted,
    )


def mark(
    spark: SparkSession,
    source: Source,
    scope: Scope,
    times: MarkTimes,
    candidates_path: Path,
    progress: Progress,
) -> list[MarkedCatalog]:
    """Mark ``scope`` of ``source``; candidates written to ``candidates_path``."""
    candidates_path.mkdir(parents=True, exist_ok=True)
    with progress:
        found: list[MarkedCatalog] = (
            source.rows(spark, scope, progress)
            .mapPartitions(
                partial(mark_partition, scope, times, progress.objects, str(candidates_path))
            )
            .collect()
        )
    return found
