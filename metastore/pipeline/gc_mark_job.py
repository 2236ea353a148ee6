"""The mark phase on Spark: each task marks the whole catalogs of its partition.

Tasks run ``gc_mark.mark_catalog`` over their catalogs' rows and list each catalog's
orphaned metadata files (``gc_files``); the candidates go straight from the tasks to
Parquet (``<out>/mark-<mark time>/candidates.parquet``: tenant, catalog, type, id as
a decimal string for 64-bit ids, created_at_us, size), the per-catalog results
(mark_head, the refs' HEADs, counts, orphan files) come back to the driver.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from pyspark import Accumulator
from pyspark.sql import SparkSession

from metastore.codec import default_codec
from metastore.pipeline.catalog import CatalogRows
from metastore.pipeline.gc_files import orphan_metadata_files
from metastore.pipeline.gc_mark import CatalogMark, MarkTimes, mark_catalog
from metastore.pipeline.options import Scope
from metastore.pipeline.progress import Progress
from metastore.pipeline.rows import Row, by_catalog
from metastore.pipeline.source import Source

CANDIDATES_DDL = (
    "tenant string, catalog string, type string, id string, created_at_us bigint, size bigint"
)


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
    scope: Scope, times: MarkTimes, objects: Accumulator[int], rows: Iterable[Row]
) -> Iterator[CatalogMark]:
    codec = default_codec()
    for (tenant, catalog), catalog_rows in by_catalog(rows).items():
        if not scope.covers(tenant, catalog) or not sweepable(tenant, catalog):
            continue
        mark = mark_catalog(CatalogRows(tenant, catalog, catalog_rows, codec), times)
        objects.add(mark.objects)
        yield mark


def _kept(mark: CatalogMark, times: MarkTimes) -> MarkedCatalog:
    listing = orphan_metadata_files(
        mark.table_locations, mark.metadata_files, times.created_before_us
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


def _candidate_rows(mark: CatalogMark) -> Iterator[tuple[Any, ...]]:
    for type_name, obj_id, created_at_us, size in mark.candidates:
        yield (mark.tenant, mark.catalog, type_name, str(obj_id), created_at_us, size)


def mark(
    spark: SparkSession,
    source: Source,
    scope: Scope,
    times: MarkTimes,
    candidates_path: Path,
    progress: Progress,
) -> list[MarkedCatalog]:
    """Mark ``scope`` of ``source``; candidates written to ``candidates_path``."""
    with progress:
        marks = source.rows(spark, scope, progress).mapPartitions(
            partial(mark_partition, scope, times, progress.objects)
        )
        marks.persist()
        try:
            kept: list[MarkedCatalog] = marks.map(partial(_kept, times=times)).collect()
            frame = spark.createDataFrame(marks.flatMap(_candidate_rows), schema=CANDIDATES_DDL)
            frame.write.mode("overwrite").parquet(str(candidates_path))
        finally:
            marks.unpersist()
    return kept
