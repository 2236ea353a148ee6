"""Path and query parameters, checked before any handler logic runs."""

from __future__ import annotations

from aiohttp import web

from metastore.errors import BadRequest
from metastore.keys import EntityKey, Kind
from metastore.names import check_name, check_namespace, check_system_name

NAMESPACE_SEPARATOR = "\x1f"  # as in the Iceberg REST spec
_KINDS = {"namespace": Kind.NAMESPACE, "table": Kind.TABLE, "view": Kind.VIEW}
_COLLECTIONS = {"tables": Kind.TABLE, "views": Kind.VIEW}


def tenant(request: web.Request) -> str:
    return check_system_name("tenant", request.match_info["tenant"])


def catalog(request: web.Request) -> str:
    return check_system_name("catalog", request.match_info["catalog"])


def namespace_levels(text: str) -> tuple[str, ...]:
    return check_namespace(text.split(NAMESPACE_SEPARATOR))


def namespace(request: web.Request) -> tuple[str, ...]:
    return namespace_levels(request.match_info["namespace"])


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


def _int(request: web.Request, name: str) -> int | None:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw, 10)
    except ValueError:
        raise BadRequest(f"query parameter {name} must be an integer, got {raw!r}") from None


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
    return namespace_levels(raw) if raw else ()
