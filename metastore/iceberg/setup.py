"""Wiring of the Iceberg REST layer into the node's aiohttp app: its routes and the
cleanup context of its services (after the metastore's and identity's)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from metastore.api.params import ICEBERG_SEPARATOR
from metastore.api.typedefs import CONFIG, ICEBERG, METASTORE, STORAGE
from metastore.codec import default_codec
from metastore.iceberg import (
    catalog_routes,
    credential_routes,
    report_routes,
    sign_routes,
    table_routes,
    token_routes,
    view_routes,
)
from metastore.iceberg.services import Iceberg

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
    namespace separator the Iceberg API's paths use (``metastore.api.params``)."""
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
