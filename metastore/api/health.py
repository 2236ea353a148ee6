"""Liveness/readiness and counters."""

from __future__ import annotations

from aiohttp import web

from metastore.api.typedefs import LEASER, METASTORE, STATS

routes = web.RouteTableDef()


@routes.get("/health")
async def health(request: web.Request) -> web.Response:
    metastore = request.app[METASTORE]
    lease = request.app[LEASER].lease
    body = {
        "status": "ok" if metastore.writable else "degraded",
        "mode": "embedded",
        "writable": metastore.writable,
        "node-id": lease.node_id if lease is not None else None,
    }
    return web.json_response(body, status=200 if metastore.writable else 503)


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    """Prometheus text exposition of the engine's counters."""
    lines = []
    for name, (kind, help_text, value) in request.app[STATS]().items():
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name} {value}"]
    return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")
