"""Native API: namespaces, tables and views of a catalog, and atomic multi-entity commits."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from aiohttp import web

from metastore.engine.commits import CommitOutcome
from metastore.engine.location_index import MayRead
from metastore.errors import BadRequest
from metastore.http import params
from metastore.http.authz import may, visible
from metastore.http.caller import principal_of
from metastore.http.idempotency import Idempotency
from metastore.http.typedefs import CONFIG, METASTORE, STORAGE
from metastore.http.validation import body_of, read_json
from metastore.iceberg.routes.context import flag
from metastore.model.changes import (
    Change,
    CreateEntity,
    DeleteEntity,
    DropEntity,
    RenameEntity,
    UndropEntity,
    UpdateEntity,
)
from metastore.model.keys import EntityKey, Kind
from metastore.model.locations import check_inside
from metastore.model.names import check_name, check_namespace
from metastore.model.records import Entity
from metastore.model.requirements import (
    AssertEmpty,
    AssertExists,
    AssertNotExists,
    AssertVersion,
    Requirement,
)
from metastore.native.admin_routes import CATALOG
from metastore.native.render import dropped_json, entity_json, listed_json, outcome_json
from metastore.security.privileges import Privilege
from metastore.security.securables import Securable

routes = web.RouteTableDef()

NAMESPACES = CATALOG + "/namespaces"
NAMESPACE = NAMESPACES + "/{namespace}"
COLLECTION = NAMESPACE + "/{kind:tables|views}"
ENTITY = COLLECTION + "/{name}"
UNDROP = ENTITY + "/undrop"


def _version_requirement(key: EntityKey, body: dict[str, Any]) -> tuple[Requirement, ...]:
    version = body.get("expected-version")
    return (AssertVersion(key, version),) if version is not None else ()


def _update(key: EntityKey, body: dict[str, Any]) -> UpdateEntity:
    if "location" in body:
        return UpdateEntity(
            key, body.get("updates", {}), tuple(body.get("removals", [])), body["location"]
        )
    return UpdateEntity(key, body.get("updates", {}), tuple(body.get("removals", [])))


def _sets_location(change: Change) -> bool:
    if not isinstance(change, CreateEntity | UpdateEntity) or change.location is None:
        return False
    return not isinstance(change, UpdateEntity) or change.sets_location


def _contained(request: web.Request, change: Change) -> Change:
    """A location must lie inside one of the catalog's allowed locations (its storage),
    by the same rule as on the Iceberg API (``metastore.model.locations``); it is stored
    normalized. No symlinks to resolve: the server never touches a native entity's files.
    (Whether a table may take a dropped table's kept location is the commit's to ask,
    ``CommitRequest.may_read``: nothing is written or vended before it.)"""
    if not _sets_location(change):
        return change
    assert isinstance(change, CreateEntity | UpdateEntity) and change.location is not None
    storage = request.app[STORAGE].of(params.tenant(request), params.catalog(request))
    what = f"{change.key.kind.label} location"
    return replace(change, location=check_inside(change.location, storage.allowed, what))


def _may_read(request: web.Request) -> MayRead:
    """Whether the caller may read a table's data (everyone, with auth off); the check
    may read the catalog's record id: call it off the event loop."""
    allows = may(request)
    tenant, catalog = params.tenant(request), params.catalog(request)
    return lambda key: allows(Privilege.TABLE_READ_DATA, Securable.of_entity(tenant, catalog, key))


def _contained_all(request: web.Request, changes: tuple[Change, ...]) -> tuple[Change, ...]:
    return tuple(_contained(request, change) for change in changes)


async def _commit(
    request: web.Request,
    requirements: tuple[Requirement, ...],
    changes: tuple[Change, ...],
    operation: str,
) -> CommitOutcome:
    """Commit as the request's principal; a retried ``Idempotency-Key`` gets the first outcome."""
    tenant, catalog = params.tenant(request), params.catalog(request)
    metastore = request.app[METASTORE]
    if any(_sets_location(change) for change in changes):  # the storage is a store read
        changes = await metastore.read(_contained_all, request, changes)
    principal = principal_of(request)
    may_read = _may_read(request)  # for a table taking a kept location (the commit asks)
    return await Idempotency.of(request, metastore, tenant, catalog).run(
        lambda record: metastore.change(
            tenant, catalog, changes, principal, operation, requirements, record, may_read
        ),
        lambda first: first,
    )


async def _commit_one(
    request: web.Request, change: Change, requirements: tuple[Requirement, ...], operation: str
) -> web.Response:
    outcome = await _commit(request, requirements, (change,), operation)
    entity = outcome.entities.get(change.key)
    if entity is None:
        return web.Response(status=204)
    status = 201 if isinstance(change, CreateEntity) else 200
    return web.json_response(entity_json(entity), status=status)


# --- namespaces ------------------------------------------------------------------------


@routes.get(NAMESPACES)
async def list_namespaces(request: web.Request) -> web.Response:
    tenant, catalog = params.tenant(request), params.catalog(request)
    token, size = params.page(request)
    shown = visible(request)  # what the caller may see (metastore.node.route_privileges)
    metastore = request.app[METASTORE]
    result = await metastore.read(
        metastore.list_entities,
        tenant,
        catalog,
        params.parent(request),
        Kind.NAMESPACE,
        token,
        size,
        params.at(request),
        shows=shown.shows,
    )
    items = await metastore.read(_listed, request, tenant, catalog, result.items)
    return web.json_response({"namespaces": items, "next-page-token": result.next_token})


_READ_PROPERTIES = {
    Kind.NAMESPACE: Privilege.NAMESPACE_READ_PROPERTIES,
    Kind.TABLE: Privilege.TABLE_READ_PROPERTIES,
    Kind.VIEW: Privilege.VIEW_READ,
}


def _listed(
    request: web.Request, tenant: str, catalog: str, entities: Sequence[Entity]
) -> list[dict[str, Any]]:
    """The listed entities' JSON, each without its properties and location unless the
    caller may read them (``render.listed_json``; blocking: a check may read)."""
    allows = may(request)
    return [
        listed_json(
            entity_json(e),
            allows(_READ_PROPERTIES[e.kind], Securable.of_entity(tenant, catalog, e.key)),
        )
        for e in entities
    ]


@routes.post(NAMESPACES)
async def create_namespace(request: web.Request) -> web.Response:
    body = await read_json(request, "create_namespace")
    key = EntityKey.namespace_key(check_namespace(body["namespace"]))
    change = CreateEntity(params.check_new_namespace(request.app, key), body.get("properties", {}))
    return await _commit_one(request, change, (), "create namespace")


@routes.get(NAMESPACE)
async def get_namespace(request: web.Request) -> web.Response:
    tenant, catalog = params.tenant(request), params.catalog(request)
    key = EntityKey.namespace_key(params.namespace(request))
    metastore = request.app[METASTORE]
    entity = await metastore.read_point(
        metastore.get_entity, tenant, catalog, key, params.at(request)
    )
    return web.json_response(entity_json(entity))


@routes.post(NAMESPACE + "/properties")
async def update_namespace(request: web.Request) -> web.Response:
    key = EntityKey.namespace_key(params.namespace(request))
    body = await read_json(request, "update_properties")
    if "location" in body:
        raise BadRequest("a namespace has no location; use properties")
    change = _update(key, body)
    return await _commit_one(
        request, change, _version_requirement(key, body), "update namespace properties"
    )


@routes.delete(NAMESPACE)
async def delete_namespace(request: web.Request) -> web.Response:
    key = EntityKey.namespace_key(params.namespace(request))
    return await _commit_one(request, DeleteEntity(key), (), "drop namespace")


# --- tables and views (generic entities) -----------------------------------------------


@routes.get(COLLECTION)
async def list_entities(request: web.Request) -> web.Response:
    tenant, catalog = params.tenant(request), params.catalog(request)
    kind = params.collection_kind(request)
    token, size = params.page(request)
    shown = visible(request)  # what the caller may see (metastore.node.route_privileges)
    metastore = request.app[METASTORE]
    result = await metastore.read(
        metastore.list_entities,
        tenant,
        catalog,
        params.namespace(request),
        kind,
        token,
        size,
        params.at(request),
        shows=shown.shows,
    )
    body: dict[str, Any] = {
        request.match_info["kind"]: await metastore.read(
            _listed, request, tenant, catalog, result.items
        ),
        "next-page-token": result.next_token,
    }
    if flag(request, "include-dropped"):
        if params.at(request) is not None:
            raise BadRequest("include-dropped lists what is kept now: it takes no 'at'")
        if token is None:  # with the first page: every kept one, dropped last first
            kept = await metastore.read(
                metastore.list_dropped,
                tenant,
                catalog,
                params.namespace(request),
                kind,
                shown.shows,
            )
            body["dropped"] = [dropped_json(d) for d in kept]
    return web.json_response(body)


@routes.post(COLLECTION)
async def create_entity(request: web.Request) -> web.Response:
    kind = params.collection_kind(request)
    namespace = params.namespace(request)
    body = await read_json(request, "create_entity")
    key = EntityKey(kind, namespace, check_name(kind.label, body["name"]))
    change = CreateEntity(key, body.get("properties", {}), body.get("location"))
    return await _commit_one(request, change, (), f"create {kind.label}")


@routes.get(ENTITY)
async def get_entity(request: web.Request) -> web.Response:
    tenant, catalog = params.tenant(request), params.catalog(request)
    metastore = request.app[METASTORE]
    key, at = params.entity_key(request), params.at(request)
    entity = await metastore.read_point(metastore.get_entity, tenant, catalog, key, at)
    return web.json_response(entity_json(entity))


@routes.post(ENTITY)
async def update_entity(request: web.Request) -> web.Response:
    key = params.entity_key(request)
    body = await read_json(request, "update_properties")
    return await _commit_one(
        request, _update(key, body), _version_requirement(key, body), f"update {key.kind.label}"
    )


@routes.delete(ENTITY)
async def delete_entity(request: web.Request) -> web.Response:
    """Drop a table or view, kept restorable until garbage collection
    (``metastore.engine.dropped``)."""
    key = params.entity_key(request)
    change = DropEntity(key, principal_of(request))
    return await _commit_one(request, change, (), f"drop {key.kind.label}")


@routes.post(UNDROP)
async def undrop_entity(request: web.Request) -> web.Response:
    """Restore a dropped table or view under its name: the one dropped last, or the one
    whose ``entity-id`` the body names (404 if none is kept, 409 if the name is taken)."""
    key = params.entity_key(request)
    body = await read_json(request, "undrop") if body_of(request) else {}
    entity_id = int(body["entity-id"]) if "entity-id" in body else None
    outcome = await _commit(
        request, (), (UndropEntity(key, entity_id),), f"undrop {key.kind.label}"
    )
    entity = outcome.entities.get(key)
    assert entity is not None
    return web.json_response(entity_json(entity))


@routes.post(CATALOG + "/rename")
async def rename_entity(request: web.Request) -> web.Response:
    body = await read_json(request, "rename")
    source = params.key_from_json(body["source"])
    destination = params.key_from_json(body["destination"])
    if source.kind is Kind.NAMESPACE or destination.kind is not source.kind:
        raise BadRequest("rename moves a table or a view and keeps its kind")
    return await _commit_one(
        request, RenameEntity(source, destination), (), f"rename {source.kind.label}"
    )


# --- atomic multi-entity commit -------------------------------------------------------


def _requirement(item: dict[str, Any]) -> Requirement:
    kind = item["type"]
    if kind == "assert-empty":
        return AssertEmpty(check_namespace(item["namespace"], allow_empty=True))
    key = params.key_from_json(item["entity"])
    if kind == "assert-exists":
        return AssertExists(key)
    if kind == "assert-not-exists":
        return AssertNotExists(key)
    return AssertVersion(key, item["version"])


def _change(item: dict[str, Any]) -> Change:
    key = params.key_from_json(item["entity"])
    action = item["action"]
    if action == "create":
        return CreateEntity(key, item.get("properties", {}), item.get("location"))
    if action == "update":
        return _update(key, item)
    if action == "delete":
        return DeleteEntity(key)
    return RenameEntity(key, params.key_from_json(item["to"]))


@routes.post(CATALOG + "/commit")
async def commit(request: web.Request) -> web.Response:
    body = await read_json(request, "commit")
    limit = request.app[CONFIG].max_changes_per_commit
    count = len(body["changes"]) + len(body.get("requirements", []))
    if count > limit:
        raise BadRequest(f"{count} changes and requirements exceed the limit of {limit} per commit")
    requirements = tuple(_requirement(r) for r in body.get("requirements", []))
    changes = tuple(_change(c) for c in body["changes"])
    for change in changes:
        if isinstance(change, CreateEntity):
            params.check_new_namespace(request.app, change.key)
    touched = [c.key for c in changes]
    if len(set(touched)) != len(touched):
        raise BadRequest("a commit may change each entity at most once")
    operation = body.get("operation") or "commit"
    outcome = await _commit(request, requirements, changes, operation)
    return web.json_response(outcome_json(outcome))
