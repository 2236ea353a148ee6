"""Wiring of the Iceberg REST layer into the node's aiohttp app."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from functools import partial

from aiohttp import web
from aiohttp.typedefs import Handler

from metastore.api.bootstrap import bootstrapping
from metastore.api.peers import is_node_request
from metastore.api.typedefs import CONFIG, METASTORE, PENDING
from metastore.codec import default_codec
from metastore.iceberg import catalog_routes, table_routes, token_routes, view_routes
from metastore.iceberg.attempts import Attempts, FailureWindow
from metastore.iceberg.auth import Authenticator
from metastore.iceberg.context import ICEBERG, PRINCIPAL, Iceberg
from metastore.iceberg.files import Warehouse
from metastore.iceberg.hashing import HashPool
from metastore.iceberg.tables import Tables
from metastore.iceberg.views import Views

OPEN_PATHS = frozenset({"/health", "/metrics", "/v1/oauth/tokens"})


def setup_iceberg(app: web.Application) -> None:
    """Routes, the auth middleware and the services (after the metastore's own context)."""
    app.add_routes(catalog_routes.routes)
    app.add_routes(token_routes.routes)
    app.add_routes(table_routes.routes)
    app.add_routes(view_routes.routes)
    app.middlewares.append(authenticate)
    app.cleanup_ctx.append(_iceberg_ctx)


async def _iceberg_ctx(app: web.Application) -> AsyncIterator[None]:
    config = app[CONFIG]
    metastore = app[METASTORE]
    warehouse = Warehouse(config.warehouse_root, config.warehouse_properties)
    tables = Tables(metastore, default_codec(), warehouse)
    hashes = HashPool(config.token_hash_threads, config.token_hash_queue)
    attempts = Attempts(
        FailureWindow(config.token_failures_per_client, config.token_failure_window_s),
        FailureWindow(config.token_failures_per_address, config.token_failure_window_s),
    )
    auth = Authenticator(
        metastore, config.default_tenant, config.token_ttl_seconds, hashes, attempts
    )
    app[ICEBERG] = Iceberg(
        tables, Views(metastore, default_codec(), warehouse, tables), warehouse, auth
    )
    step = partial(auth.bootstrap, config.clients)
    try:
        async with bootstrapping(
            step, "token signing key", background=config.cluster_mode, pending=app[PENDING]
        ):
            yield
    finally:
        await asyncio.to_thread(hashes.close)


@web.middleware
async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
    """With auth on, every call but the open paths needs a valid bearer token."""
    if (
        request.app[CONFIG].auth_enabled
        and request.path not in OPEN_PATHS
        and not is_node_request(request)  # internal endpoints: proven by the node credential
    ):
        request[PRINCIPAL] = request.app[ICEBERG].auth.verify(request.headers.get("Authorization"))
    return await handler(request)
