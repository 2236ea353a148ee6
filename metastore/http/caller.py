"""Who is calling: the ``Principal`` of a request, and the id the history records.

The auth middleware (``metastore.node.middlewares.authenticate``) stores the
principal of a valid bearer token under ``PRINCIPAL`` in the request; with auth
off, and on the paths that need no token, every caller is the anonymous
principal. Both APIs take the caller from here, so a commit names the same
caller whichever API made it.
"""

from __future__ import annotations

from aiohttp import web

from metastore.security.principal import ANONYMOUS_PRINCIPAL, Principal

PRINCIPAL = web.RequestKey("principal", Principal)  # set by the auth middleware


def caller(request: web.Request) -> Principal:
    principal = request.get(PRINCIPAL, ANONYMOUS_PRINCIPAL)
    assert isinstance(principal, Principal), "the auth middleware stores a Principal"
    return principal


def principal_of(request: web.Request) -> str:
    """The caller's id, as commit history and idempotency records name it."""
    return caller(request).id
