"""Liveness/readiness and counters."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from aiohttp import web

from metastore.http.typedefs import (
    CLUSTER,
    LEASER,
    METASTORE,
    METRICS,
    PENDING,
    STATS,
    WRITE_FAILURES,
)

routes = web.RouteTableDef()


@routes.get("/health")
async def health(request: web.Request) -> web.Response:
    metastore = request.app[METASTORE]
    lease = request.app[LEASER].lease
    failing = request.app[WRITE_FAILURES].failing  # the store refuses writes for now
    writable = metastore.writable and failing is None
    body: dict[str, object] = {
        "status": "ok" if writable else "degraded",
        "mode": "embedded",
        "writable": writable,
        "node-id": lease.node_id if lease is not None else None,
    }
    if failing is not None:
        body["write-failures"] = {
            "since": datetime.fromtimestamp(failing.since, UTC).isoformat(),
            "count": failing.count,
            "first-error": failing.first_error,
        }
    waiting: set[str] = request.app[PENDING]
    pending = sorted(waiting)
    node = request.app.get(CLUSTER)
    if pending:  # cluster mode: the owner elsewhere has not written them yet
        body |= {"status": "starting", "waiting-for": pending}
    if node is not None:
        body |= {
            "mode": "cluster",
            "url": node.url,
            "caught-up": node.caught_up.is_set(),
            "owned-partitions": node.owned(),
            "view-dropped": node.store.dropped,
        }
    ready = writable and not pending
    return web.json_response(body, status=200 if ready else 503)


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    """Prometheus text exposition of the engine's counters (a name with labels,
    ``name{label="..."}``, shares one HELP and TYPE line with its siblings), then the
    histograms (``metastore.util.metrics``, rendered in a thread: a few thousand lines)."""
    histograms = await asyncio.to_thread(request.app[METRICS].exposition)
    lines = []
    described: set[str] = set()
    for name, (kind, help_text, value) in request.app[STATS]().items():
        family = name.split("{", 1)[0]
        if family not in described:
            described.add(family)
            lines += [f"# HELP {family} {help_text}", f"# TYPE {family} {kind}"]
        lines.append(f"{name} {value}")
    text = "\n".join(lines) + "\n" + histograms.decode()
    return web.Response(text=text, content_type="text/plain")
