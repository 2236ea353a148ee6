"""Requests a browser sends on a web page's behalf: only the node's own pages may write.

A browser lets any page send a ``POST`` to any address, the node on the user's own
machine included; it only keeps the page from reading the answer. The API takes a JSON
body whatever its content type (``curl -d`` sends one as a form), so such a page
needs no preflight: against the default embedded node (loopback, auth off) a page the
user merely visited created namespaces and renamed tables. And a page whose domain the
attacker re-points at 127.0.0.1 (DNS rebinding) is same-origin with the node in the
browser's eyes, so it reads answers as well.

So, before anything else reads the request:

- **A write from another origin is a 403.** A browser names the page's origin in
  ``Origin`` on every cross-origin ``POST``, ``PUT``, ``PATCH`` and ``DELETE``;
  clients that are not browsers (PyIceberg, engines, curl, the nodes themselves) send
  none. The node's own console is same-origin: its ``Origin`` is the address the
  request came to.
- **A node that trusts its loopback (auth off there) answers only loopback names.**
  Its ``Host`` must be ``localhost`` (or a name under it) or a loopback address: a
  rebound domain's name is refused (403) before any route, read or write. A node with
  auth on relies on its tokens, which a page cannot read from another origin; a node
  an operator bound elsewhere with auth off chose to trust its network.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from metastore.errors import Forbidden
from metastore.util.setting_rules import is_loopback

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def origin_guard(loopback_names_only: bool) -> Middleware:
    """The middleware; ``loopback_names_only``: refuse a ``Host`` that names no loopback
    address (a node bound to loopback with auth off)."""

    @web.middleware
    async def same_origin(request: web.Request, handler: Handler) -> web.StreamResponse:
        if loopback_names_only and not _loopback_name(request.host):
            raise Forbidden(
                f"host {request.host[:100]!r} is not this node's: a node without "
                "authentication answers only to loopback names (localhost, 127.0.0.1, [::1])"
            )
        origin = request.headers.get("Origin")
        if origin is not None and request.method not in SAFE_METHODS:
            own = f"{request.scheme}://{request.host}"
            if origin.lower() != own.lower():
                raise Forbidden(
                    f"cross-origin request refused: origin {origin[:100]!r} is not this "
                    "node's; browsers may write only from the node's own pages"
                )
        return await handler(request)

    return same_origin


def _loopback_name(host: str) -> bool:
    """``host`` (a ``Host`` header: name or address, maybe a port) names this machine."""
    try:
        name = urlsplit(f"//{host}").hostname or ""
    except ValueError:  # "[bad": no name at all, and never a 500
        return False
    return name == "localhost" or name.endswith(".localhost") or is_loopback(name)
