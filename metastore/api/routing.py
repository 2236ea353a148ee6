"""Cluster mode over HTTP: forward writes to the partition's owner, honour consistency tokens.

Clients never see ownership. A write runs the normal handler first; if the
catalog's partition is owned elsewhere the commit engine raises ``NotOwner``
before anything is written, and this middleware sends the same request (method,
path, query, headers, body) to the owner named by the partition's latest barrier
in the log. A "not owner" answer (the route was stale, or ownership is moving)
is retried with the fresh route after a short backoff, for at most
``forward_timeout_s``; then the client gets 503 with nothing written. A request
that was itself forwarded is never forwarded again, so requests cannot loop.

A forward is the client's request, byte for byte (the raw path and query, the
body, the client's own ``Authorization``, which the owner checks again, so the
commit is the client's), plus the forwarding node's signature made with the
cluster secret (``metastore.cluster.peer_auth``). A request is "forwarded" only
when ``metastore.api.peers`` verified that signature; a client's own
``Metastore-Forwarded-By`` header is refused there, never trusted here.

Read-your-writes: every acknowledged write carries a consistency token; the node
that answers waits until its own view has applied it, and a request that sends a
token waits (bounded, else 503) until this node's view has reached it.
"""

from __future__ import annotations

import asyncio
import json
import logging

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Handler
from multidict import CIMultiDict
from yarl import URL

from metastore.api.peers import PEER
from metastore.api.tenancy import check_token
from metastore.api.typedefs import CLUSTER, CONFIG, HTTP_CLIENT, PEERS, ROUTING_STATS
from metastore.cluster.node import ClusterNode
from metastore.cluster.peer_auth import FORWARDED_HEADER, SIGNATURE_HEADER
from metastore.consistency import HEADER, WRITTEN, ConsistencyToken
from metastore.errors import CommitStateUnknown, NotOwner, ServiceUnavailable

log = logging.getLogger(__name__)

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# never copied between the client's connection and the owner's
_HOP_BY_HOP = frozenset(
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
        FORWARDED_HEADER.lower(),  # set by this node, signed
        SIGNATURE_HEADER.lower(),
    }
)


@web.middleware
async def route_writes(request: web.Request, handler: Handler) -> web.StreamResponse:
    node = request.app[CLUSTER]
    config = request.app[CONFIG]
    sent = request.headers.get(HEADER)
    if sent is not None:
        token = ConsistencyToken.parse(sent, node.config.partitions)
        check_token(request, token)  # another tenant's token: 400 before any wait
        await wait_for_token(node, token, config.consistency_wait_s)
    if request.method in SAFE_METHODS:
        return await handler(request)
    body = await request.read()  # cached: the handler and a forward both use it
    loop = asyncio.get_running_loop()
    deadline = loop.time() + config.forward_timeout_s
    delay = 0.05
    partition: int | None = None
    while True:
        route = None if partition is None else node.route(partition)
        if route is None or route == node.url:
            try:
                return _with_token(await handler(request))
            except NotOwner as exc:
                if exc.partition is None or request.get(PEER) is not None:
                    raise  # the forwarding node retries with a fresh route
                partition = exc.partition
        else:
            forwarded = await _forward(request, route, body)
            if forwarded is not None:
                return forwarded
        if loop.time() + delay > deadline:
            raise ServiceUnavailable(
                f"no owner of partition {partition} accepted the write within "
                f"{config.forward_timeout_s:.0f}s; nothing was written, retry later"
            )
        await asyncio.sleep(delay)
        delay = min(0.5, delay * 2)


def _with_token(response: web.StreamResponse) -> web.StreamResponse:
    token = WRITTEN.get()
    if token is not None:
        response.headers[HEADER] = token.encode()
    return response


async def wait_for_token(
    node: ClusterNode,
    token: ConsistencyToken,
    timeout: float,  # noqa: ASYNC109 - every wait is bounded, the bound is configuration
) -> None:
    if not await node.view.wait_for("refs", token.partition, token.offset, timeout):
        raise ServiceUnavailable(
            f"this node's view has not reached {token.encode()} within {timeout:.0f}s; "
            "retry, or read from the node that answered the write"
        )


async def _forward(request: web.Request, url: str, body: bytes) -> web.StreamResponse | None:
    """The owner's answer, or None when it was not (yet) the owner or could not be reached
    before anything was sent (both safe to retry)."""
    app = request.app
    node = app[CLUSTER]
    stats = app[ROUTING_STATS]
    peers = app[PEERS]
    headers = CIMultiDict(
        (k, v) for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP
    )
    path_qs = request.rel_url.raw_path_qs  # as the client sent it: signed, sent unchanged
    authorization = request.headers.get("Authorization")
    headers.update(peers.sign(request.method, url, path_qs, body, authorization))
    stats["forwarded"] += 1
    try:
        async with app[HTTP_CLIENT].request(
            request.method,
            URL(url.rstrip("/") + path_qs, encoded=True),
            data=body,
            headers=headers,
            allow_redirects=False,
            ssl=peers.client_ssl if peers.client_ssl is not None else True,
        ) as answer:
            payload = await answer.read()
            if answer.status == 503 and _not_owner(payload):
                stats["forward_retries"] += 1
                return None
            response = web.Response(status=answer.status, body=payload)
            for key, value in answer.headers.items():
                if key.lower() not in _HOP_BY_HOP:
                    response.headers.add(key, value)
    except aiohttp.ClientConnectorError as exc:  # never connected: nothing was sent
        log.info("owner %s unreachable (%s); retrying with a fresh route", url, exc)
        stats["forward_retries"] += 1
        return None
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise CommitStateUnknown(
            f"commit state unknown: the owner at {url} did not answer ({exc!r})"
        ) from None
    token = answer.headers.get(HEADER)
    if token is not None:
        try:
            parsed = ConsistencyToken.parse(token, node.config.partitions)
            await wait_for_token(node, parsed, app[CONFIG].consistency_wait_s)
        except ServiceUnavailable:
            log.warning("view did not reach %s in time; answering anyway (token attached)", token)
    return response


def _not_owner(payload: bytes) -> bool:
    try:
        error = json.loads(payload)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return isinstance(error, dict) and error.get("type") == NotOwner.error_type
