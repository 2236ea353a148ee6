"""Group commit on the event loop: one lane per ref, one batch in flight per lane.

Requests for a ref queue up while its current batch is being written; the next
batch takes everything queued (up to ``max_batch``). Serializing per ref inside
the process means commits of one node never race each other's CAS (no node
runs two retry loops against one ref), and one durable write (one fsync, or
one Kafka transaction) carries many commits. Blocking work (RocksDB, CPU) runs
in the executor, never on the loop.

Lanes ready at once share a group: one hand-off to a thread and, where the
persistence can (``WritesTogether``, the embedded store), one durable write for
the batches of several catalogs. With many catalogs committing side by side each
batch holds a single commit, and the hand-off, the write and the sync were paid
per commit. At most ``max_groups`` groups are in flight: while they are, ready
lanes gather into the next one. A backend that cannot share a write (Kafka: a
transaction per partition owner) gets one group per lane, as many as arrive.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import Executor
from dataclasses import dataclass, field

from metastore.engine.commits import CommitOutcome, CommitRequest
from metastore.engine.committer import Committer
from metastore.errors import CommitStateUnknown, MetastoreError, ServiceUnavailable
from metastore.model.keys import RefKey
from metastore.util.metrics import CommitMetrics

log = logging.getLogger(__name__)

MAX_GROUPS = 2  # groups in flight when writes are shared: one syncs while the next builds

# a queued commit: its request, its caller's future, when it was submitted
_Pending = tuple[CommitRequest, "asyncio.Future[CommitOutcome]", float]
# one lane's batch in a group: its ref, its lane, its commits
_Batch = tuple[RefKey, "_Lane", list[_Pending]]


@dataclass
class _Lane:
    pending: list[_Pending] = field(default_factory=list)
    busy: bool = False  # a batch of this lane is in flight


class CommitLanes:
    def __init__(
        self,
        committer: Committer,
        executor: Executor,
        max_batch: int = 256,
        metrics: CommitMetrics | None = None,
        max_groups: int = MAX_GROUPS,
    ) -> None:
        self._committer = committer
        self._executor = executor
        self._max_batch = max_batch
        self._metrics = metrics
        # None: one group per ready lane, without a bound (the executor bounds them)
        self._max_groups: int | None = max_groups if committer.writes_together else None
        self._lanes: dict[RefKey, _Lane] = {}
        self._ready: dict[RefKey, _Lane] = {}  # queued commits, no batch in flight; in order
        self._groups: set[asyncio.Task[None]] = set()
        self._dispatching = False  # a dispatch is scheduled for this turn of the loop
        self._closing = False
        self.batches = 0
        self.commits = 0

    async def submit(self, ref_key: RefKey, request: CommitRequest) -> CommitOutcome:
        if self._closing:
            raise ServiceUnavailable("shutting down; nothing was written, retry on another node")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[CommitOutcome] = loop.create_future()
        lane = self._lanes.get(ref_key)
        if lane is None:
            lane = self._lanes[ref_key] = _Lane()
        lane.pending.append((request, future, time.perf_counter()))
        if not lane.busy and ref_key not in self._ready:
            self._ready[ref_key] = lane
            if not self._dispatching:
                # the lanes that become ready in this turn of the loop go out together
                self._dispatching = True
                loop.call_soon(self._dispatch)
        # The future is this caller's alone: if the caller goes away it is cancelled, and
        # the commit still proceeds (it is in the lane; the batch skips settling it).
        return await future

    def _dispatch(self) -> None:
        """Send ready lanes out in groups while fewer than ``max_groups`` are in flight."""
        self._dispatching = False
        while self._ready and (self._max_groups is None or len(self._groups) < self._max_groups):
            group: list[_Batch] = []
            commits = 0
            while self._ready and commits < self._max_batch:
                ref_key = next(iter(self._ready))
                lane = self._ready.pop(ref_key)
                batch = lane.pending[: self._max_batch]
                del lane.pending[: self._max_batch]
                lane.busy = True
                group.append((ref_key, lane, batch))
                commits += len(batch)
                if self._max_groups is None:
                    break
            task = asyncio.create_task(self._run(group))
            self._groups.add(task)
            task.add_done_callback(self._groups.discard)

    async def _run(self, group: list[_Batch]) -> None:
        loop = asyncio.get_running_loop()
        try:
            work = [(ref_key, [request for request, _, _ in batch]) for ref_key, _, batch in group]
            outcomes: list[list[CommitOutcome | MetastoreError]]
            try:
                outcomes = await loop.run_in_executor(
                    self._executor, self._committer.commit_batches, work
                )
            except Exception as exc:
                log.exception("commit group of %d refs failed", len(group))
                outcomes = [
                    [CommitStateUnknown(f"commit state unknown: {exc}")] * len(batch)
                    for _, _, batch in group
                ]
            for (_, _, batch), results in zip(group, outcomes, strict=True):
                self._settle(batch, results)
        finally:
            for ref_key, lane, _ in group:
                lane.busy = False
                if lane.pending:
                    self._ready[ref_key] = lane
                elif self._lanes.get(ref_key) is lane:
                    del self._lanes[ref_key]
            self._groups.discard(asyncio.current_task())
            self._dispatch()

    def _settle(self, batch: list[_Pending], results: list[CommitOutcome | MetastoreError]) -> None:
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

    async def close(self) -> None:
        """Refuse new requests and wait for the batches in flight and queued (graceful
        shutdown): each group that ends sends the lanes still ready."""
        self._closing = True
        while self._groups or self._ready:
            if not self._groups:
                self._dispatch()
            await asyncio.gather(*self._groups, return_exceptions=True)


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
