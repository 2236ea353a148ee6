"""The outermost middleware: every request's id, trace, timing, access line and histogram.

Before anything else runs it gives the request an id (the client's ``X-Request-Id``
when it is a short plain token, else a fresh one, echoed in the answer) and a span
of the caller's trace (``traceparent``, ``metastore.util.tracing``), and sets the log
context (``metastore.util.logs``) every line of the request carries. When the answer is
made it observes the request in ``metastore_http_request_duration_seconds`` by route
template (``/v1/{prefix}/namespaces/{namespace}``, never the raw path, so the series
stay bounded by the route table; a request no route matched is one series), method
and status, and writes one access line at INFO on ``metastore.access``.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from random import getrandbits

from aiohttp import web
from aiohttp.typedefs import Handler

from metastore.http.caller import caller
from metastore.http.typedefs import METRICS
from metastore.util import logs
from metastore.util.logs import FIELDS, REQUEST_ID_HEADER, RequestContext
from metastore.util.metrics import UNMATCHED_ROUTE
from metastore.util.tracing import HEADER as TRACEPARENT
from metastore.util.tracing import TraceContext

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
# any other method is one label value: a client cannot grow the series
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})
CLIENT_CLOSED = 499  # the client went away before its answer (nginx's convention)

access_log = logging.getLogger("metastore.access")
ACCESS_LINE = "%s %s %d %.1fms"  # method, path as sent, status, duration


def route_of(request: web.Request) -> str:
    """The matched route's template, or one name for every unmatched path."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else UNMATCHED_ROUTE


@web.middleware
async def observe(request: web.Request, handler: Handler) -> web.StreamResponse:
    started = time.perf_counter()
    sent_id = request.headers.get(REQUEST_ID_HEADER)
    request_id = sent_id if sent_id and _REQUEST_ID.match(sent_id) else f"{getrandbits(96):024x}"
    trace = TraceContext.parse(request.headers.get(TRACEPARENT)) or TraceContext.start()
    tenant = request.match_info.get("tenant")
    token = logs.CURRENT.set(RequestContext(request_id, trace, tenant))
    status = 500  # an error no middleware turned into an answer
    try:
        response = await handler(request)
        status = response.status
        if not response.prepared:
            response.headers[REQUEST_ID_HEADER] = request_id
        return response
    except web.HTTPException as exc:  # redirects and the like, raised past ``errors``
        status = exc.status
        raise
    except asyncio.CancelledError:
        status = CLIENT_CLOSED
        raise
    finally:
        seconds = time.perf_counter() - started
        route = route_of(request)
        method = request.method if request.method in METHODS else "OTHER"
        request.app[METRICS].http_requests.labels(route, method, str(status)).observe(seconds)
        if access_log.isEnabledFor(logging.INFO):
            _access(request, route, status, seconds)
        logs.CURRENT.reset(token)


def _access(request: web.Request, route: str, status: int, seconds: float) -> None:
    context = logs.current()
    if context is not None and context.principal is None:  # auth off, or an open path
        principal = caller(request)
        logs.identify(principal.id, principal.tenant)
    path = request.rel_url.raw_path  # as sent: %-escapes kept, so no newline reaches a line
    fields = {
        "method": request.method,
        "route": route,
        "path": path,
        "status": status,
        "duration_ms": round(seconds * 1000, 3),
    }
    args = (request.method, path, status, seconds * 1000)
    # ``Logger.info`` without its stack walk for the caller's file and line (the same
    # for every access line): the record is made and handled directly
    record = access_log.makeRecord(
        access_log.name, logging.INFO, __file__, 0, ACCESS_LINE, args, None, extra={FIELDS: fields}
    )
    access_log.handle(record)
