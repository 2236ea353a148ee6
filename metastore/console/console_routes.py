"""Serves the console's static assets from the package (no build step, no network).

Only the files named in ``ASSETS`` are served, read once at import from the package
itself, so no request path ever reaches the file system. Every page carries a
Content-Security-Policy that allows scripts, styles and connections to this origin
only: the console renders names and properties clients wrote, and even a slip that
turned one into markup could not run a script or send data elsewhere.
"""

from __future__ import annotations

from importlib import resources

from aiohttp import web

from metastore.errors import NotFound
from metastore.http.typedefs import CONFIG

routes = web.RouteTableDef()

INDEX = "/"
ASSET = "/console/{asset}"

_TYPES = {
    "index.html": "text/html",
    "app.js": "text/javascript",
    "app.css": "text/css",
    "favicon.svg": "image/svg+xml",
}
ASSETS: dict[str, bytes] = {
    name: resources.files("metastore.console").joinpath("static", name).read_bytes()
    for name in _TYPES
}

HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}


AUTH_OFF = b'<meta name="metastore-auth" content="off">'
AUTH_ON = b'<meta name="metastore-auth" content="on">'


def _serve(name: str, body: bytes | None = None) -> web.Response:
    return web.Response(
        body=ASSETS[name] if body is None else body,
        content_type=_TYPES[name],
        charset="utf-8",
        headers=HEADERS,
    )


@routes.get(INDEX)
async def index(request: web.Request) -> web.Response:
    """The page, telling the script whether to ask for a sign-in first (so it never
    sends a request it knows will be refused)."""
    if not request.app[CONFIG].auth_enabled:
        return _serve("index.html")
    return _serve("index.html", ASSETS["index.html"].replace(AUTH_OFF, AUTH_ON))


@routes.get(ASSET)
async def asset(request: web.Request) -> web.Response:
    name = request.match_info["asset"]
    if name not in ASSETS:
        raise NotFound(f"no console asset {name!r}")
    return _serve(name)
