"""The persistence contract in cluster mode: reads from this node's view, writes through
the partition's owner.

The commit engine above is the embedded one, unchanged: both deployments run one
code path, and only this backend differs. ``write`` hands the objects and the ref CAS to the
local owner of the catalog's partition, which checks the CAS against its view,
commits one Kafka transaction for many writes and returns once its view has
applied them. When this node is not the owner, ``write`` raises ``NotOwner``
(nothing written) and the HTTP layer forwards the whole request to the owner.

Updateable objects (node-id leases) of the system partition are written the same
way; a node that does not own it asks the owner over HTTP, because a node must
lease its snowflake node id before it can serve anything. That call
(``metastore.cluster.protocol.cas_updateable``) is signed with the cluster secret
(and made over mutual TLS when configured), like every node-to-node request.

The route to the owner comes from the partition's latest barrier, which may name a
node that is gone (a whole cluster restarting, one node at a time). A peer that
cannot be reached got nothing, so the call is retried (``metastore.util.retry``, backoff
up to 1 s) with a fresh route until the partition has a ready owner again, here or
elsewhere; that takes up to the group's session timeout (the broker expels the
departed owner only then) plus a takeover, and ``ClusterConfig.takeover_s`` bounds
the wait.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from concurrent.futures import TimeoutError as FutureTimeout

from metastore.cluster import protocol
from metastore.cluster.cluster_node import ClusterNode
from metastore.cluster.event_records import EventRecord, EventRecords
from metastore.cluster.peer_auth import Peers
from metastore.errors import CommitStateUnknown, NotOwner, RefConditionFailed, ServiceUnavailable
from metastore.model.codec import default_codec
from metastore.model.keys import ObjKey, RefKey
from metastore.persistence.base import Ref, RefUpdate, StoredObject, UpdateableObject
from metastore.util.retry import RetryPolicy

log = logging.getLogger(__name__)

REPORT_AFTER_S = 2.0  # a wait for an owner longer than this is logged once


class KafkaPersistence:
    def __init__(
        self, node: ClusterNode, peers: Peers, *, remote_timeout_s: float | None = None
    ) -> None:
        self.node = node
        self._peers = peers
        self._view = node.store
        # opt-in: each write's change events go into its owner's transaction
        self._events: EventRecords | None = None
        if node.config.publish_events:
            self._events = EventRecords(node.store, default_codec())
        # at least as long as a partition can be without a ready owner
        self.remote_timeout_s = (
            max(30.0, node.config.takeover_s) if remote_timeout_s is None else remote_timeout_s
        )

    # --- reads: this node's view -----------------------------------------------------------

    def get_objects(self, keys: Sequence[ObjKey]) -> list[StoredObject | None]:
        return self._view.get_objects(keys)

    def get_ref(self, key: RefKey) -> Ref | None:
        return self._view.get_ref(key)

    def scan_refs(self, tenant: str | None = None) -> Iterator[Ref]:
        return self._view.scan_refs(tenant)

    def scan_objects(self, tenant: str, catalog: str) -> Iterator[StoredObject]:
        return self._view.scan_objects(tenant, catalog)

    def get_updateable(self, key: ObjKey) -> UpdateableObject | None:
        return self._view.get_updateable(key)

    def close(self) -> None:
        """The node owns the view; it closes it."""

    # --- writes: through the owner ------------------------------------------------------------

    @property
    def _wait_s(self) -> float:
        # an owner bounds flush, commit and its view wait by the transaction timeout each
        return 3 * self.node.config.transaction_timeout_s + 5

    def write(
        self,
        objects: Sequence[StoredObject],
        ref_update: RefUpdate | None = None,
        deletes: Sequence[ObjKey] = (),
    ) -> None:
        """One transaction by the partition's owner: ``deletes`` become GC tombstones in
        the objects topic, ahead of ``objects``, in the same transaction as the ref record
        (and, with events published, the write's change events: ``event_records``)."""
        if ref_update is not None:
            tenant, catalog = ref_update.key.tenant, ref_update.key.catalog
        elif objects:
            tenant, catalog = objects[0].key.tenant, objects[0].key.catalog
        elif deletes:
            tenant, catalog = deletes[0].tenant, deletes[0].catalog
        else:
            return
        partition = self.node.partition_of(tenant, catalog)
        owner = self.node.local_owner(partition)
        if owner is None:
            raise NotOwner(f"this node does not own partition {partition}", partition)
        events: list[EventRecord] = []
        if self._events is not None:
            events = self._events.of_write(objects, ref_update)
        future = owner.submit(objects, ref_update, deletes, events)
        try:
            future.result(self._wait_s)
        except FutureTimeout:
            raise CommitStateUnknown(
                f"commit state unknown: partition {partition} owner did not answer in time"
            ) from None

    def cas_updateable(
        self, key: ObjKey, expected_token: str | None, new: UpdateableObject | None
    ) -> bool:
        partition = self.node.partition_of(key.tenant, key.catalog)
        # read at each call: a node shutting down shortens it for its lease release
        attempts = RetryPolicy(base_s=0.05, max_s=1.0, deadline_s=self.remote_timeout_s).start()
        reported = False
        while True:
            try:
                return self._cas_once(partition, key, expected_token, new)
            except NotOwner as exc:  # nothing ran: ask the partition's owner again
                if not reported and attempts.elapsed > REPORT_AFTER_S:
                    reported = True
                    log.info(
                        "waiting (up to %.0fs) for a ready owner of partition %d: %s",
                        self.remote_timeout_s,
                        partition,
                        exc.message,
                    )
                if not attempts.backoff():
                    raise ServiceUnavailable(
                        f"no owner of partition {partition} answered in "
                        f"{attempts.elapsed:.0f}s: {exc.message}"
                    ) from None

    def _cas_once(
        self, partition: int, key: ObjKey, expected: str | None, new: UpdateableObject | None
    ) -> bool:
        owner = self.node.local_owner(partition)
        if owner is not None and owner.ready:
            try:
                owner.submit_updateable(key, expected, new).result(self._wait_s)
            except RefConditionFailed:
                return False
            except FutureTimeout:
                raise CommitStateUnknown("updateable CAS: owner did not answer") from None
            return True
        url = self.node.route(partition)
        if url is None or url == self.node.url:
            raise NotOwner(f"partition {partition} has no ready owner yet", partition)
        cas = protocol.UpdateableCas(key, expected, new)
        return protocol.cas_updateable(self._peers, url, partition, cas, self._wait_s)
