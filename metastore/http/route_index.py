"""Routes found by the shape of the path, where aiohttp would try dozens in turn.

aiohttp finds a request's route through an index keyed by each route's text before
its first variable: the request path's prefixes are looked up longest first, and
every route under the first key found is tried in registration order, a regex match
and a coroutine each. The native API's 46 routes all start with
``/api/v1/tenants/{tenant}``, so all share the key ``/api/v1/tenants``: a native
create was the 18th tried (13 µs of its resolution, about 2.5 % of the node's CPU
per commit). The Iceberg routes share ``/v1`` (15) and ``/v1/namespaces`` (11).

A ``ShapeIndex`` is registered under one such key before its routes, so aiohttp tries
it first there. It knows each route's shape (how many segments, and which are fixed
text) and tries, in registration order, only the routes whose shape fits the path;
each route's own ``resolve`` decides. A route that fits none is one no route of the
key matches: the index answers "no match" (with the methods the fitting routes
allow), and aiohttp goes on through the same routes as before, to the same 404 or
405. So the answer is always the one aiohttp's own turn gives: every route that could
match is tried, in the same order, and the first match wins. A route whose shape is
not a plain one (a variable with its own pattern, or inside a segment) fits every
path. The index holds no route itself, so route listings (OpenAPI, the authorization
matrix) never see it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from aiohttp import web
from aiohttp.web_urldispatcher import AbstractResource, AbstractRoute, _InfoDict
from yarl import URL

# the keys under which aiohttp would try more than a few routes in turn
GROUPS: tuple[str, ...] = ("/api/v1/tenants", "/v1", "/v1/namespaces")

Shape = tuple[tuple[int, str], ...]  # the fixed segments of a route: (position, text)


def index_key(canonical: str) -> str:
    """The key aiohttp indexes a route under: its text before the first variable, cut
    back to a whole segment."""
    key = canonical
    if "{" in key:
        key = key.partition("{")[0].rpartition("/")[0]
    return key.rstrip("/") or "/"


def shape_of(resource: AbstractResource) -> tuple[int, Shape] | None:
    """How many segments a path of ``resource`` has and which are fixed; None when a
    variable may span segments or share one with text, or the resource is of another
    kind (such a route fits any path)."""
    segments = resource.canonical.split("/")
    if isinstance(resource, web.PlainResource):
        return len(segments), tuple(enumerate(segments))
    if not isinstance(resource, web.DynamicResource):
        return None
    pattern = resource.get_info()["pattern"].pattern
    fixed: list[tuple[int, str]] = []
    for position, segment in enumerate(segments):
        if "{" not in segment and "}" not in segment:
            fixed.append((position, segment))
            continue
        name = segment[1:-1]
        plain = f"(?P<{name}>{web.DynamicResource.GOOD})"  # one whole segment, any text
        if segment != f"{{{name}}}" or not name.isidentifier() or plain not in pattern:
            return None  # its own pattern, or text beside it in the segment
    return len(segments), tuple(fixed)


class ShapeIndex(AbstractResource):
    """The routes under one index key, tried by shape (see the module docstring)."""

    def __init__(self, router: web.UrlDispatcher, key: str) -> None:
        super().__init__()
        self._router = router
        self._key = key
        self._by_length: dict[int, list[tuple[AbstractResource, Shape]]] = {}
        self._any_length: list[tuple[AbstractResource, Shape]] = []

    @property
    def canonical(self) -> str:
        return f"{self._key}/{{path}}"  # aiohttp indexes it under the key

    def freeze(self) -> None:
        """Learn the key's routes: all are registered once the app freezes."""
        known = len(self._key.split("/"))  # the key's own segments: every path here has them
        by_length: dict[int, list[tuple[int, AbstractResource, Shape]]] = {}
        any_length: list[tuple[int, AbstractResource, Shape]] = []
        for order, resource in enumerate(self._router.resources()):
            if resource is self or index_key(resource.canonical) != self._key:
                continue
            shape = shape_of(resource)
            if shape is None:
                any_length.append((order, resource, ()))
            else:
                fixed = tuple((at, text) for at, text in shape[1] if at >= known)
                by_length.setdefault(shape[0], []).append((order, resource, fixed))
        self._any_length = [(resource, fixed) for _, resource, fixed in any_length]
        self._by_length = {
            length: [
                (resource, fixed)
                for _, resource, fixed in sorted([*entries, *any_length], key=lambda e: e[0])
            ]
            for length, entries in by_length.items()
        }

    async def resolve(self, request: web.Request) -> tuple[Any, set[str]]:
        segments = request.rel_url.path_safe.split("/")
        allowed: set[str] = set()
        for resource, fixed in self._by_length.get(len(segments), self._any_length):
            for position, text in fixed:
                if segments[position] != text:
                    break
            else:  # every fixed segment is the path's: the route's own match decides
                match, methods = await resource.resolve(request)
                if match is not None:
                    return match, methods
                allowed |= methods
        return None, allowed

    def url_for(self, **kwargs: str) -> URL:
        raise RuntimeError("the route index builds no URLs")

    def add_prefix(self, prefix: str) -> None:
        raise RuntimeError("the route index is not for sub-applications")

    def get_info(self) -> _InfoDict:
        return {"prefix": self._key}

    def raw_match(self, path: str) -> bool:
        return False

    def __len__(self) -> int:
        return 0

    def __iter__(self) -> Iterator[AbstractRoute]:
        return iter(())


def index_groups(router: web.UrlDispatcher) -> None:
    """A ``ShapeIndex`` for each of ``GROUPS``: call before adding any route."""
    for key in GROUPS:
        router.register_resource(ShapeIndex(router, key))
