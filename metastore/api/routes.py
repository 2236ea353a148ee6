"""All routes in one place."""

from __future__ import annotations

from aiohttp import web

from metastore.api import (
    health,
    native_admin,
    native_entities,
    native_grants,
    native_principals,
)


def setup_routes(app: web.Application) -> None:
    app.add_routes(health.routes)
    app.add_routes(native_admin.routes)
    app.add_routes(native_entities.routes)
    app.add_routes(native_principals.routes)
    app.add_routes(native_grants.routes)
