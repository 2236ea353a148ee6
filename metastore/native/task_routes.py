"""Native admin API: coordinated task records of the batch jobs (service admins only).

``metastore gc`` and ``metastore maintain`` hold a lease on their task (one per job
and scope) for the whole run: acquired (or resumed) with ``POST``, renewed with the
run's progress with ``PUT``, released with the run's summary with ``DELETE``. A
second run is refused with 409 ``TaskBusy`` while the first's lease is live
(``metastore.tasks``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from metastore.engine.tasks import JOBS
from metastore.errors import BadRequest
from metastore.http.caller import principal_of
from metastore.http.typedefs import METASTORE, METRICS
from metastore.http.validation import body_of, read_json
from metastore.model.names import check_system_name

routes = web.RouteTableDef()

TASKS = "/api/v1/admin/tasks"
TASK = TASKS + "/{job}/{scope:.+}"  # a scope "<tenant>/<catalog>" has a slash
MAX_JSON_BYTES = 16 * 1024  # progress or summary: a few counts and paths, not data
_RUN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-")


def check_scope(scope: str) -> str:
    """ "all", "<tenant>" or "<tenant>/<catalog>", each a valid name."""
    if scope == "all":
        return scope
    parts = scope.split("/")
    if len(parts) > 2:
        raise BadRequest(f"invalid task scope {scope!r}: all, <tenant> or <tenant>/<catalog>")
    check_system_name("tenant", parts[0])
    if len(parts) == 2:
        check_system_name("catalog", parts[1])
    return scope


def _job(text: str) -> str:
    if text not in JOBS:
        raise BadRequest(f"unknown job {text!r}: one of {', '.join(JOBS)}")
    return text


def _run(text: str | None) -> str:
    if text is None or not 1 <= len(text) <= 128 or not set(text) <= _RUN_CHARS:
        raise BadRequest("run must be 1-128 characters of A-Z a-z 0-9 . _ : -")
    return text


def _small(value: dict[str, Any], what: str) -> dict[str, Any]:
    if len(json.dumps(value)) > MAX_JSON_BYTES:
        raise BadRequest(f"{what} is larger than {MAX_JSON_BYTES} bytes of JSON")
    return value


@routes.get(TASKS)
async def list_tasks(request: web.Request) -> web.Response:
    metastore = request.app[METASTORE]
    records = await asyncio.to_thread(metastore.tasks.list)
    now_us = metastore.clock.now_us()
    return web.json_response({"tasks": [r.to_json(now_us) for r in records]})


@routes.post(TASKS)
async def acquire(request: web.Request) -> web.Response:
    body = await read_json(request, "task_acquire")
    metastore = request.app[METASTORE]
    record = await asyncio.to_thread(
        metastore.tasks.acquire,
        body["job"],
        check_scope(body["scope"]),
        body["run"],
        principal_of(request),
        body["lease-seconds"],
    )
    return web.json_response(record.to_json(metastore.clock.now_us()))


@routes.put(TASK)
async def renew(request: web.Request) -> web.Response:
    job, scope = _job(request.match_info["job"]), check_scope(request.match_info["scope"])
    body = await read_json(request, "task_renew")
    progress = body.get("progress")
    metastore = request.app[METASTORE]
    record = await asyncio.to_thread(
        metastore.tasks.renew,
        job,
        scope,
        body["run"],
        None if progress is None else _small(progress, "progress"),
        body["lease-seconds"],
    )
    return web.json_response(record.to_json(metastore.clock.now_us()))


@routes.delete(TASK)
async def finish(request: web.Request) -> web.Response:
    job, scope = _job(request.match_info["job"]), check_scope(request.match_info["scope"])
    run = _run(request.query.get("run"))
    body = await read_json(request, "task_finish") if body_of(request) else {}
    metastore = request.app[METASTORE]
    record = await asyncio.to_thread(
        metastore.tasks.finish, job, scope, run, _small(body.get("summary", {}), "summary")
    )
    seconds = (record.updated_at_us - record.started_at_us) / 1e6
    request.app[METRICS].job_runs.labels(job).observe(max(0.0, seconds))
    return web.json_response(record.to_json(metastore.clock.now_us()))
