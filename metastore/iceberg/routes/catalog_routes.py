"""Iceberg REST: configuration and namespaces (tokens: ``token_routes``)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from metastore.errors import BadRequest, CommitConflict
from metastore.http import params
from metastore.http.authz import visible
from metastore.http.typedefs import CONFIG, METASTORE
from metastore.http.validation import read_json
from metastore.iceberg import listing
from metastore.iceberg.prefixes import encode_prefix
from metastore.iceberg.routes.context import PREFIX, Call, idempotent, json_response, warehouse_of
from metastore.iceberg.table_state import REBASES
from metastore.model.changes import CreateEntity, DeleteEntity, UpdateEntity
from metastore.model.keys import EntityKey, Kind
from metastore.model.names import check_namespace
from metastore.model.requirements import AssertVersion

routes = web.RouteTableDef()

NAMESPACES = PREFIX + "/namespaces"
NAMESPACE = NAMESPACES + "/{namespace}"

ENDPOINTS = [
    "GET /v1/{prefix}/namespaces",
    "POST /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "DELETE /v1/{prefix}/namespaces/{namespace}",
    "POST /v1/{prefix}/namespaces/{namespace}/properties",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "POST /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/sign",
    "POST /v1/{prefix}/namespaces/{namespace}/register",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/metrics",
    "POST /v1/{prefix}/tables/rename",
    "POST /v1/{prefix}/transactions/commit",
    "GET /v1/{prefix}/namespaces/{namespace}/views",
    "POST /v1/{prefix}/namespaces/{namespace}/views",
    "GET /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "POST /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "POST /v1/{prefix}/views/rename",
]


@routes.get("/v1/config")
async def get_config(request: web.Request) -> web.Response:
    tenant, catalog = warehouse_of(request)
    metastore = request.app[METASTORE]
    await metastore.read_point(metastore.get_ref, tenant, catalog)  # 404 for an unknown warehouse
    config = request.app[CONFIG]
    overrides = {"prefix": encode_prefix(tenant, catalog, config.default_tenant)}
    if (separator := config.namespace_separator) != params.NAMESPACE_SEPARATOR:
        overrides["namespace-separator"] = f"%{ord(separator):02X}"  # URL-encoded, as specified
    return json_response(
        {
            "defaults": {},
            "overrides": overrides,
            "endpoints": ENDPOINTS,
            "idempotency-key-lifetime": "PT30M",
        }
    )


# --- namespaces -------------------------------------------------------------------------


def _ns_key(request: web.Request) -> EntityKey:
    return EntityKey.namespace_key(params.namespace(request))


@routes.get(NAMESPACES)
async def list_namespaces(request: web.Request) -> web.Response:
    call = await Call.of(request)
    shown = visible(request)  # what the caller may see (metastore.node.route_privileges)
    parent = params.parent(request)
    if not listing.pages(request):  # no pageToken: every namespace in one response
        found = await call.metastore.read(
            listing.everything, call.metastore, call.tenant, call.catalog, parent,
            Kind.NAMESPACE, shown.shows,
        )  # fmt: skip
        return json_response({"namespaces": [list(e.path) for e in found], "next-page-token": None})
    token, size = params.page(request)
    page = await call.metastore.read(
        call.metastore.list_entities,
        call.tenant,
        call.catalog,
        parent,
        Kind.NAMESPACE,
        token,
        size,
        shows=shown.shows,
    )
    namespaces = [list(e.path) for e in page.items]
    return json_response({"namespaces": namespaces, "next-page-token": page.next_token})


@routes.post(NAMESPACES)
@idempotent
async def create_namespace(request: web.Request) -> web.Response:
    call = await Call.of(request)
    body = await read_json(request, "iceberg_create_namespace")
    key = params.check_new_namespace(
        request.app, EntityKey.namespace_key(check_namespace(body["namespace"]))
    )
    result = {"namespace": list(key.path), "properties": body.get("properties", {})}
    changes = (CreateEntity(key, body.get("properties", {})), *call.idempotency.record(200, result))
    await call.metastore.change(
        call.tenant, call.catalog, changes, call.principal, "create namespace"
    )
    return json_response(result)


@routes.get(NAMESPACE, allow_head=False)
async def load_namespace(request: web.Request) -> web.Response:
    call = await Call.of(request)
    metastore = call.metastore
    entity = await metastore.read_point(
        metastore.get_entity, call.tenant, call.catalog, _ns_key(request)
    )
    return json_response({"namespace": list(entity.path), "properties": dict(entity.properties)})


@routes.head(NAMESPACE)
async def namespace_exists(request: web.Request) -> web.Response:
    call = await Call.of(request)
    metastore = call.metastore
    await metastore.read_point(metastore.get_entity, call.tenant, call.catalog, _ns_key(request))
    return web.Response(status=204)


@routes.delete(NAMESPACE)
@idempotent
async def drop_namespace(request: web.Request) -> web.Response:
    call = await Call.of(request)
    changes = (DeleteEntity(_ns_key(request)), *call.idempotency.record(204))
    await call.metastore.change(
        call.tenant, call.catalog, changes, call.principal, "drop namespace"
    )
    return web.Response(status=204)


@routes.post(NAMESPACE + "/properties")
@idempotent
async def update_namespace(request: web.Request) -> web.Response:
    call = await Call.of(request)
    key = _ns_key(request)
    body = await read_json(request, "iceberg_update_namespace")
    updates: dict[str, str] = body.get("updates", {})
    removals: list[str] = body.get("removals", [])
    if set(updates) & set(removals):
        raise BadRequest(f"keys both updated and removed: {sorted(set(updates) & set(removals))}")
    attempts = REBASES.start()
    while True:
        entity = await call.metastore.read_point(
            call.metastore.get_entity, call.tenant, call.catalog, key
        )
        result: dict[str, Any] = {
            "updated": sorted(updates),
            "removed": sorted(k for k in set(removals) if k in entity.properties),
            "missing": sorted(k for k in set(removals) if k not in entity.properties),
        }
        changes = (
            UpdateEntity(key, updates, tuple(removals)),
            *call.idempotency.record(200, result),
        )
        requirements = (AssertVersion(key, entity.version),)
        operation = "update namespace properties"
        try:
            await call.metastore.change(
                call.tenant, call.catalog, changes, call.principal, operation, requirements
            )
        except CommitConflict:  # another commit changed the namespace: redo on its new state
            if not await attempts.abackoff():
                raise
            continue
        return json_response(result)
