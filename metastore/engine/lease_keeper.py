"""Keeps a serving node's node-id lease: renewals on time, renewal at once when a
write finds the lease run out, and a node ID leased again after a loss.

The lease is what lets the node mint ids (``metastore.engine.leases``), so a node without a
live one refuses writes with 503. A lost lease used to leave the node read-only until
an operator restarted it, and in a store outage longer than the lease every node of
a cluster lost it together. Now:

- every third of the lease, a renewal (``NodeLeaser.renew``), in a worker thread;
- a write that finds the lease run out (``Metastore.commit``) renews it at once and
  waits for the outcome: after a long pause (a stopped process, a suspended machine)
  nobody took the ID over, so the renewal succeeds and the write goes on, where the
  next scheduled renewal could be a third of the lease away (503 only when it cannot);
- a lease lost (taken over after it expired, or expired while renewals failed) is
  followed by a new one (``NodeLeaser.acquire``: any free node ID), tried at once and
  then every second until the store answers. The node's generator mints with the new
  ID from then on, and the node writes again with no restart.

One step runs at a time (renewal or lease), so writes that find the lease run out
together wait for one renewal.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Executor

from metastore.engine.leases import NodeLeaser
from metastore.errors import MetastoreError
from metastore.model.ids import LeaseRunOut

log = logging.getLogger(__name__)

RETRY_S = 1.0  # between attempts to lease a node ID after a loss


class LeaseKeeper:
    def __init__(self, leaser: NodeLeaser, executor: Executor) -> None:
        self._leaser = leaser
        self._executor = executor
        self._step_lock = asyncio.Lock()
        self._failed_to_lease = False  # said once per loss: an outage would repeat it

    def holds(self) -> bool:
        """Whether this node may mint ids now."""
        return self._leaser.holds()

    async def renew_now(self) -> None:
        """Renew (or lease again) at once unless another step just did; raises
        ``LeaseRunOut`` (503) when the node still may not mint."""
        async with self._step_lock:
            if not self._leaser.holds():
                await self._step()
        if not self._leaser.holds():
            raise LeaseRunOut(
                "this node's node-id lease has run out and could not be renewed; "
                "nothing was written, retry later"
            )

    async def run(self) -> None:
        """Renew on time until cancelled."""
        while True:
            interval = self._leaser.renew_interval_s
            if self._leaser.lease is None:  # lost: lease again soon
                interval = min(RETRY_S, interval)
            await asyncio.sleep(interval)
            async with self._step_lock:
                await self._step()

    async def _step(self) -> None:
        loop = asyncio.get_running_loop()
        if self._leaser.lease is not None:
            if await loop.run_in_executor(self._executor, self._leaser.renew):
                return
            log.error("node-id lease lost: writes are refused until a node id is leased again")
        try:
            lease = await loop.run_in_executor(self._executor, self._leaser.acquire)
        except MetastoreError as exc:
            if not self._failed_to_lease:
                log.warning("cannot lease a node id yet (%s); trying every second", exc.message)
            self._failed_to_lease = True
            return
        self._failed_to_lease = False
        log.warning("leased node id %d after a loss: this node writes again", lease.node_id)
