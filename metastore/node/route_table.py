"""All routes in one place: both APIs, and the node-to-node endpoints of a cluster."""

from __future__ import annotations

from aiohttp import web

from metastore.config.server_config import ServerConfig
from metastore.console.console_routes import routes as console_routes
from metastore.http.route_index import index_groups
from metastore.iceberg.routes.unprefixed import add_unprefixed
from metastore.iceberg.routes.wiring import ROUTES as ICEBERG_ROUTES
from metastore.native import admin_routes as native_admin
from metastore.native import checkpoint_routes as native_checkpoints
from metastore.native import cluster_routes as native_cluster
from metastore.native import diff_routes as native_diffs
from metastore.native import entity_routes as native_entities
from metastore.native import event_routes as native_events
from metastore.native import gc_routes as native_gc
from metastore.native import grant_routes as native_grants
from metastore.native import principal_routes as native_principals
from metastore.native import report_routes as native_reports
from metastore.native import task_routes as native_tasks
from metastore.node import describe, health
from metastore.node import peer_routes as internal


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
