"""The REST client's floor: an aiohttp app that answers PyIceberg's create, commit and load
with a node's own answers, recorded earlier, and does nothing else.

It runs as its own process like the node (``python -m bench.floor_app --port N
--answers FILE``), so what PyIceberg's ``RestCatalog`` spends against it is the client's
own cost of an operation (building the request, HTTP, parsing the table metadata it gets
back) plus a loopback round trip: the least any REST catalog could take for it through
that client. ``bench.scenarios.client_floor`` records the answers and measures.

The answers file is JSON: for each kind (``config``, ``create``, ``commit``, ``load``),
``{"status": int, "content-type": str, "etag": str | null, "body": str}``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aiohttp import web

KINDS = ("config", "create", "commit", "load")


def kind_of(method: str, path: str) -> str | None:
    """Which recorded answer a request gets, by its method and the shape of its path
    (with or without the catalog's prefix): None for anything else (a 404)."""
    segments = [s for s in path.split("/") if s]
    if method == "GET" and segments == ["v1", "config"]:
        return "config"
    if "namespaces" not in segments:
        return None
    tail = segments[segments.index("namespaces") + 1 :]
    if len(tail) == 2 and tail[1] == "tables" and method == "POST":
        return "create"
    if len(tail) == 3 and tail[1] == "tables":
        return {"POST": "commit", "GET": "load"}.get(method)
    return None


def app(answers: dict[str, dict[str, Any]]) -> web.Application:
    prepared = {}
    for kind in KINDS:
        answer = answers[kind]
        headers = {"Content-Type": answer["content-type"]}
        if answer.get("etag"):
            headers["ETag"] = answer["etag"]
        prepared[kind] = (int(answer["status"]), answer["body"].encode(), headers)

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def replay(request: web.Request) -> web.Response:
        await request.read()  # the body is read, as a server must, and not looked at
        kind = kind_of(request.method, request.path)
        if kind is None:
            return web.json_response({"error": "not recorded"}, status=404)
        status, body, headers = prepared[kind]
        return web.Response(status=status, body=body, headers=headers)

    application = web.Application()
    application.router.add_get("/health", health)
    application.router.add_route("*", "/{tail:.*}", replay)
    return application


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.floor_app", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--answers", type=Path, required=True)
    args = parser.parse_args(argv)
    answers = json.loads(args.answers.read_text())
    web.run_app(app(answers), host="127.0.0.1", port=args.port, access_log=None, print=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
