"""The Iceberg routes without a prefix: ``/v1/namespaces``, ``/v1/tables/rename``, ...

The REST specification's ``{prefix}`` is optional: a client configured without a
warehouse may skip ``/v1/config`` and call ``/v1/namespaces`` straight away. Every
route under ``/v1/{prefix}/`` therefore has a twin without the prefix, with the same
handler and the same authorization rule (``metastore.node.route_privileges``); it serves the
catalog ``/v1/config`` gives without a ``warehouse``: ``default`` of the caller's own
tenant (of the default tenant with authentication off), read from the names alone
(``metastore.iceberg.routes.context.catalog_of``). The twins are made from the router once
every route is added, so a route added under the prefix gets its twin without more
wiring.

aiohttp resolves a path by its longest literal start first, so a path both kinds
match (``/v1/namespaces/namespaces``) is the twin's; ``metastore.iceberg.prefixes``
never gives ``namespaces`` as a bare prefix for that reason.
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.abc import AbstractView
from aiohttp.typedefs import Handler

PREFIXED = "/v1/{prefix}/"
UNPREFIXED = "/v1/"


def unprefixed(template: str) -> str | None:
    """``/v1/{prefix}/x`` -> ``/v1/x``; None for a template without the prefix."""
    if not template.startswith(PREFIXED):
        return None
    return UNPREFIXED + template.removeprefix(PREFIXED)


def add_unprefixed(router: web.UrlDispatcher) -> None:
    """Give every route under ``/v1/{prefix}/`` its twin without the prefix (the same
    methods, ``HEAD`` twins of ``GET`` routes included, and handlers)."""
    twins: dict[str, list[tuple[str, Handler | type[AbstractView]]]] = {}
    for route in list(router.routes()):
        if route.resource is None:
            continue
        path = unprefixed(route.resource.canonical)
        if path is not None:
            twins.setdefault(path, []).append((route.method, route.handler))
    for path, routes in twins.items():
        resource = router.add_resource(path)
        for method, handler in routes:
            resource.add_route(method, handler)
