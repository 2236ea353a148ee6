"""Native admin API: garbage collection through the node (service admins only).

A batch job marks what nothing reaches; the node deletes. ``POST .../gc/sweep``
deletes a batch of a mark's candidates in one "gc" commit of the catalog, sparing
any that a commit newer than the mark references again (``metastore.engine.sweep``); in
cluster mode it is a write like any other, forwarded to the partition's owner,
whose transaction carries the tombstones. ``POST .../gc/expire`` deletes the
catalog's idempotency records past their lifetime and collects its dropped tables and
views past the catalog's retention (purging their files, and finishing every purge a crash
cut short), ``POST /api/v1/admin/gc/leases``
the node-id leases expired long ago (``metastore.catalog.expiry``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from metastore.catalog.expiry import (
    collect_dropped,
    expire_idempotency,
    finish_purge,
    remove_node_leases,
)
from metastore.catalog.service import Metastore
from metastore.engine.tasks import JOBS, STATUSES
from metastore.http import params
from metastore.http.caller import principal_of
from metastore.http.typedefs import ICEBERG, METASTORE
from metastore.http.validation import body_of, read_json
from metastore.model.keys import ObjKey

routes = web.RouteTableDef()

CATALOG_GC = "/api/v1/tenants/{tenant}/catalogs/{catalog}/gc"
SWEEP = CATALOG_GC + "/sweep"
EXPIRE = CATALOG_GC + "/expire"
LEASES = "/api/v1/admin/gc/leases"
DEFAULT_IDEMPOTENCY_LIFETIME_S = 7 * 24 * 3600  # far past any client's retries
DEFAULT_LEASE_EXPIRED_FOR_S = 24 * 3600  # a node gone for a day


async def _optional_body(request: web.Request, schema: str) -> dict[str, Any]:
    """The body, if one was sent (every field has a default)."""
    return await read_json(request, schema) if body_of(request) else {}


@routes.post(SWEEP)
async def sweep(request: web.Request) -> web.Response:
    tenant, catalog = params.tenant(request), params.catalog(request)
    body = await read_json(request, "gc_sweep")
    candidates = [
        ObjKey(tenant, catalog, item["type"], int(item["id"])) for item in body["candidates"]
    ]
    result = await request.app[METASTORE].sweep(
        tenant,
        catalog,
        int(body["mark-head"]),
        candidates,
        principal_of(request),
        dry_run=body.get("dry-run", False),
    )
    return web.json_response(
        {
            "deleted": result.deleted,
            "spared": result.spared,
            "missing": result.missing,
            "commit-id": str(result.commit_id) if result.commit_id else None,
            "dry-run": body.get("dry-run", False),
        }
    )


@routes.post(EXPIRE)
async def expire(request: web.Request) -> web.Response:
    tenant, catalog = params.tenant(request), params.catalog(request)
    body = await _optional_body(request, "gc_expire")
    metastore = request.app[METASTORE]
    now_us, principal = metastore.clock.now_us(), principal_of(request)
    expired = await expire_idempotency(
        metastore,
        tenant,
        catalog,
        body.get("lifetime-seconds", DEFAULT_IDEMPOTENCY_LIFETIME_S),
        now_us,
        principal,
    )
    tables = request.app[ICEBERG].tables
    collected, purging = await collect_dropped(
        metastore, tenant, catalog, now_us, principal, tables.has_files
    )
    for record in purging:  # committed: their files are garbage now
        with metastore.purges.run(tenant, catalog, record.entity.entity_id) as mine:
            if not mine:
                continue  # a drop's purge (or another expiry's) running here now
            await asyncio.to_thread(tables.purge_dropped, tenant, catalog, record.entity)
            if await finish_purge(metastore, tenant, catalog, record.record, principal):
                collected += 1
    return web.json_response({"expired": expired, "collected": collected})


@routes.post(LEASES)
async def leases(request: web.Request) -> web.Response:
    body = await _optional_body(request, "gc_leases")
    metastore = request.app[METASTORE]
    removed = await asyncio.to_thread(
        remove_node_leases,
        metastore.persistence,
        metastore.codec,
        body.get("expired-for-seconds", DEFAULT_LEASE_EXPIRED_FOR_S),
        metastore.clock.now_us(),
    )
    return web.json_response({"removed": removed})


def gc_stats(metastore: Metastore) -> dict[str, tuple[str, str, int]]:
    """The sweeps' counters and the task records per job and state (as this node last
    read them: every task call through it reads them)."""
    counts = metastore.tasks.counts(metastore.clock.now_us())
    stats = {
        "metastore_gc_deleted_objects_total": (
            "counter",
            "objects deleted by sweeps",
            metastore.sweeps.deleted,
        ),
        "metastore_gc_spared_objects_total": (
            "counter",
            "sweep candidates spared (referenced again)",
            metastore.sweeps.spared,
        ),
    }
    for job in JOBS:
        for status in STATUSES:
            name = f'metastore_tasks{{job="{job}",status="{status}"}}'
            stats[name] = ("gauge", "task records per job and status", counts.get((job, status), 0))
    return stats
