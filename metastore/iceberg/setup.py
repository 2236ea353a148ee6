"""Wiring of the Iceberg REST layer into the node's aiohttp app."""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from metastore.api.typedefs import METASTORE, STORAGE
from metastore.codec import default_codec
from metastore.iceberg import catalog_routes, table_routes, token_routes, view_routes
from metastore.iceberg.context import ICEBERG, Iceberg
from metastore.iceberg.files import Warehouse
from metastore.iceberg.tables import Tables
from metastore.iceberg.views import Views


def setup_iceberg(app: web.Application) -> None:
    """Routes and the services (after the metastore's own context)."""
    app.add_routes(catalog_routes.routes)
    app.add_routes(token_routes.routes)
    app.add_routes(table_routes.routes)
    app.add_routes(view_routes.routes)
    app.cleanup_ctx.append(_iceberg_ctx)


async def _iceberg_ctx(app: web.Application) -> AsyncIterator[None]:
    metastore = app[METASTORE]
    warehouse = Warehouse(app[STORAGE])
    tables = Tables(metastore, default_codec(), warehouse)
    app[ICEBERG] = Iceberg(tables, Views(metastore, default_codec(), warehouse, tables), warehouse)
    yield
