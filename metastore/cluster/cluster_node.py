"""One cluster node: its view, its group membership and the partition owners it runs.

Startup order matters: the topics are checked first (a node never runs on topics
that would lose data), the view catches up next (so an owner's wait for its own
barrier is short and reads are fresh), and only then does the node join the
owners' group. ``stop`` reverses it: every local owner stops and the node drops
out of the group (expelled after the session timeout, see ``membership``) before
the view stops.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Protocol

from metastore.cluster.changelog_records import RecordCodec, partition_for
from metastore.cluster.cluster_config import ClusterConfig
from metastore.cluster.membership import Membership
from metastore.cluster.view import ViewConsumer, ViewStore
from metastore.model.codec import Codec
from metastore.model.keys import ObjKey
from metastore.persistence.base import RefUpdate, StoredObject, UpdateableObject
from metastore.util.metrics import OwnerMetrics

log = logging.getLogger(__name__)


class PartitionWriter(Protocol):
    """The single writer of one partition, as the node runs it: ``workers.owner``'s
    ``PartitionOwner`` (a layer above this one, handed in by the node's wiring)."""

    @property
    def ready(self) -> bool: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def submit(
        self,
        objects: Sequence[StoredObject],
        ref: RefUpdate | None,
        deletes: Sequence[ObjKey] = (),
        events: Sequence[tuple[bytes, bytes]] = (),
    ) -> Future[int]: ...

    def submit_updateable(
        self, key: ObjKey, expected_token: str | None, new: UpdateableObject | None
    ) -> Future[int]: ...


class WriterFactory(Protocol):
    """Makes the writer of a partition this node was assigned."""

    def __call__(
        self,
        config: ClusterConfig,
        partition: int,
        records: RecordCodec,
        view: ViewConsumer,
        url: str,
        clock_us: Callable[[], int],
        may_own: Callable[[], bool],
        metrics: OwnerMetrics | None,
    ) -> PartitionWriter: ...


class ClusterNode:
    def __init__(
        self,
        config: ClusterConfig,
        data_dir: Path,
        url: str,
        codec: Codec,
        clock_us: Callable[[], int],
        writers: WriterFactory,
        metrics: OwnerMetrics | None = None,
    ) -> None:
        self.config = config
        self._writers = writers
        self._metrics = metrics  # every local owner's transactions
        self.url = url
        self._clock_us = clock_us
        self.store = ViewStore(data_dir / "view", config, codec=codec)
        self.view = ViewConsumer(self.store, config)
        self._records = RecordCodec(codec, node=url)
        self._owners: dict[int, PartitionWriter] = {}
        self._lock = threading.Lock()
        self.membership = Membership(config, self._assigned, self._revoked)
        self.caught_up = threading.Event()

    # --- lifecycle (blocking: run in an executor) ------------------------------------------

    def start(self, *, idle_s: float = 0.5, catch_up_timeout_s: float = 300.0) -> None:
        # the topics are checked by the caller before the view is opened (``cluster_ctx``:
        # a start refused for unsafe topics leaves no view behind)
        self.view.start()
        self._catch_up(idle_s, catch_up_timeout_s)
        self.membership.start()

    def _catch_up(self, idle_s: float, timeout_s: float) -> None:
        """Caught up = the view consumer has read every partition to its end
        (``ViewConsumer.reached_end``). On a conformant broker that end is the one the
        first fetch reported, so a node joins a cluster that keeps taking writes as soon
        as it has read the backlog. On a ``tansu`` broker, whose reported ends are not to
        be trusted, the view must then also have been idle for ``idle_s``: a node joining
        under steady writes waits for a pause. Either way the end is never a high
        watermark asked for on its own, and a view that has not had its first fetch back
        is not at its end: a node that joined the group then would wait for its owners
        behind a long log."""
        started = time.monotonic()
        trusted = self.config.trusts_broker
        while time.monotonic() - started < timeout_s:
            if self.view.failure is not None:
                raise RuntimeError(f"the view consumer failed: {self.view.failure}")
            idle = time.monotonic() - self.view.stats.last_record_at >= idle_s
            if self.view.reached_end and (trusted or idle):
                self.caught_up.set()
                offsets = self.store.offsets()
                log.info(
                    "view caught up in %.1f s: %d records below the stored offsets",
                    time.monotonic() - started,
                    sum(offsets.values()),
                )
                return
            time.sleep(0.05)
        raise TimeoutError(f"the view did not catch up in {timeout_s:.0f}s")

    def stop(self) -> None:
        self.membership.stop()
        with self._lock:
            owners, self._owners = list(self._owners.values()), {}
        for owner in owners:  # normally already stopped by the revocation
            owner.stop()
        self.view.stop()
        try:
            self.store.close()
        except Exception as exc:  # a view failing its writes cannot flush: said, not raised
            log.error("closing the view failed: %s: %s", type(exc).__name__, exc)

    # --- ownership -----------------------------------------------------------------------

    def _assigned(self, partitions: list[int]) -> None:
        for p in partitions:
            owner = self._writers(
                self.config,
                p,
                self._records,
                self.view,
                self.url,
                self._clock_us,
                functools.partial(self.membership.owns, p),
                self._metrics,
            )
            with self._lock:
                previous = self._owners.pop(p, None)
                self._owners[p] = owner
            if previous is not None:
                previous.stop()
            owner.start()

    def _revoked(self, partitions: list[int]) -> None:
        with self._lock:
            owners = [self._owners.pop(p) for p in partitions if p in self._owners]
        for owner in owners:
            owner.stop()  # queued writes fail with NotOwner; the forwarder retries

    def partition_of(self, tenant: str, catalog: str) -> int:
        return partition_for(tenant, catalog, self.config.partitions)

    def local_owner(self, partition: int) -> PartitionWriter | None:
        """The owner of ``partition`` on this node, whether ready or still taking over."""
        with self._lock:
            return self._owners.get(partition)

    def owned(self) -> list[int]:
        with self._lock:
            return sorted(p for p, owner in self._owners.items() if owner.ready)

    def route(self, partition: int) -> str | None:
        """The URL of the partition's latest owner, from its barrier in the log."""
        barrier = self.store.barrier(partition, "refs")
        return None if barrier is None else barrier.barrier.url
