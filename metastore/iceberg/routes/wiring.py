"""Wiring of the Iceberg REST layer into the node's aiohttp app: its routes and the
cleanup context of its services (after the metastore's and identity's)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from metastore.http.params import ICEBERG_SEPARATOR
from metastore.http.typedefs import CONFIG, ICEBERG, METASTORE, STORAGE
from metastore.iceberg.routes import (
    catalog_routes,
    credential_routes,
    sign_routes,
    table_routes,
    token_routes,
    view_routes,
)
from metastore.iceberg.routes import metrics_routes as report_routes
from metastore.iceberg.services import Iceberg
from metastore.model.codec import default_codec

ROUTES = (
    catalog_routes.routes,
    token_routes.routes,
    table_routes.routes,
    report_routes.routes,
    sign_routes.routes,
    credential_routes.routes,
    view_routes.routes,
)


async def iceberg_ctx(app: web.Application) -> AsyncIterator[None]:
    """Tables and views over the metastore, their files in each catalog's storage; the
    namespace separator the Iceberg API's paths use (``metastore.http.params``)."""
    app[ICEBERG_SEPARATOR] = app[CONFIG].namespace_separator
    config = app[CONFIG]
    app[ICEBERG] = Iceberg.build(
        app[METASTORE],
        app[STORAGE],
        default_codec(),
        config.iceberg_load_cache_bytes,
        sync=config.fsync,
        read_limit=config.max_metadata_file_bytes,
    )
    yield
