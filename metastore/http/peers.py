"""Cluster mode: which requests come from another node, and proof that they do.

A request is a node's request when it is addressed to ``/internal/v1/*`` or
names a sending node (``Metastore-Forwarded-By``, a forwarded write). With a
cluster secret configured, whatever the auth setting, such a request must carry
a valid node signature (``metastore.cluster.peer_auth``) and, with mutual TLS,
arrive on a connection that presented a certificate signed by the cluster's CA;
anything else is a 401 in the Iceberg error shape, before any handler runs. So a
client cannot reach the internal endpoints, and cannot pass a write off as
forwarded: a forwarded write is still authenticated as the client that sent it
(its ``Authorization`` header travels with it and is checked at the owner).
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Handler

from metastore.cluster import protocol, tls
from metastore.cluster.peer_auth import PeerKey, Peers
from metastore.config.server_config import ServerConfig
from metastore.errors import Unauthorized
from metastore.http.typedefs import PEERS

PEER = web.RequestKey("peer", str)  # the URL of the node that sent this request


def peers_from_config(config: ServerConfig) -> Peers:
    secret = config.cluster_key
    client_ssl = None
    if config.tls_cert or config.url.startswith("https://"):
        client_ssl = tls.client_context(config.tls_cert, config.tls_key, config.tls_ca)
    return Peers(
        url=config.url,
        key=PeerKey(secret) if secret else None,
        client_ssl=client_ssl,
        require_client_cert=bool(config.tls_ca),
    )


def is_node_request(request: web.Request) -> bool:
    """An internal endpoint called by a node this middleware has let through."""
    return protocol.is_internal(request.path) and request.get(PEER) is not None


@web.middleware
async def authenticate_peers(request: web.Request, handler: Handler) -> web.StreamResponse:
    if protocol.names_a_node(request.headers) or protocol.is_internal(request.path):
        request[PEER] = await _sender(request)
    return await handler(request)


async def _sender(request: web.Request) -> str:
    peers = request.app[PEERS]
    if peers.key is None:  # no cluster secret: auth is off, nothing to prove
        return request.headers.get(protocol.FORWARDED_HEADER, "")
    if peers.require_client_cert and not _client_certificate(request):
        raise Unauthorized(
            "node requests need a client certificate signed by the cluster CA (mutual TLS)"
        )
    body = await request.read()  # cached: the handler or a forward reads it again
    return peers.key.verify(
        request.method, peers.url, request.rel_url.raw_path_qs, body, request.headers
    )


def _client_certificate(request: web.Request) -> bool:
    transport = request.transport
    return transport is not None and bool(transport.get_extra_info("peercert"))
