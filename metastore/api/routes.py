"""All routes in one place: both APIs, and the node-to-node endpoints of a cluster."""

from __future__ import annotations

from aiohttp import web

from metastore.api import (
    describe,
    health,
    internal,
    native_admin,
    native_checkpoints,
    native_cluster,
    native_diffs,
    native_entities,
    native_events,
    native_gc,
    native_grants,
    native_principals,
    native_reports,
    native_tasks,
)
from metastore.api.route_index import index_groups
from metastore.config import ServerConfig
from metastore.console.routes import routes as console_routes
from metastore.iceberg.setup import ROUTES as ICEBERG_ROUTES
from metastore.iceberg.unprefixed import add_unprefixed


def setup_routes(app: web.Application, config: ServerConfig) -> None:
    index_groups(app.router)  # first: tried before the routes it indexes
    app.add_routes(health.routes)
    describe.setup_api_documents(app)  # the API's descriptions, read from this route table
    app.add_routes(native_admin.routes)
    app.add_routes(native_checkpoints.routes)
    app.add_routes(native_entities.routes)
    app.add_routes(native_events.routes)
    app.add_routes(native_principals.routes)
    app.add_routes(native_grants.routes)
    app.add_routes(native_gc.routes)
    app.add_routes(native_tasks.routes)
    app.add_routes(native_reports.routes)
    app.add_routes(native_diffs.routes)
    app.add_routes(native_cluster.routes)
    app.add_routes(console_routes)
    if config.cluster_mode:
        app.add_routes(internal.routes)
    for table in ICEBERG_ROUTES:
        app.add_routes(table)
    add_unprefixed(app.router)  # last: every Iceberg route under /v1/{prefix}/ gets its twin
