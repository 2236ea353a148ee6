"""Iceberg REST: views (create, load, replace, drop, list, rename, exists)."""

from __future__ import annotations

from aiohttp import web

from metastore.http import params
from metastore.iceberg.routes.context import PREFIX, Call, body_as, idempotent, json_response, named
from metastore.iceberg.routes.table_routes import entity_exists, list_identifiers, rename
from metastore.iceberg.views import CommitViewRequest, CreateViewRequest, Record
from metastore.model.changes import DropEntity
from metastore.model.keys import EntityKey, Kind
from metastore.model.names import check_name

routes = web.RouteTableDef()

VIEWS = PREFIX + "/namespaces/{namespace}/views"
VIEW = VIEWS + "/{view}"


@routes.get(VIEWS)
async def list_views(request: web.Request) -> web.Response:
    return await list_identifiers(request, Kind.VIEW)


@routes.post(VIEWS)
@idempotent
async def create_view(request: web.Request) -> web.Response:
    call = await Call.of(request)
    namespace = params.namespace(request)
    _, body = await body_as(request, "iceberg_create_view", CreateViewRequest)
    key = EntityKey(Kind.VIEW, namespace, check_name("view", body.name))
    result = await call.iceberg.views.create(
        call.tenant, call.catalog, key, body, call.principal, _record(call)
    )
    return json_response(result)


def _record(call: Call) -> Record:
    return lambda location: call.idempotency.record(200, metadata_location=location)


@routes.get(VIEW, allow_head=False)
async def load_view(request: web.Request) -> web.Response:
    call = await Call.of(request)
    key = named(request, Kind.VIEW, "view")
    views = call.iceberg.views
    return json_response(await call.metastore.read(views.load, call.tenant, call.catalog, key))


@routes.head(VIEW)
async def view_exists(request: web.Request) -> web.Response:
    return await entity_exists(request, Kind.VIEW, "view")


@routes.post(VIEW)
@idempotent
async def replace_view(request: web.Request) -> web.Response:
    call = await Call.of(request)
    key = named(request, Kind.VIEW, "view")
    _, body = await body_as(request, "iceberg_commit_view", CommitViewRequest)
    result = await call.iceberg.views.replace(
        call.tenant, call.catalog, key, body, call.principal, _record(call)
    )
    return json_response(result)


@routes.delete(VIEW)
@idempotent
async def drop_view(request: web.Request) -> web.Response:
    call = await Call.of(request)
    key = named(request, Kind.VIEW, "view")
    # kept, restorable, until garbage collection (``metastore.engine.dropped``)
    changes = (DropEntity(key, call.principal), *call.idempotency.record(204))
    await call.metastore.change(call.tenant, call.catalog, changes, call.principal, "drop view")
    return web.Response(status=204)


@routes.post(PREFIX + "/views/rename")
@idempotent
async def rename_view(request: web.Request) -> web.Response:
    return await rename(request, Kind.VIEW)
