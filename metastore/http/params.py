"""Path and query parameters, checked before any handler logic runs.

A namespace in a path (``{namespace}``) or in ``?parent=`` is its levels joined by
the unit separator (0x1F). The Iceberg API (paths under ``/v1/``) also splits on the
node's ``iceberg_namespace_separator`` when one is set (``ICEBERG_SEPARATOR``): both
characters separate levels there, and a level can hold neither (control characters
are refused by ``metastore.model.names``; the set separator by ``check_new_namespace``
when a namespace is created). Authorization (``metastore.node.route_privileges``) and the
handlers read a request's namespace through these same functions, so they always
name the same namespace.
"""

from __future__ import annotations

import re

from aiohttp import web

from metastore.errors import BadRequest, InvalidName
from metastore.model.keys import EntityKey, Kind
from metastore.model.names import check_name, check_namespace, check_system_name

NAMESPACE_SEPARATOR = "\x1f"  # as in the Iceberg REST spec
# the Iceberg API's extra separator (one character; set at startup, else none)
ICEBERG_SEPARATOR = web.AppKey("iceberg_namespace_separator", str)
_ICEBERG_PATHS = "/v1/"  # the Iceberg API's routes, with and without a prefix
_KINDS = {"namespace": Kind.NAMESPACE, "table": Kind.TABLE, "view": Kind.VIEW}
_COLLECTIONS = {"tables": Kind.TABLE, "views": Kind.VIEW}
_NAMESPACE = web.RequestKey("path-namespace", tuple)  # the path's namespace, once checked


def tenant(request: web.Request) -> str:
    return check_system_name("tenant", request.match_info["tenant"])


def catalog(request: web.Request) -> str:
    return check_system_name("catalog", request.match_info["catalog"])


def namespace_levels(text: str, separator: str = NAMESPACE_SEPARATOR) -> tuple[str, ...]:
    """Levels of a namespace as a path gives it: split on 0x1F and on ``separator``."""
    if separator != NAMESPACE_SEPARATOR:
        text = text.replace(separator, NAMESPACE_SEPARATOR)
    return check_namespace(text.split(NAMESPACE_SEPARATOR))


def separator(request: web.Request) -> str:
    """The separator this request's namespaces are joined with besides 0x1F: the set
    one on the Iceberg API, none (0x1F itself) on the native API."""
    resource = request.match_info.route.resource  # the matched route decides, not the path
    if resource is not None and resource.canonical.startswith(_ICEBERG_PATHS):
        return request.app.get(ICEBERG_SEPARATOR, NAMESPACE_SEPARATOR)
    return NAMESPACE_SEPARATOR


def namespace(request: web.Request) -> tuple[str, ...]:
    """The path's ``{namespace}``, checked once per request: authorization and the
    handler both ask for it, and its path parameter cannot change in between."""
    levels = request.get(_NAMESPACE)
    if levels is None:
        levels = request[_NAMESPACE] = namespace_levels(
            request.match_info["namespace"], separator(request)
        )
    return levels


def check_new_namespace(app: web.Application, key: EntityKey) -> EntityKey:
    """A namespace about to be created may not hold the Iceberg API's separator in a
    level: its Iceberg paths would name another namespace (400 before anything is
    written). Namespaces created before the separator was set keep their names."""
    chosen = app.get(ICEBERG_SEPARATOR, NAMESPACE_SEPARATOR)
    if key.kind is Kind.NAMESPACE and chosen != NAMESPACE_SEPARATOR:
        for level in key.path:
            if chosen in level:
                raise InvalidName(
                    f"invalid namespace name {level!r}: {chosen!r} separates namespace"
                    " levels on this node (iceberg_namespace_separator)"
                )
    return key


def collection_kind(request: web.Request) -> Kind:
    return _COLLECTIONS[request.match_info["kind"]]


def entity_key(request: web.Request) -> EntityKey:
    kind = collection_kind(request)
    return EntityKey(kind, namespace(request), check_name(kind.label, request.match_info["name"]))


def key_from_json(body: dict[str, object]) -> EntityKey:
    """``{"kind": ..., "path": [...]}`` (already schema-checked) -> EntityKey."""
    kind = _KINDS[str(body["kind"])]
    path = body["path"]
    assert isinstance(path, list)
    if kind is Kind.NAMESPACE:
        return EntityKey.namespace_key(check_namespace(path))
    if len(path) < 2:
        raise BadRequest(f"a {kind.label} path needs a namespace and a name")
    return EntityKey(kind, check_namespace(path[:-1]), check_name(kind.label, path[-1]))


_INTEGER = re.compile(r"^[+-]?[0-9]{1,100}$")  # past 100 digits no id, no size: 400


def _int(request: web.Request, name: str) -> int | None:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return None
    if _INTEGER.match(raw) is None:  # int() also reads other scripts' digits ("١٢" is 12)
        raise BadRequest(f"query parameter {name} must be an integer, got {raw[:40]!r}")
    return int(raw, 10)


def page(request: web.Request) -> tuple[str | None, int | None]:
    return request.query.get("pageToken") or None, _int(request, "pageSize")


def at(request: web.Request) -> int | None:
    """``?at=<commit id>`` selects the snapshot to read (point-in-time)."""
    value = _int(request, "at")
    if value is not None and value <= 0:
        raise BadRequest("query parameter at must be a commit id")
    return value


def parent(request: web.Request) -> tuple[str, ...]:
    raw = request.query.get("parent")
    return namespace_levels(raw, separator(request)) if raw else ()
