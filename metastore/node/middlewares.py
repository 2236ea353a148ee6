"""Every middleware of the node, in the order ``metastore.node.app`` chains them.

``errors``: every error leaves as the Iceberg error shape {"error": {"message",
"type", "code"}}. ``read_body``: every body is received once, within its deadline,
before any handler runs. (Cluster mode: ``metastore.http.peers.authenticate_peers``
proves node requests, ``metastore.node.forwarding.route_writes`` sends a write to its
owner.) ``authenticate``: the caller. ``tenancy``: the caller's tenant's tokens and
request rate. ``authorize``: the route's rule, before its handler.
"""

from __future__ import annotations

import logging

from aiohttp import web
from aiohttp.typedefs import Handler
from aiohttp.web_protocol import RequestPayloadError

from metastore.errors import Forbidden, MetastoreError, NotOwner, TooManyRequests, UnsupportedCoding
from metastore.http import body_coding
from metastore.http.authz import CHECKER, RULE
from metastore.http.caller import PRINCIPAL, caller
from metastore.http.guards import Metrics, Open
from metastore.http.observe import CLIENT_CLOSED
from metastore.http.peers import is_node_request
from metastore.http.protocol_errors import client_message
from metastore.http.responses import error_response, error_type_of
from metastore.http.tenancy import charge, check_caller_token
from metastore.http.typedefs import AUTHORIZER, CONFIG, IDENTITY
from metastore.http.validation import BODY, receive
from metastore.node.route_privileges import rule_for
from metastore.util import logs

log = logging.getLogger(__name__)

OPEN_PATHS = frozenset({"/health", "/metrics", "/v1/oauth/tokens", "/"})  # no token needed
CONSOLE_ASSETS = "/console/"  # the web console's static files: no token needed either


def is_open(path: str) -> bool:
    """A path anyone may call: health, metrics (their own check), the token endpoint
    and the console's static pages (which hold no data; the console then calls the
    APIs with its user's token)."""
    return path in OPEN_PATHS or path.startswith(CONSOLE_ASSETS)


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except MetastoreError as exc:
        if exc.status >= 500 and not isinstance(exc, NotOwner):  # NotOwner: routine, retried
            log.warning("%s %s -> %d %s", request.method, request.path, exc.status, exc.message)
        response = error_response(exc.status, exc.error_type, exc.message)
        if isinstance(exc, TooManyRequests):
            response.headers["Retry-After"] = str(exc.retry_after)
        elif isinstance(exc, UnsupportedCoding):  # the codings that would have been taken
            response.headers["Accept-Encoding"] = body_coding.ACCEPTED
        return response
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        message = exc.reason if exc.status != 404 else f"no such resource: {request.path}"
        if exc.status == 413:
            message = f"request body too large: {exc.text or exc.reason}"
        return error_response(exc.status, error_type_of(exc.status), message)
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return error_response(500, error_type_of(500), "internal server error (logged)")


@web.middleware
async def read_body(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Receive the whole body within ``body_timeout_s``, else 408 and close the connection.

    aiohttp bounds the request head (``header_timeout_s``, see ``metastore.node.server``)
    but waits for a body as long as its client keeps sending; this bounds the rest, so
    a slow client holds a connection for a bounded time. Handlers, idempotency
    fingerprints and forwarded writes all use the body read here.
    """
    config = request.app[CONFIG]
    try:
        request[BODY] = await receive(request, config.max_body_bytes, config.body_timeout_s)
    except TimeoutError:
        message = f"the request body did not arrive within {config.body_timeout_s:g}s"
        response = error_response(408, error_type_of(408), message)
        response.force_close()  # the rest of the body may still be on its way
        return response
    except RequestPayloadError as exc:  # broken chunked framing: the client's bytes
        message = f"the request body cannot be read: {client_message(exc)}"
        response = error_response(400, error_type_of(400), message)
        response.force_close()  # the parser lost its place in the stream
        return response
    except ConnectionResetError:  # the client left before its body was whole
        return web.Response(status=CLIENT_CLOSED)  # for the access line: nobody reads it
    return await handler(request)


@web.middleware
async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
    """With auth on, every call but the open paths needs a valid bearer token; its
    ``Principal`` is the request's caller (``metastore.http.caller.caller``).

    Internal endpoints are proven by the node credential instead. A write this node
    forwards is checked by the owner it reaches (its token travels with it), since
    this middleware runs after the write routing.
    """
    if (
        request.app[CONFIG].auth_enabled
        and not is_open(request.path)
        and not is_node_request(request)
    ):
        header = request.headers.get("Authorization")
        principal = await request.app[IDENTITY].auth.verify(header)
        request[PRINCIPAL] = principal
        logs.identify(principal.id, principal.tenant)  # every later line names the caller
    return await handler(request)


@web.middleware
async def tenancy(request: web.Request, handler: Handler) -> web.StreamResponse:
    """After authentication (``metastore.http.tenancy``): the caller's tenant for a
    consistency token the request's path left unchecked, then one token of the
    tenant's request bucket; the open paths are neither."""
    if not is_open(request.path):
        principal = caller(request)
        check_caller_token(request, principal)
        await charge(request, principal)
    return await handler(request)


@web.middleware
async def authorize(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Run the matched route's rule (``metastore.node.route_privileges``) before its handler
    (authentication on only)."""
    config = request.app[CONFIG]
    resource = request.match_info.route.resource
    if not config.auth_enabled or resource is None:  # off, or no route matched (404/405)
        return await handler(request)
    rule = rule_for(request.method, resource.canonical)
    if isinstance(rule, Open):
        return await handler(request)
    authorizer = request.app[AUTHORIZER]
    if isinstance(rule, Metrics):
        if not config.metrics_auth:
            return await handler(request)
        header = request.headers.get("Authorization")
        principal = await request.app[IDENTITY].auth.verify(header)
    else:
        principal = caller(request)
    checker = authorizer.checker(principal)
    if not checker.service_admin:  # a changed policy is read in a worker thread
        checker.use(await authorizer.policies.ready(principal.tenant))
    if rule is None:
        log.error("no authorization rule for %s %s", request.method, resource.canonical)
        if not checker.service_admin:
            raise Forbidden("this route has no authorization rule: service admins only")
    else:
        await rule.check(request, checker)
        request[RULE] = rule  # a stream checks it again (``native_events``)
    request[CHECKER] = checker
    return await handler(request)
