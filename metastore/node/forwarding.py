"""Cluster mode over HTTP: forward writes to the partition's owner, honour consistency tokens.

Clients never see ownership. A write runs the normal handler first; if the
catalog's partition is owned elsewhere the commit engine raises ``NotOwner``
before anything is written, and this middleware sends the same request (method,
path, query, headers, body) to the owner named by the partition's latest barrier
in the log. A "not owner" answer (the route was stale, or ownership is moving)
is retried with the fresh route after a short backoff (``metastore.util.retry``, up
to 0.5 s), for at most ``forward_timeout_s``; then the client gets 503 with
nothing written. A request that was itself forwarded is never forwarded again,
so requests cannot loop.

A forward (``metastore.cluster.protocol.forward``) is the client's request, byte
for byte (the raw path and query, the body, the client's own ``Authorization``,
which the owner checks again, so the commit is the client's), plus the forwarding
node's signature made with the cluster secret (``metastore.cluster.peer_auth``).
A request is "forwarded" only when ``metastore.http.peers`` verified that
signature; a client's own ``Metastore-Forwarded-By`` header is refused there,
never trusted here.

Read-your-writes: every acknowledged write carries a consistency token; the node
that answers waits until its own view has applied it, and a request that sends a
token waits (bounded, else 503) until this node's view has reached it.
"""

from __future__ import annotations

import asyncio
import logging
import time

from aiohttp import web
from aiohttp.typedefs import Handler

from metastore.catalog.consistency import HEADER, WRITTEN, ConsistencyToken
from metastore.cluster import protocol
from metastore.cluster.cluster_node import ClusterNode
from metastore.errors import NotOwner, ServiceUnavailable
from metastore.http.caller import PRINCIPAL
from metastore.http.peers import PEER
from metastore.http.tenancy import TOKEN_PATH, UNSCOPED, check_token
from metastore.http.typedefs import (
    CLUSTER,
    CONFIG,
    HTTP_CLIENT,
    IDENTITY,
    METRICS,
    PEERS,
    ROUTING_STATS,
)
from metastore.http.validation import body_of
from metastore.node.middlewares import is_open
from metastore.util.retry import RetryPolicy

log = logging.getLogger(__name__)

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
TOKEN = web.RequestKey("consistency-token", ConsistencyToken)  # sent, checked, not waited yet


@web.middleware
async def route_writes(request: web.Request, handler: Handler) -> web.StreamResponse:
    node = request.app[CLUSTER]
    config = request.app[CONFIG]
    sent = request.headers.get(HEADER)
    if sent is not None:
        token = ConsistencyToken.parse(sent, node.config.partitions)
        check_token(request, token)  # another tenant's token: 400 before any wait
        request[TOKEN] = token  # waited for once the caller is known (``honor_token``)
    if request.method in SAFE_METHODS:
        return await handler(request)
    # as decoded (``read_body``): a forward drops the client's Content-Encoding, so it
    # sends, and signs, the body the handler here would have read
    body = body_of(request)
    attempts = RetryPolicy(base_s=0.05, max_s=0.5, deadline_s=config.forward_timeout_s).start(
        clock=asyncio.get_running_loop().time
    )
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
        # nothing was written: ask the (possibly new) owner again
        if not await attempts.abackoff():
            raise ServiceUnavailable(
                f"no owner of partition {partition} accepted the write within "
                f"{config.forward_timeout_s:.0f}s; nothing was written, retry later"
            )


@web.middleware
async def honor_token(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Wait until this node's view has applied the request's consistency token: after
    authentication and the token's tenant check (``tenancy``), so only a caller with a
    token a node issued to its tenant makes a node wait. Before them, anyone could hold
    any request for the whole bound, and the time it took told how far a partition's
    log, every tenant's writes on it, had come. The open paths never wait, but for the
    token endpoint: its client id names the tenant the token was checked against
    (``tenancy.check_token``), and a principal created through another node signs in
    here once this node has applied it. After the wait the caller is verified again:
    its principal disabled through another node, with this token, is refused here too."""
    token = request.get(TOKEN)
    checked = request.path == TOKEN_PATH and request.get(UNSCOPED) is None
    if token is not None and (not is_open(request.path) or checked):
        config = request.app[CONFIG]
        await wait_for_token(request.app[CLUSTER], token, config.consistency_wait_s)
        if request.get(PRINCIPAL) is not None:
            # verified on the view before the wait: the token may carry a change of the
            # caller itself (disabled, deleted, its secret rotated), which counts now
            header = request.headers.get("Authorization")
            request[PRINCIPAL] = await request.app[IDENTITY].auth.verify(header)
    return await handler(request)


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
    stats["forwarded"] += 1
    started = time.perf_counter()
    outcome = "unknown"  # no answer: CommitStateUnknown
    try:
        response = await protocol.forward(app[HTTP_CLIENT], app[PEERS], url, request, body)
        outcome = "retried" if response is None else "answered"
    finally:
        app[METRICS].forwards.labels(outcome).observe(time.perf_counter() - started)
    if response is None:
        stats["forward_retries"] += 1
        return None
    token = response.headers.get(HEADER)
    if token is not None:
        try:
            parsed = ConsistencyToken.parse(token, node.config.partitions)
            await wait_for_token(node, parsed, app[CONFIG].consistency_wait_s)
        except ServiceUnavailable:
            log.warning("view did not reach %s in time; answering anyway (token attached)", token)
    return response
