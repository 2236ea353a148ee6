"""``POST /v1/oauth/tokens``: OAuth2 client credentials of a service principal.

The client id is the principal's id (``name`` in the default tenant,
``name@tenant`` elsewhere); the token is a JWT (``metastore.security.tokens``).

The body is ``application/x-www-form-urlencoded`` (as OAuth2 and the Iceberg
REST spec define it), parsed strictly here: anything else, a malformed body,
a repeated or missing parameter is a 400 ``invalid_request`` in OAuth's error
shape ``{"error": ..., "error_description": ...}``, like every 400 and 401 of
this endpoint. The two refusals OAuth has no code for use the Iceberg error
shape, which is what PyIceberg reads for them: 429 ``TooManyRequestsException``
(failure limits) and 503 ``SlowDownException`` (hashing pool full), both with
``Retry-After`` in seconds.
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from aiohttp import web

from metastore.errors import Unauthorized
from metastore.http.responses import error_response
from metastore.http.typedefs import IDENTITY
from metastore.iceberg.routes.context import json_response
from metastore.security.attempts import TooManyFailures
from metastore.security.hashing import HashingBusy

routes = web.RouteTableDef()

FORM = "application/x-www-form-urlencoded"
MAX_FIELDS = 16  # grant_type, client_id, client_secret, scope, ... and some slack


class InvalidRequest(Exception):
    """A token request that is not a well-formed form (400 ``invalid_request``)."""


@routes.post("/v1/oauth/tokens")
async def get_token(request: web.Request) -> web.Response:
    try:
        form = await _form(request)
    except InvalidRequest as exc:
        return oauth_error(400, "invalid_request", str(exc))
    grant_type = form.get("grant_type")
    if grant_type is None:
        return oauth_error(400, "invalid_request", "grant_type is required")
    if grant_type != "client_credentials":
        return oauth_error(400, "unsupported_grant_type", "only client_credentials is supported")
    client_id, secret = form.get("client_id"), form.get("client_secret")
    if not client_id or secret is None:
        return oauth_error(400, "invalid_request", "client_id and client_secret are required")
    auth = request.app[IDENTITY].auth
    try:
        token = await auth.issue(client_id, secret, request.remote or "unknown")
    except Unauthorized as exc:
        return oauth_error(401, "invalid_client", exc.message)
    except (TooManyFailures, HashingBusy) as exc:
        reply = error_response(exc.status, exc.error_type, exc.message)
        reply.headers["Retry-After"] = str(exc.retry_after)
        return reply
    return json_response(
        {
            "access_token": token,
            "token_type": "bearer",
            "expires_in": auth.ttl,
            "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
        }
    )


async def _form(request: web.Request) -> dict[str, str]:
    if request.content_type != FORM:
        raise InvalidRequest(f"the body must be {FORM}, not {request.content_type}")
    body = await request.read()  # larger than the body limit: 413 like every endpoint
    try:
        pairs = parse_qsl(
            body.decode("utf-8"),
            keep_blank_values=True,
            strict_parsing=True,
            errors="strict",
            max_num_fields=MAX_FIELDS,
        )
    except ValueError:  # also UnicodeDecodeError
        raise InvalidRequest(
            f"the body is not a UTF-8 form of at most {MAX_FIELDS} name=value pairs"
        ) from None
    form: dict[str, str] = {}
    for name, value in pairs:
        if name in form:
            raise InvalidRequest(f"parameter {name} is given more than once")
        form[name] = value
    return form


def oauth_error(status: int, error: str, description: str) -> web.Response:
    return json_response({"error": error, "error_description": description}, status)
