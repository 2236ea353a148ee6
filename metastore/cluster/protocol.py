"""The node-to-node protocol: every call one node makes to another, both sides of it.

Nodes talk HTTP, the same listener as clients, and there are three calls:

- a **forwarded write**: the client's request, byte for byte (raw path and query,
  body, the client's own ``Authorization``, which the owner checks again), sent
  to the owner of the catalog's partition (``forward``, aiohttp, on the loop);
- the **updateable CAS** ``POST /internal/v1/updateables``: a compare-and-swap
  of a node-id lease at the owner of the system partition, which a starting node
  needs before it can serve anything (``cas_updateable``, blocking: the lease
  code runs in an executor), answered ``{"swapped": true|false}``;
- the **view state** ``GET /internal/v1/view``: a node's applied offsets and the
  digest of its view (operators and tests).

Every call names its sender (``FORWARDED_HEADER``) and carries the sender's
signature (``SIGNATURE_HEADER``), made and checked by ``metastore.cluster.peer_auth``;
``metastore.http.peers`` refuses an ``/internal/*`` request, or one naming a
sender, whose signature does not verify.

What a caller must tell apart, the same for every call: ``NotOwner`` means
nothing ran (the peer could not be reached, or answered "not owner"): retry with
a fresh route. ``CommitStateUnknown`` means the request was sent and its answer
lost: it may have run, never retry blindly. ``PeerRefused`` means the nodes are
configured differently (secret or CA): nothing to retry.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import ssl
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from metastore.errors import BadRequest, CommitStateUnknown, MetastoreError, NotOwner
from metastore.model.keys import ObjKey
from metastore.persistence.base import UpdateableObject
from metastore.util import logs
from metastore.util.tracing import HEADER as TRACEPARENT

log = logging.getLogger(__name__)

INTERNAL_PREFIX = "/internal/"  # only nodes may call what is under it
UPDATEABLES_PATH = "/internal/v1/updateables"
VIEW_PATH = "/internal/v1/view"

FORWARDED_HEADER = "Metastore-Forwarded-By"  # the sending node's URL
SIGNATURE_HEADER = "Metastore-Node-Signature"  # see peer_auth for its format

CONNECT_TIMEOUT_S = 5.0  # a peer that does not accept a connection by then is not there

# Never copied between the client's connection and the owner's: the connection's
# own headers, and the node headers, which the forwarding node sets and signs.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "content-encoding",
        "date",
        "server",
        FORWARDED_HEADER.lower(),
        SIGNATURE_HEADER.lower(),
        "origin",  # checked where the browser sent it (``http.origins``), not at the owner
    }
)


class PeerRefused(MetastoreError):
    """Another node refused this node's credential: the cluster secrets (or CAs) differ."""


class Signer(Protocol):
    """How the sending node signs its calls and reaches its peers (``peer_auth.Peers``)."""

    @property
    def client_ssl(self) -> ssl.SSLContext | None: ...

    def sign(
        self, method: str, target: str, path_qs: str, body: bytes, authorization: str | None
    ) -> dict[str, str]: ...


# --- what a request and its answer look like (both sides) -----------------------------------


def is_internal(path: str) -> bool:
    return path.startswith(INTERNAL_PREFIX)


def names_a_node(headers: Mapping[str, str]) -> bool:
    """The request claims to come from a node: it must prove it (``peer_auth``)."""
    return FORWARDED_HEADER in headers or SIGNATURE_HEADER in headers


@dataclass(frozen=True)
class UpdateableCas:
    """The body of ``POST /internal/v1/updateables``: swap ``expected`` for ``new``."""

    key: ObjKey
    expected: str | None
    new: UpdateableObject | None

    def encode(self) -> bytes:
        key = self.key
        new = self.new
        body: dict[str, Any] = {
            "key": {
                "tenant": key.tenant,
                "catalog": key.catalog,
                "type": key.type,
                "id": str(key.id),
            },
            "expected_token": self.expected,
            "new": None
            if new is None
            else {"data": base64.b64encode(new.data).decode(), "token": new.token},
        }
        return json.dumps(body).encode()

    @classmethod
    def decode(cls, raw: bytes) -> UpdateableCas:
        """The request a peer sent; a malformed one is a ``BadRequest`` (nothing runs)."""
        try:
            body: Any = json.loads(raw)
            k = body["key"]
            key = ObjKey(str(k["tenant"]), str(k["catalog"]), str(k["type"]), int(k["id"]))
            new = body["new"]
            obj = None
            if new is not None:
                data = base64.b64decode(new["data"], validate=True)
                obj = UpdateableObject(key, data, str(new["token"]))
            expected = body["expected_token"]
        except (ValueError, KeyError, TypeError) as exc:
            raise BadRequest(f"malformed updateable CAS request: {exc}") from None
        return cls(key, None if expected is None else str(expected), obj)


def cas_answer(swapped: bool) -> dict[str, bool]:
    return {"swapped": swapped}


def error_message(body: bytes) -> str:
    """The message of an error answer in the Iceberg shape, else its first bytes."""
    try:
        message = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return body[:200].decode(errors="replace")
    return str(message)


def is_not_owner_answer(status: int, body: bytes) -> bool:
    """The peer answered "not the owner" (``NotOwner``, 503): it ran nothing."""
    if status != NotOwner.status:
        return False
    try:
        error = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return isinstance(error, dict) and error.get("type") == NotOwner.error_type


# --- the calling side ------------------------------------------------------------------------


def connect(
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


def cas_updateable(
    signer: Signer, url: str, partition: int, cas: UpdateableCas, read_timeout_s: float
) -> bool:
    """Run ``cas`` at the owner at ``url`` (blocking): whether it swapped."""
    body = cas.encode()
    headers = {
        "Content-Type": "application/json",
        **signer.sign("POST", url, UPDATEABLES_PATH, body, None),
    }
    connection = connect(url, partition, signer.client_ssl, read_timeout_s)
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
    detail = error_message(answer)
    if status == NotOwner.status:
        raise NotOwner(f"{url}: {detail}", partition)
    if status == 401:  # refused before anything ran: a credential mismatch
        raise PeerRefused(
            f"the node at {url} refused this node's credential ({detail}): every node "
            "needs the same cluster secret (METASTORE_CLUSTER_SECRET or "
            "METASTORE_CLUSTER_SECRET_FILE) and, with mutual TLS, a certificate signed by "
            "the same CA (METASTORE_TLS_CA)"
        )
    raise CommitStateUnknown(f"updateable CAS at {url}: {status} {detail}")


async def forward(
    session: aiohttp.ClientSession,
    signer: Signer,
    url: str,
    request: web.Request,
    body: bytes,
) -> web.Response | None:
    """Send the client's ``request`` to the node at ``url`` and relay its answer; None when
    that node was not (yet) the owner or could not be reached before anything was sent
    (both safe to retry with a fresh route)."""
    headers = CIMultiDict((k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP)
    path_qs = request.rel_url.raw_path_qs  # as the client sent it: signed, sent unchanged
    headers.update(
        signer.sign(request.method, url, path_qs, body, request.headers.get("Authorization"))
    )
    context = logs.current()
    if context is not None:  # the owner's lines name the same request and trace (unsigned)
        headers[logs.REQUEST_ID_HEADER] = context.request_id
        headers[TRACEPARENT] = context.trace.header()
    try:
        async with session.request(
            request.method,
            URL(url.rstrip("/") + path_qs, encoded=True),
            data=body,
            headers=headers,
            allow_redirects=False,
            ssl=signer.client_ssl if signer.client_ssl is not None else True,
        ) as answer:
            payload = await answer.read()
            if is_not_owner_answer(answer.status, payload):
                return None
            response = web.Response(status=answer.status, body=payload)
            for key, value in answer.headers.items():
                if key.lower() not in HOP_BY_HOP:
                    response.headers.add(key, value)
            return response
    except aiohttp.ClientConnectorError as exc:  # never connected: nothing was sent
        log.info("owner %s unreachable (%s); retrying with a fresh route", url, exc)
        return None
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise CommitStateUnknown(
            f"commit state unknown: the owner at {url} did not answer ({exc!r})"
        ) from None
