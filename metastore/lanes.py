"""Group commit on the event loop: one lane per ref, one batch in flight per lane.

Requests for a ref queue up while its current batch is being written; the next
batch takes everything queued (up to ``max_batch``). Serializing per ref inside
the process means commits of one node never race each other's CAS (no node
runs two retry loops against one ref), and one durable write (one fsync, or
one Kafka transaction) carries many commits. Blocking work (RocksDB, CPU) runs
in the executor, never on the loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import Executor
from dataclasses import dataclass, field

from metastore.commits import CommitOutcome, CommitRequest, Committer
from metastore.errors import CommitStateUnknown, MetastoreError, ServiceUnavailable
from metastore.keys import RefKey
from metastore.metrics import CommitMetrics

log = logging.getLogger(__name__)


@dataclass
class _Lane:
    pending: list[tuple[CommitRequest, asyncio.Future[CommitOutcome]]] = field(default_factory=list)
    task: asyncio.Task[None] | None = None


class CommitLanes:
    def __init__(
        self,
        committer: Committer,
        executor: Executor,
        max_batch: int = 256,
        metrics: CommitMetrics | None = None,
    ) -> None:
        self._committer = committer
        self._executor = executor
        self._max_batch = max_batch
        self._metrics = metrics
        self._lanes: dict[RefKey, _Lane] = {}
        self._closing = False
        self.batches = 0
        self.commits = 0

    async def submit(self, ref_key: RefKey, request: CommitRequest) -> CommitOutcome:
        if self._closing:
            raise ServiceUnavailable("shutting down; nothing was written, retry on another node")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[CommitOutcome] = loop.create_future()
        lane = self._lanes.setdefault(ref_key, _Lane())
        lane.pending.append((request, future))
        if lane.task is None:
            lane.task = asyncio.create_task(self._drain(ref_key, lane))
        if self._metrics is not None:
            future.add_done_callback(_Timed(self._metrics, time.perf_counter()))
        # The commit proceeds even if this caller goes away: shield the shared future.
        return await asyncio.shield(future)

    async def _drain(self, ref_key: RefKey, lane: _Lane) -> None:
        loop = asyncio.get_running_loop()
        try:
            while lane.pending:
                batch = lane.pending[: self._max_batch]
                del lane.pending[: self._max_batch]
                requests = [request for request, _ in batch]
                results: list[CommitOutcome | MetastoreError]
                try:
                    results = await loop.run_in_executor(
                        self._executor, self._committer.commit_batch, ref_key, requests
                    )
                except Exception as exc:
                    log.exception("commit batch for %s failed", ref_key)
                    results = [CommitStateUnknown(f"commit state unknown: {exc}")] * len(batch)
                self.batches += 1
                if self._metrics is not None:
                    self._metrics.group.observe(len(batch))
                for (_, future), result in zip(batch, results, strict=True):
                    if future.done():
                        continue
                    if isinstance(result, MetastoreError):
                        future.set_exception(result)
                    else:
                        self.commits += 1
                        future.set_result(result)
        finally:
            lane.task = None
            if not lane.pending and self._lanes.get(ref_key) is lane:
                del self._lanes[ref_key]

    async def close(self) -> None:
        """Refuse new requests and wait for the batches in flight (graceful shutdown)."""
        self._closing = True
        tasks = [lane.task for lane in self._lanes.values() if lane.task is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


class _Timed:
    """Observes one commit's latency when its future settles (it always does: a result,
    an error, or the batch's unknown outcome), whether or not its caller still waits."""

    __slots__ = ("_metrics", "_started")

    def __init__(self, metrics: CommitMetrics, started: float) -> None:
        self._metrics = metrics
        self._started = started

    def __call__(self, future: asyncio.Future[CommitOutcome]) -> None:
        failed = future.cancelled() or future.exception() is not None
        outcome = "failed" if failed else "committed"
        self._metrics.latency.labels(outcome).observe(time.perf_counter() - self._started)
