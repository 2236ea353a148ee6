"""The sweep phase: the node deletes, the job only sends it the candidates.

Nothing is deleted from outside the node. For each catalog the job reads its
candidates from the mark's Parquet and sends them in batches to the catalog's sweep
endpoint with the catalog's ``mark_head``; the node makes each batch a commit on
the catalog's ref that spares every candidate a commit since ``mark_head``
references again (the deletions and the HEAD compare-and-swap are one write). It
also asks the node to expire the catalog's idempotency records past their
lifetime and to collect its dropped tables and views past their retention (the node
purges their files). Metadata files are deleted by the job itself (the warehouse is not the
node's store), each after checking containment again (``gc_files``).
"""

from __future__ import annotations

import sys
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import pyarrow.parquet as pq

from metastore.pipeline.gc.gc_files import OrphanFile, delete_file
from metastore.pipeline.node_client import NodeClient

BATCH = 10_000  # the node's limit per sweep call


@dataclass
class SweepCounts:
    deleted: int = 0
    spared: int = 0
    expired: int = 0  # idempotency records
    collected: int = 0  # dropped tables and views past their catalog's retention
    files_deleted: int = 0
    would_delete: int = 0  # dry run

    def add(self, other: SweepCounts) -> None:
        self.deleted += other.deleted
        self.spared += other.spared
        self.expired += other.expired
        self.collected += other.collected
        self.files_deleted += other.files_deleted
        self.would_delete += other.would_delete

    def to_json(self) -> dict[str, int]:
        return {
            "deleted": self.deleted,
            "spared": self.spared,
            "expired": self.expired,
            "collected": self.collected,
            "files_deleted": self.files_deleted,
            "would_delete": self.would_delete,
        }

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> SweepCounts:
        return cls(**{k: int(body.get(k, 0)) for k in cls().to_json()})


def catalog_path(tenant: str, catalog: str) -> str:
    quote = urllib.parse.quote
    return f"/api/v1/tenants/{quote(tenant, safe='')}/catalogs/{quote(catalog, safe='')}"


def batches(candidates_path: Path, tenant: str, catalog: str) -> Iterator[list[dict[str, Any]]]:
    """The catalog's candidates from the mark's Parquet, ``BATCH`` at a time."""
    table = pq.read_table(
        str(candidates_path),
        columns=["type", "id"],
        filters=[("tenant", "=", tenant), ("catalog", "=", catalog)],
    )
    for batch in table.to_batches(max_chunksize=BATCH):
        types = batch.column(0).to_pylist()
        ids = batch.column(1).to_pylist()
        yield [{"type": t, "id": int(i)} for t, i in zip(types, ids, strict=True)]


class Sweeper:
    def __init__(
        self, node: NodeClient, *, dry_run: bool, show: bool, out: TextIO = sys.stderr
    ) -> None:
        self.node = node
        self.dry_run = dry_run
        self.show = show
        self.out = out
        self.started = time.monotonic()
        self.total = SweepCounts()

    def catalog(
        self, candidates_path: Path, tenant: str, catalog: str, mark_head: int
    ) -> SweepCounts:
        counts = SweepCounts()
        base = catalog_path(tenant, catalog)
        for batch in batches(candidates_path, tenant, catalog):
            body = {"mark-head": mark_head, "candidates": batch, "dry-run": self.dry_run}
            found = self.node.call("POST", f"{base}/gc/sweep", body) or {}
            deleted, spared = int(found.get("deleted", 0)), int(found.get("spared", 0))
            if self.dry_run:
                counts.would_delete += deleted
            else:
                counts.deleted += deleted
            counts.spared += spared
            self._line(tenant, catalog, counts)
        if not self.dry_run:
            found = self.node.call("POST", f"{base}/gc/expire") or {}
            counts.expired += int(found.get("expired", 0))
            counts.collected += int(found.get("collected", 0))
        self.total.add(counts)
        return counts

    def files(self, orphans: list[dict[str, Any]]) -> int:
        """Delete the catalog's orphan metadata files (none on a dry run)."""
        if self.dry_run:
            return 0
        deleted = 0
        for body in orphans:
            orphan = OrphanFile(body["location"], body["path"], body["modified_us"], body["size"])
            if delete_file(orphan):
                deleted += 1
                if self.show:
                    print(f"gc: deleted {orphan.path}", file=self.out, flush=True)
        self.total.files_deleted += deleted
        return deleted

    def leases(self) -> int:
        if self.dry_run:
            return 0
        found = self.node.call("POST", "/api/v1/admin/gc/leases") or {}
        return int(found.get("removed", 0))

    def _line(self, tenant: str, catalog: str, counts: SweepCounts) -> None:
        if not self.show:
            return
        seconds = time.monotonic() - self.started
        done = self.total.deleted + counts.deleted + self.total.would_delete + counts.would_delete
        rate = done / seconds if seconds > 0 else 0.0
        print(
            f"gc sweep: {tenant}/{catalog}: {counts.deleted + counts.would_delete:,} deleted, "
            f"{counts.spared:,} spared; {done:,} in all, {seconds:.0f} s ({rate:,.0f} deletes/s)",
            file=self.out,
            flush=True,
        )
