"""``GET .../catalogs/{c}/events``: the catalog's change feed, as JSON pages or a live
Server-Sent Events stream (``metastore.engine.feed``; the rendering in ``event_forms``).

Both read through ``Metastore.read`` (worker threads), so a stream that follows a
busy catalog never blocks the event loop. A stream polls the catalog's ref (one
read per poll interval), sends what the history gained since its position, re-checks
the caller's token and policy whenever it sends, and ends cleanly when the node
shuts down (``FEED_CLOSING``), when the token stops being valid, or when the catalog
is deleted. A client resumes with ``Last-Event-ID`` on any node.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import replace

from aiohttp import web

from metastore.engine.chains import Chains, stored_links
from metastore.engine.feed import (
    HEAD,
    MAX_LIMIT,
    FeedPage,
    Position,
    after_event,
    check_limit,
    decode_cursor,
    encode_cursor,
    read_page,
)
from metastore.errors import BadRequest, MetastoreError, NotFound, Unauthorized
from metastore.http import params
from metastore.http.authz import RULE
from metastore.http.authz import checker as request_checker
from metastore.http.caller import caller
from metastore.http.typedefs import (
    AUTHORIZER,
    CONFIG,
    FEED_CHAINS,
    FEED_CLOSING,
    IDENTITY,
    METASTORE,
)
from metastore.native.event_forms import ACCEPT_BATCH, render, render_page, wants_stream
from metastore.native.event_visibility import redactor, shows_for
from metastore.security.authorizer import Checker

routes = web.RouteTableDef()

EVENTS = "/api/v1/tenants/{tenant}/catalogs/{catalog}/events"
POLL_S = 0.2  # how often a stream looks at the catalog's HEAD
DEFAULT_HEARTBEAT_S = 15.0
HEARTBEAT_RANGE = (0.05, 60.0)


@routes.get(EVENTS)
async def events(request: web.Request) -> web.StreamResponse:
    """The catalog's change events, oldest first, after a cursor (``after``, or
    ``Last-Event-ID``): a JSON page (``limit``), or a live stream with ``Accept:
    text/event-stream``; ``format=cloudevents`` wraps each event as a CloudEvent.

    400 for a malformed cursor or one off the catalog's history, 410 for one older than
    the retained history; only events of entities the caller may list are shown."""
    tenant, catalog = params.tenant(request), params.catalog(request)
    stream = wants_stream(request)
    after = _after(request, tenant, catalog, stream)
    cloudevents = _cloudevents(request)
    if stream:
        heartbeat = _heartbeat(request)
        limit = check_limit(_int(request, "limit") or MAX_LIMIT)
        checker = request_checker(request)
        first = await _page(request.app, checker, tenant, catalog, after, limit)
        return await _stream(request, tenant, catalog, first, limit, heartbeat, cloudevents)
    limit = check_limit(_int(request, "limit"))
    page = await _page(request.app, request_checker(request), tenant, catalog, after, limit)
    batch = ACCEPT_BATCH in request.headers.get("Accept", "")
    return render_page(request, tenant, catalog, page, cloudevents, batch)


def _after(request: web.Request, tenant: str, catalog: str, stream: bool) -> Position | str | None:
    """The position to start after: ``Last-Event-ID`` (a reconnecting stream) over the
    ``after`` query parameter; ``head`` = from now on; absent = from the start."""
    raw = request.headers.get("Last-Event-ID") if stream else None
    if not raw:
        raw = request.query.get("after")
    if raw is None or raw == "":
        return None
    if raw == HEAD:
        return HEAD
    return decode_cursor(tenant, catalog, raw)


def _cloudevents(request: web.Request) -> bool:
    fmt = request.query.get("format", "native")
    if fmt not in ("native", "cloudevents"):
        raise BadRequest(f"query parameter format must be native or cloudevents, got {fmt!r}")
    return fmt == "cloudevents" or ACCEPT_BATCH in request.headers.get("Accept", "")


def _int(request: web.Request, name: str) -> int | None:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return None
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 9:
        raise BadRequest(f"query parameter {name} must be a positive integer, got {raw!r}")
    return int(raw)


def _heartbeat(request: web.Request) -> float:
    raw = request.query.get("heartbeat")
    if raw is None:
        return DEFAULT_HEARTBEAT_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    low, high = HEARTBEAT_RANGE
    if not low <= value <= high:  # NaN fails too
        raise BadRequest(f"query parameter heartbeat must be {low} to {high} seconds, got {raw!r}")
    return value


async def _page(
    app: web.Application,
    checker: Checker | None,
    tenant: str,
    catalog: str,
    after: Position | str | None,
    limit: int,
) -> FeedPage:
    """One page from this node's history (in cluster mode a cursor another node handed
    out may be ahead of this node's view for a moment: ``lagging``)."""
    metastore, chains = app[METASTORE], app[FEED_CHAINS]
    lagging = app[CONFIG].cluster_mode

    def read() -> FeedPage:
        head = metastore.get_ref(tenant, catalog).head
        objects = metastore.objects(tenant, catalog)
        shows = shows_for(checker, tenant, catalog)
        links = stored_links(metastore.persistence, metastore.codec, tenant, catalog)
        page = read_page(objects, head, after, limit, shows, chains, links, lagging=lagging)
        redact = redactor(checker, tenant, catalog)
        return replace(page, events=[redact(e) for e in page.events])

    return await metastore.read(read)


# --- the live stream -----------------------------------------------------------------------


async def _stream(
    request: web.Request,
    tenant: str,
    catalog: str,
    first: FeedPage,
    limit: int,
    heartbeat: float,
    cloudevents: bool,
) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
        }
    )
    await response.prepare(request)
    # a first comment sends the headers now: a client knows it is connected before
    # the first event or heartbeat (aiohttp holds the headers until the first write)
    await response.write(b": connected\n\n")
    closing = request.app[FEED_CLOSING]
    metastore = request.app[METASTORE]
    loop = asyncio.get_running_loop()
    page: FeedPage | None = first
    position: Position = first.next
    last_write = loop.time()
    try:
        while not closing.is_set():
            if page is not None:
                chunk = _frames(tenant, catalog, page, position, cloudevents)
                position = page.next
                if chunk:
                    await response.write(chunk)
                    last_write = loop.time()
                if page.more:
                    page = await _next_page(request, tenant, catalog, position, limit)
                    continue
            page = None
            if loop.time() - last_write >= heartbeat:
                await _recheck(request)
                await response.write(b": heartbeat\n\n")
                last_write = loop.time()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(closing.wait(), POLL_S)
            if closing.is_set():
                break
            head = await metastore.read(metastore.get_ref, tenant, catalog)
            if head.head != position.commit_id:
                page = await _next_page(request, tenant, catalog, position, limit)
    except ConnectionResetError:
        return response  # the client went away: nothing to finish
    except (Unauthorized, NotFound):
        pass  # the token stopped being valid, or the catalog is gone: end the stream
    except MetastoreError as exc:  # e.g. the history moved below the position (a reset)
        with contextlib.suppress(ConnectionResetError):
            await response.write(_error_frame(exc))
    with contextlib.suppress(ConnectionResetError):
        await response.write_eof()
    return response


async def _next_page(
    request: web.Request, tenant: str, catalog: str, position: Position, limit: int
) -> FeedPage:
    checker = await _recheck(request)
    return await _page(request.app, checker, tenant, catalog, position, limit)


async def _recheck(request: web.Request) -> Checker | None:
    """The caller's checker as of now: its token verified again (a disabled, deleted or
    rotated principal, or an expired token, ends the stream), its tenant's current
    policy (a revoked grant hides what it showed), and the route's rule run again (a
    caller that may no longer read the feed at all gets a 403 frame and the end of the
    stream: it went on announcing each commit's position, its sequence and timing)."""
    if not request.app[CONFIG].auth_enabled:
        return None
    header = request.headers.get("Authorization")
    principal = await request.app[IDENTITY].auth.verify(header)
    if principal.id != caller(request).id:
        raise Unauthorized("the token names another principal")
    authorizer = request.app[AUTHORIZER]
    checker = authorizer.checker(principal)
    if not checker.service_admin:
        checker.use(await authorizer.policies.ready(principal.tenant))
    rule = request.get(RULE)
    if rule is not None:
        await rule.check(request, checker)
    return checker


def _frames(tenant: str, catalog: str, page: FeedPage, start: Position, cloudevents: bool) -> bytes:
    frames: list[str] = []
    last = start
    for event in page.events:
        body = render(tenant, catalog, event, cloudevents)
        frames.append(f"id: {body['id']}\ndata: {json.dumps(body, separators=(',', ':'))}\n\n")
        last = after_event(event)
    if page.next != last:
        # commits (or events) the caller sees nothing of: move its Last-Event-ID past them
        frames.append(f"id: {encode_cursor(tenant, catalog, page.next)}\n\n")
    return "".join(frames).encode()


def _error_frame(exc: MetastoreError) -> bytes:
    return f"event: error\ndata: {json.dumps(exc.to_body(), separators=(',', ':'))}\n\n".encode()


async def close_streams(app: web.Application) -> None:
    """``on_shutdown``: every open stream ends (cleanly) before the server stops."""
    app[FEED_CLOSING].set()


def setup_feed(app: web.Application) -> None:
    app[FEED_CLOSING] = asyncio.Event()
    app[FEED_CHAINS] = Chains()  # each catalog's commit ids by sequence number, as walked
    app.on_shutdown.append(close_streams)
