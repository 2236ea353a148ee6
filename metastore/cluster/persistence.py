"""The persistence contract in cluster mode: reads from this node's view, writes through
the partition's owner.

The commit engine above is the embedded one, unchanged (DESIGN.md "Two
deployments, one code path"). ``write`` hands the objects and the ref CAS to the
local owner of the catalog's partition, which checks the CAS against its view,
commits one Kafka transaction for many writes and returns once its view has
applied them. When this node is not the owner, ``write`` raises ``NotOwner``
(nothing written) and the HTTP layer forwards the whole request to the owner.

Updateable objects (node-id leases) of the system partition are written the same
way; a node that does not own it asks the owner over HTTP, because a node must
lease its snowflake node id before it can serve anything. That call is signed
with the cluster secret (and made over mutual TLS when configured), like every
node-to-node request.
"""

from __future__ import annotations

import base64
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from metastore.cluster.node import ClusterNode
from metastore.cluster.peer_auth import PeerRefused, Peers
from metastore.errors import CommitStateUnknown, NotOwner, RefConditionFailed, ServiceUnavailable
from metastore.keys import ObjKey, RefKey
from metastore.persistence.base import Ref, RefUpdate, StoredObject, UpdateableObject

log = logging.getLogger(__name__)

UPDATEABLES_PATH = "/internal/v1/updateables"


class KafkaPersistence:
    def __init__(self, node: ClusterNode, peers: Peers, *, remote_timeout_s: float = 30.0) -> None:
        self.node = node
        self._peers = peers
        self._view = node.store
        self.remote_timeout_s = remote_timeout_s

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

    def write(self, objects: Sequence[StoredObject], ref_update: RefUpdate | None = None) -> None:
        if ref_update is not None:
            tenant, catalog = ref_update.key.tenant, ref_update.key.catalog
        elif objects:
            tenant, catalog = objects[0].key.tenant, objects[0].key.catalog
        else:
            return
        partition = self.node.partition_of(tenant, catalog)
        owner = self.node.local_owner(partition)
        if owner is None:
            raise NotOwner(f"this node does not own partition {partition}", partition)
        future = owner.submit(objects, ref_update)
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
        deadline = time.monotonic() + self.remote_timeout_s
        delay = 0.05
        while True:
            try:
                return self._cas_once(partition, key, expected_token, new)
            except NotOwner as exc:
                if time.monotonic() + delay > deadline:
                    raise ServiceUnavailable(
                        f"no owner of partition {partition} answered: {exc.message}"
                    ) from None
                time.sleep(delay)
                delay = min(1.0, delay * 2)

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
        return self._remote_cas(url, partition, key, expected, new)

    def _remote_cas(
        self,
        url: str,
        partition: int,
        key: ObjKey,
        expected: str | None,
        new: UpdateableObject | None,
    ) -> bool:
        body = json.dumps(updateable_request(key, expected, new)).encode()
        signed = self._peers.sign("POST", url, UPDATEABLES_PATH, body, None)
        request = urllib.request.Request(
            url + UPDATEABLES_PATH,
            data=body,
            method="POST",
            headers={"Content-Type": "application/json", **signed},
        )
        context = self._peers.client_ssl
        try:
            with urllib.request.urlopen(request, timeout=self._wait_s, context=context) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:500].decode(errors="replace")
            if exc.code == 503:
                raise NotOwner(f"{url}: {detail}", partition) from None
            if exc.code == 401:  # refused before anything ran: a credential mismatch
                raise PeerRefused(
                    f"the node at {url} refused this node's credential ({detail}); every node "
                    "needs the same cluster secret (and, with mutual TLS, a certificate "
                    "signed by the same CA)"
                ) from None
            raise CommitStateUnknown(f"updateable CAS at {url}: {exc.code} {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            # refused before sending: nothing written; anything later: unknown
            if isinstance(getattr(exc, "reason", None), ConnectionRefusedError):
                raise NotOwner(f"{url} is not reachable", partition) from None
            raise CommitStateUnknown(f"updateable CAS at {url}: {exc}") from None
        return bool(answer["swapped"])


def updateable_request(
    key: ObjKey, expected: str | None, new: UpdateableObject | None
) -> dict[str, Any]:
    return {
        "key": {"tenant": key.tenant, "catalog": key.catalog, "type": key.type, "id": str(key.id)},
        "expected_token": expected,
        "new": None
        if new is None
        else {"data": base64.b64encode(new.data).decode(), "token": new.token},
    }


def parse_updateable_request(
    body: dict[str, Any],
) -> tuple[ObjKey, str | None, UpdateableObject | None]:
    k = body["key"]
    key = ObjKey(str(k["tenant"]), str(k["catalog"]), str(k["type"]), int(k["id"]))
    new = body["new"]
    obj = None
    if new is not None:
        obj = UpdateableObject(key, base64.b64decode(new["data"], validate=True), str(new["token"]))
    expected = body["expected_token"]
    return key, None if expected is None else str(expected), obj
