"""The bare-aiohttp ceiling: an aiohttp app that answers the embedded benchmark's POST
(a small JSON body in, a small JSON body out, 201) and does nothing else.

It runs as its own process like the node (``python -m bench.bare_app --port N``), so
the load generator, its session and its client count are the same as against the node,
and the difference is what the node does per commit beyond HTTP.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from aiohttp import web


async def create(request: web.Request) -> web.Response:
    body = await request.json()
    return web.json_response({"name": body.get("name"), "created": True}, status=201)


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def app() -> web.Application:
    application = web.Application()
    application.router.add_get("/health", health)
    application.router.add_post("/{tail:.*}", create)
    return application


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bare_app", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    web.run_app(app(), host="127.0.0.1", port=args.port, access_log=None, print=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
