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


# a queued commit: its request, its caller's future, when it was submitted
_Pending = tuple[CommitRequest, "asyncio.Future[CommitOutcome]", float]


@dataclass
class _Lane:
    pending: list[_Pending] = field(default_factory=list)
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
        future: asyncio.Future[CommitOutcome] = asyncio.get_running_loop().create_future()
        lane = self._lanes.get(ref_key)
        if lane is None:
            lane = self._lanes[ref_key] = _Lane()
        lane.pending.append((request, future, time.perf_counter()))
        if lane.task is None:
            lane.task = asyncio.create_task(self._drain(ref_key, lane))
        # The future is this caller's alone: if the caller goes away it is cancelled, and
        # the commit still proceeds (it is in the lane; the batch skips settling it).
        return await future

    async def _drain(self, ref_key: RefKey, lane: _Lane) -> None:
        loop = asyncio.get_running_loop()
        try:
            while lane.pending:
                batch = lane.pending[: self._max_batch]
                del lane.pending[: self._max_batch]
                requests = [request for request, _, _ in batch]
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
                    _observe(self._metrics, batch, results)
                for (_, future, _), result in zip(batch, results, strict=True):
                    if isinstance(result, MetastoreError):
                        if not future.done():
                            future.set_exception(result)
                    else:
                        self.commits += 1
                        if not future.done():
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


def _observe(
    metrics: CommitMetrics,
    batch: list[_Pending],
    results: list[CommitOutcome | MetastoreError],
) -> None:
    """Each commit's latency, from its submission to its outcome, whether or not its
    caller still waits for it: committed, or failed (an error or an unknown outcome)."""
    now = time.perf_counter()
    committed, failed = metrics.latency.labels("committed"), metrics.latency.labels("failed")
    for (_, _, started), result in zip(batch, results, strict=True):
        (failed if isinstance(result, MetastoreError) else committed).observe(now - started)
