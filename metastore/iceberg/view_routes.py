"""Iceberg REST: views (create, load, replace, drop, list, rename, exists)."""

from __future__ import annotations

from aiohttp import web

from metastore.api import params
from metastore.changes import DeleteEntity
from metastore.commits import CommitRequest
from metastore.errors import AlreadyExists, CommitConflict, NotFound
from metastore.iceberg.context import PREFIX, Call, body_as, json_response, named
from metastore.iceberg.table_routes import entity_exists, list_identifiers, rename
from metastore.iceberg.views import CommitViewRequest, CreateViewRequest, Record
from metastore.keys import EntityKey, Kind
from metastore.names import check_name

routes = web.RouteTableDef()

VIEWS = PREFIX + "/namespaces/{namespace}/views"
VIEW = VIEWS + "/{view}"


@routes.get(VIEWS)
async def list_views(request: web.Request) -> web.Response:
    return list_identifiers(request, Kind.VIEW)


@routes.post(VIEWS)
async def create_view(request: web.Request) -> web.Response:
    call = Call.of(request)
    if (replayed := call.idempotency.replay()) is not None:
        return replayed
    namespace = params.namespace(request)
    _, body = await body_as(request, "iceberg_create_view", CreateViewRequest)
    key = EntityKey(Kind.VIEW, namespace, check_name("view", body.name))
    try:
        result = await call.iceberg.views.create(
            call.tenant, call.catalog, key, body, call.principal, _record(call)
        )
    except AlreadyExists:
        if (replayed := call.idempotency.replay()) is not None:
            return replayed
        raise
    return json_response(result)


def _record(call: Call) -> Record:
    return lambda location: call.idempotency.record(200, metadata_location=location)


@routes.get(VIEW, allow_head=False)
async def load_view(request: web.Request) -> web.Response:
    call = Call.of(request)
    key = named(request, Kind.VIEW, "view")
    return json_response(call.iceberg.views.load(call.tenant, call.catalog, key))


@routes.head(VIEW)
async def view_exists(request: web.Request) -> web.Response:
    return entity_exists(request, Kind.VIEW, "view")


@routes.post(VIEW)
async def replace_view(request: web.Request) -> web.Response:
    call = Call.of(request)
    if (replayed := call.idempotency.replay()) is not None:
        return replayed
    key = named(request, Kind.VIEW, "view")
    _, body = await body_as(request, "iceberg_commit_view", CommitViewRequest)
    try:
        result = await call.iceberg.views.replace(
            call.tenant, call.catalog, key, body, call.principal, _record(call)
        )
    except (AlreadyExists, CommitConflict):
        if (replayed := call.idempotency.replay()) is not None:
            return replayed
        raise
    return json_response(result)


@routes.delete(VIEW)
async def drop_view(request: web.Request) -> web.Response:
    call = Call.of(request)
    if (replayed := call.idempotency.replay()) is not None:
        return replayed
    key = named(request, Kind.VIEW, "view")
    changes = (DeleteEntity(key), *call.idempotency.record(204))
    try:
        await call.metastore.commit(
            call.tenant, call.catalog, CommitRequest((), changes, call.principal, "drop view")
        )
    except (AlreadyExists, NotFound):
        if (replayed := call.idempotency.replay()) is not None:
            return replayed
        raise
    return web.Response(status=204)


@routes.post(PREFIX + "/views/rename")
async def rename_view(request: web.Request) -> web.Response:
    return await rename(request, Kind.VIEW)
