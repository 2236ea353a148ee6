"""``create_app(config)``: the metastore node as an aiohttp application.

The wiring in one place: the middleware chain, the cleanup contexts in startup
order (``metastore.node.contexts``: each context's cleanup runs iff its startup
finished, in reverse order, so on graceful shutdown the lanes drain their
in-flight batches, the node-id lease is released, then RocksDB or the cluster node
is closed), and the routes. Embedded and cluster mode differ only in the cluster's
two extra middlewares and two extra contexts, the persistence they open and the
node-to-node routes.
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Middleware

from metastore.config.server_config import ServerConfig
from metastore.http.observe import observe
from metastore.http.origins import origin_guard
from metastore.http.peers import authenticate_peers, peers_from_config
from metastore.http.tenancy import setup_tenancy
from metastore.http.typedefs import CONFIG, METRICS, PEERS, PENDING
from metastore.iceberg.routes.wiring import iceberg_ctx
from metastore.native.event_routes import setup_feed
from metastore.node import contexts
from metastore.node.forwarding import honor_token, route_writes
from metastore.node.identity_setup import identity_ctx
from metastore.node.middlewares import authenticate, authorize, errors, read_body, tenancy
from metastore.node.route_table import setup_routes
from metastore.util.metrics import NodeMetrics
from metastore.util.setting_rules import is_loopback


def create_app(config: ServerConfig) -> web.Application:
    app = web.Application(middlewares=middlewares(config), client_max_size=config.max_body_bytes)
    app[CONFIG] = config
    app[METRICS] = NodeMetrics()
    app[PENDING] = set()
    setup_tenancy(app)
    setup_feed(app)
    if config.cluster_mode:
        app[PEERS] = peers_from_config(config)
    app.cleanup_ctx.extend(cleanup_contexts(config))
    setup_routes(app, config)
    return app


def middlewares(config: ServerConfig) -> list[Middleware]:
    """Every request passes these, in this order (``metastore.node.middlewares``; first
    ``metastore.http.observe``: its id, trace, log context, access line and histogram)."""
    trusts_loopback = not config.auth_enabled and is_loopback(config.host)
    chain: list[Middleware] = [observe, errors, origin_guard(trusts_loopback), read_body]
    if config.cluster_mode:
        # node requests are proven (cluster secret, mTLS) before anything acts on them
        chain += [authenticate_peers, route_writes]
    # after the routing: a forwarded write is checked at its owner
    chain += [authenticate, tenancy]
    if config.cluster_mode:  # a consistency token is waited for once its sender is known
        chain.append(honor_token)
    chain.append(authorize)
    return chain


def cleanup_contexts(config: ServerConfig) -> list[contexts.Context]:
    """The node's resources in startup order; each reads only what those before it set."""
    cluster = config.cluster_mode
    return [
        contexts.collector_pauses_ctx,
        *([contexts.cluster_ctx] if cluster else []),
        contexts.persistence_ctx,
        contexts.commit_threads_ctx,
        *([contexts.http_client_ctx] if cluster else []),
        contexts.lease_ctx,
        contexts.engine_ctx,
        contexts.renewal_ctx,
        contexts.bootstrap_ctx,
        identity_ctx,
        iceberg_ctx,
        contexts.authorizer_ctx,
    ]
