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

The route to the owner comes from the partition's latest barrier, which may name a
node that is gone (a whole cluster restarting, one node at a time). A peer that
cannot be reached got nothing, so the call is retried with a fresh route until the
partition has a ready owner again, here or elsewhere; that takes up to the group's
session timeout (the broker expels the departed owner only then) plus a takeover,
and ``ClusterConfig.takeover_s`` bounds the wait.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import ssl
import time
import urllib.parse
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
CONNECT_TIMEOUT_S = 5.0  # a peer that does not accept a connection by then is not there


class KafkaPersistence:
    def __init__(
        self, node: ClusterNode, peers: Peers, *, remote_timeout_s: float | None = None
    ) -> None:
        self.node = node
        self._peers = peers
        self._view = node.store
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
        started = time.monotonic()
        deadline = started + self.remote_timeout_s
        delay = 0.05
        reported = False
        while True:
            try:
                return self._cas_once(partition, key, expected_token, new)
            except NotOwner as exc:
                if time.monotonic() + delay > deadline:
                    raise ServiceUnavailable(
                        f"no owner of partition {partition} answered in "
                        f"{time.monotonic() - started:.0f}s: {exc.message}"
                    ) from None
                if not reported and time.monotonic() - started > 2.0:
                    reported = True
                    log.info(
                        "waiting (up to %.0fs) for a ready owner of partition %d: %s",
                        self.remote_timeout_s,
                        partition,
                        exc.message,
                    )
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
        headers = {
            "Content-Type": "application/json",
            **self._peers.sign("POST", url, UPDATEABLES_PATH, body, None),
        }
        connection = connect_to_peer(url, partition, self._peers.client_ssl, self._wait_s)
        try:
            connection.request("POST", UPDATEABLES_PATH, body, headers)
            response = connection.getresponse()
            status, answer = response.status, response.read()
        except (OSError, http.client.HTTPException) as exc:  # sent: it may have run
            raise CommitStateUnknown(f"updateable CAS at {url}: {exc}") from None
        finally:
            connection.close()
        if status == 200:
            try:
                return bool(json.loads(answer)["swapped"])
            except (ValueError, KeyError, TypeError):
                raise CommitStateUnknown(f"updateable CAS at {url}: bad answer") from None
        detail = _error_message(answer)
        if status == 503:
            raise NotOwner(f"{url}: {detail}", partition)
        if status == 401:  # refused before anything ran: a credential mismatch
            raise PeerRefused(
                f"the node at {url} refused this node's credential ({detail}): every node "
                "needs the same cluster secret (METASTORE_CLUSTER_SECRET or "
                "METASTORE_CLUSTER_SECRET_FILE) and, with mutual TLS, a certificate signed by "
                "the same CA (METASTORE_TLS_CA)"
            )
        raise CommitStateUnknown(f"updateable CAS at {url}: {status} {detail}")


def connect_to_peer(
    url: str, partition: int, context: ssl.SSLContext | None, read_timeout_s: float
) -> http.client.HTTPConnection:
    """An open connection to the peer at ``url``. One that cannot be made (the name no
    longer resolves, refused, unreachable, no answer within CONNECT_TIMEOUT_S) sent
    nothing: ``NotOwner``, so the caller retries with a fresh route. A peer whose
    certificate does not verify is a configuration mismatch: ``PeerRefused``."""
    parts = urllib.parse.urlsplit(url)
    host, port = parts.hostname or "", parts.port
    connection: http.client.HTTPConnection
    if parts.scheme == "https":
        connection = http.client.HTTPSConnection(
            host, port, timeout=CONNECT_TIMEOUT_S, context=context
        )
    else:
        connection = http.client.HTTPConnection(host, port, timeout=CONNECT_TIMEOUT_S)
    try:
        connection.connect()
    except ssl.SSLCertVerificationError as exc:
        connection.close()
        raise PeerRefused(
            f"the certificate of the node at {url} does not verify ({exc.verify_message}): "
            "every node needs a certificate signed by the CA in METASTORE_TLS_CA"
        ) from None
    except OSError as exc:
        connection.close()
        raise NotOwner(f"{url} is not reachable ({exc})", partition) from None
    assert connection.sock is not None
    connection.sock.settimeout(read_timeout_s)
    return connection


def _error_message(body: bytes) -> str:
    """The message of an error answer in the Iceberg shape, else its first bytes."""
    try:
        message = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return body[:200].decode(errors="replace")
    return str(message)


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
