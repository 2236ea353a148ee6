"""Routes found by the shape of the path answer exactly as aiohttp's own turn does
(``metastore.http.route_index``): the node's whole route table, every method, and
paths made to test precedence (a variable given the text of another route's fixed
segment), near misses (a segment more or less, a trailing slash, an empty or
%-encoded segment) and the index's own bounds."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from aiohttp import web
from aiohttp.web_urldispatcher import AbstractResource
from yarl import URL

from metastore.config.server_config import ServerConfig
from metastore.http import route_index
from metastore.http.route_index import GROUPS, ShapeIndex, index_key, shape_of
from metastore.node.app import create_app

METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH")
VARIABLE = re.compile(r"\{[^{}]*\}")


def _app(tmp_path: Path, *, indexed: bool, cluster: bool = False) -> web.Application:
    groups = route_index.GROUPS
    if not indexed:
        route_index.GROUPS = ()
    try:
        data_dir = tmp_path / f"data-{indexed}"
        if cluster:
            warehouse = (tmp_path / "wh").as_uri()
            config = ServerConfig(data_dir=data_dir, kafka="127.0.0.1:9", warehouse=warehouse)
        else:
            config = ServerConfig(data_dir=data_dir)
        app = create_app(config)
    finally:
        route_index.GROUPS = groups
    app.freeze()
    return app


def _paths(app: web.Application) -> Iterator[str]:
    """Paths under the indexed keys (the others never reach an index)."""
    canonicals = sorted(
        {r.canonical for r in app.router.resources() if index_key(r.canonical) in GROUPS}
    )
    words = sorted({part for c in canonicals for part in c.split("/") if part and "{" not in part})
    for canonical in canonicals:
        for value in ("x", "a%2Fb", "%7Bv%7D", *words):
            path = VARIABLE.sub(value, canonical)
            yield path
            yield path + "/"
            yield path + "/extra"
            yield path.rsplit("/", 1)[0] or "/"
            yield path.replace("/", "//", 1)


class _Request:
    """What aiohttp's router reads of a request: its method and its path as sent (a
    mocked request costs 0.7 ms to make; the test resolves 2 x 60,000)."""

    def __init__(self, method: str, path: str) -> None:
        self.method = method
        self.rel_url = URL.build(path=path, encoded=True)


async def _answer(app: web.Application, request: _Request) -> object:
    info = await app.router.resolve(cast(web.Request, request))
    if info.http_exception is not None:
        exc = info.http_exception
        return type(exc).__name__, sorted(getattr(exc, "allowed_methods", ()) or ())
    assert info.route.resource is not None
    return info.route.resource.canonical, info.route.method, dict(info)


@pytest.mark.parametrize("cluster", [False, True], ids=["embedded", "cluster"])
async def test_every_path_and_method_resolves_as_without_the_index(
    tmp_path: Path, cluster: bool
) -> None:
    indexed = _app(tmp_path, indexed=True, cluster=cluster)
    plain = _app(tmp_path, indexed=False, cluster=cluster)
    indexes = {r._key: r for r in indexed.router.resources() if isinstance(r, ShapeIndex)}
    tried = answered = 0
    for path, method in itertools.product(sorted(set(_paths(plain))), METHODS):
        request = _Request(method, path)
        expected = await _answer(plain, request)
        assert await _answer(indexed, request) == expected, (method, path)
        tried += 1
        if isinstance(expected, tuple) and len(expected) == 3:  # a route: its index found it
            index = indexes.get(index_key(expected[0]))
            if index is not None:
                match, _ = await index.resolve(cast(web.Request, request))
                assert match is not None and match.route.resource.canonical == expected[0]
                answered += 1
    assert tried > 20_000 and answered > 5_000


def test_the_index_is_tried_first_under_its_keys_and_holds_no_route(tmp_path: Path) -> None:
    app = _app(tmp_path, indexed=True)
    indexes = [r for r in app.router.resources() if isinstance(r, ShapeIndex)]
    assert sorted(index_key(r.canonical) for r in indexes) == sorted(GROUPS)
    assert all(len(r) == 0 and list(r) == [] for r in indexes)
    assert not any(isinstance(route.resource, ShapeIndex) for route in app.router.routes())


def test_no_other_key_has_many_routes(tmp_path: Path) -> None:
    """A new group of routes sharing one key would be tried one by one: index it."""
    app = _app(tmp_path, indexed=True)
    counts: dict[str, int] = {}
    for resource in app.router.resources():
        key = index_key(resource.canonical)
        counts[key] = counts.get(key, 0) + 1
    crowded = {key: n for key, n in counts.items() if n > 4 and key not in GROUPS}
    assert crowded == {}


@pytest.mark.parametrize(
    ("resource", "shape"),
    [
        (
            web.PlainResource("/api/v1/tenants"),
            (4, ((0, ""), (1, "api"), (2, "v1"), (3, "tenants"))),
        ),
        (web.DynamicResource("/v1/{prefix}/config"), (4, ((0, ""), (1, "v1"), (3, "config")))),
        (web.DynamicResource("/files/{tail:.*}"), None),  # its own pattern may span segments
        (web.DynamicResource("/v1/{kind:[a-z]+}"), None),  # its own pattern
        (web.DynamicResource("/v1/t{name}"), None),  # a variable sharing a segment with text
    ],
)
def test_shape_of(resource: AbstractResource, shape: object) -> None:
    assert shape_of(resource) == shape


async def test_routes_that_overlap_keep_their_order() -> None:
    """Where two routes match one path, the one registered first answers, as in
    aiohttp's own turn: a fixed segment before a variable, a variable before a fixed
    segment, and a route whose variable spans segments between them."""

    async def handler(request: web.Request) -> web.Response:
        return web.Response()

    def router(paths: list[str]) -> web.UrlDispatcher:
        app = web.Application()
        app.router.register_resource(ShapeIndex(app.router, "/g"))
        for path in paths:
            app.router.add_get(path, handler)
        app.freeze()
        return app.router

    cases = [
        (["/g/{a}/x", "/g/{a}/{b}"], "/g/1/x", "/g/{a}/x"),
        (["/g/{a}/{b}", "/g/{a}/x"], "/g/1/x", "/g/{a}/{b}"),
        (["/g/{a}/y", "/g/{tail:.*}", "/g/{a}/x"], "/g/1/x", "/g/{tail}"),
        (["/g/{a}/y", "/g/{tail:.*}", "/g/{a}/x"], "/g/1/y", "/g/{a}/y"),
    ]
    for paths, path, winner in cases:
        info = await router(paths).resolve(cast(web.Request, _Request("GET", path)))
        assert info.route.resource is not None
        assert info.route.resource.canonical == winner, (paths, path)
        (index,) = [r for r in router(paths).resources() if isinstance(r, ShapeIndex)]
        index.freeze()
        match, _ = await index.resolve(cast(web.Request, _Request("GET", path)))
        assert match is not None and match.route.resource.canonical == winner, (paths, path)
