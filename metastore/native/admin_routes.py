"""Native API: tenants, catalogs (with their storage), the main ref and its commit history."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace

from aiohttp import web

from metastore.engine import dropped
from metastore.engine.commits import CommitOutcome, Record
from metastore.errors import BadRequest, NoSuchCommit
from metastore.http import params
from metastore.http.authz import checker, may, visible
from metastore.http.caller import principal_of
from metastore.http.idempotency import Idempotency, first_entity, refuse_key
from metastore.http.tenancy import guard_quota
from metastore.http.typedefs import METASTORE, STORAGE
from metastore.http.validation import read_json
from metastore.iceberg import rebase
from metastore.model.keys import CATALOG_RECORD, SYSTEM_CATALOG
from metastore.model.names import check_system_name
from metastore.model.records import Entity
from metastore.native.render import commit_json, listed_json, named_json, ref_json
from metastore.security.privileges import Privilege
from metastore.security.securables import Securable
from metastore.storage.settings import STORAGE_RECORD, Storage

routes = web.RouteTableDef()

TENANTS = "/api/v1/tenants"
TENANT = TENANTS + "/{tenant}"
CATALOGS = TENANT + "/catalogs"
CATALOG = CATALOGS + "/{catalog}"


@routes.get(TENANTS)
async def list_tenants(request: web.Request) -> web.Response:
    token, size = params.page(request)
    shown = visible(request)  # the caller's own tenant only, unless a service admin
    metastore = request.app[METASTORE]
    result = await metastore.read(metastore.list_tenants, token, size, lambda n, e: shown.shows(n))
    allows = may(request)
    items = [
        listed_json(
            named_json(n, e),
            allows(Privilege.TENANT_READ_PROPERTIES, Securable.of_tenant(n)),
        )
        for n, e in result.items
    ]
    return web.json_response({"tenants": items, "next-page-token": result.next_token})


@routes.post(TENANTS)
async def create_tenant(request: web.Request) -> web.Response:
    body = await read_json(request, "create_named")
    name = check_system_name("tenant", body["name"])
    guard_quota(request, body.get("properties", {}), ())  # a service admin's to set
    metastore = request.app[METASTORE]
    once = Idempotency.of(request, metastore, name, SYSTEM_CATALOG)  # the record's home
    entity = await once.run(
        lambda record: metastore.create_tenant(
            name, body.get("properties", {}), principal_of(request), record
        ),
        first_entity,
    )
    return web.json_response(named_json(name, entity), status=201)


@routes.get(TENANT)
async def get_tenant(request: web.Request) -> web.Response:
    name = params.tenant(request)
    metastore = request.app[METASTORE]
    return web.json_response(
        named_json(name, await metastore.read_point(metastore.get_tenant, name))
    )


async def _update_record(request: web.Request, tenant: str, catalog: str) -> Entity:
    """Properties of a tenant (catalog "") or a catalog record."""
    body = await read_json(request, "update_properties")
    if "location" in body:
        raise BadRequest("tenants and catalogs have no location; use properties")
    if catalog == SYSTEM_CATALOG:  # a tenant's quota is a service admin's to set
        guard_quota(request, body.get("updates", {}), body.get("removals", []))
    else:
        dropped.check_properties(body.get("updates", {}))
        rebase.check_setting(body.get("updates", {}))
    metastore = request.app[METASTORE]
    entity = await Idempotency.of(request, metastore, tenant, catalog).run(
        lambda record: metastore.update_record(
            tenant,
            catalog,
            body.get("updates", {}),
            body.get("removals", []),
            body.get("expected-version"),
            principal_of(request),
            record,
        ),
        first_entity,
    )
    return entity


@routes.post(TENANT + "/properties")
async def update_tenant(request: web.Request) -> web.Response:
    name = params.tenant(request)
    return web.json_response(named_json(name, await _update_record(request, name, SYSTEM_CATALOG)))


@routes.delete(TENANT)
async def delete_tenant(request: web.Request) -> web.Response:
    name = params.tenant(request)
    refuse_key(request, "a tenant deletion")
    await request.app[METASTORE].delete_tenant(name, principal_of(request))
    return web.Response(status=204)


@routes.get(CATALOGS)
async def list_catalogs(request: web.Request) -> web.Response:
    tenant = params.tenant(request)
    token, size = params.page(request)
    shown = visible(request)  # those the caller holds something in, or all with CATALOG_LIST
    metastore = request.app[METASTORE]
    result = await metastore.read(
        metastore.list_catalogs, tenant, token, size, lambda n, e: shown.shows(n, e.entity_id)
    )
    items = await metastore.read(_listed_catalogs, request, tenant, result.items)
    return web.json_response({"catalogs": items, "next-page-token": result.next_token})


def _listed_catalogs(
    request: web.Request, tenant: str, catalogs: Sequence[tuple[str, Entity]]
) -> list[dict[str, object]]:
    """Each catalog without its properties unless the caller may read them (blocking: a
    check reads the catalog's record id)."""
    allows = may(request)
    return [
        listed_json(
            named_json(n, e),
            allows(Privilege.CATALOG_READ_PROPERTIES, Securable.of_catalog(tenant, n)),
        )
        for n, e in catalogs
    ]


def _operator(request: web.Request) -> bool:
    """The caller is a service admin (anyone, with auth off): it places storage anywhere
    the node's bounds allow."""
    found = checker(request)
    return found is None or found.service_admin


def _catalog_json(name: str, entity: Entity, storage: Storage) -> dict[str, object]:
    return {**named_json(name, entity), "storage": storage.to_json()}


def _recorded(outcome: CommitOutcome) -> Storage:
    entity = outcome.entities.get(STORAGE_RECORD)
    assert entity is not None, "the commit recorded no storage"
    return Storage.from_properties(entity.properties, entity.version)


@routes.post(CATALOGS)
async def create_catalog(request: web.Request) -> web.Response:
    """A catalog with the storage the body gives, else the node's warehouse settings'."""
    tenant = params.tenant(request)
    body = await read_json(request, "create_catalog")
    name = check_system_name("catalog", body["name"])
    dropped.check_properties(body.get("properties", {}))
    rebase.check_setting(body.get("properties", {}))
    metastore, storages = request.app[METASTORE], request.app[STORAGE]
    await metastore.read(metastore.check_tenant, tenant)
    given = "storage" in body
    storage = Storage.from_json(body["storage"]) if given else storages.seed(tenant, name)
    own = given and not _operator(request)
    await asyncio.to_thread(storages.check, tenant, name, storage, given=given, own_tenant=own)
    principal = principal_of(request)

    async def attempt(record: Record | None) -> tuple[Entity, Storage]:
        changes = storages.create_changes(storage)
        entity = await metastore.create_catalog(
            tenant, name, body.get("properties", {}), principal, record, changes
        )
        return entity, replace(storage, version=1)  # written in the catalog's root commit

    def replayed(first: CommitOutcome) -> tuple[Entity, Storage]:
        entity = first.entities.get(CATALOG_RECORD)
        assert entity is not None, "the commit created no catalog"
        return entity, _recorded(first)

    once = Idempotency.of(request, metastore, tenant, name)  # the record's home
    entity, created = await once.run(attempt, replayed)
    return web.json_response(_catalog_json(name, entity, created), status=201)


@routes.get(CATALOG)
async def get_catalog(request: web.Request) -> web.Response:
    tenant, catalog = params.tenant(request), params.catalog(request)
    metastore = request.app[METASTORE]
    entity = await metastore.read_point(metastore.get_catalog, tenant, catalog)
    storage = await metastore.read(request.app[STORAGE].of, tenant, catalog)
    return web.json_response(_catalog_json(catalog, entity, storage))


@routes.post(CATALOG + "/storage")
async def update_storage(request: web.Request) -> web.Response:
    """Replace the catalog's storage: where new tables go and what locations they may
    use; existing tables keep their locations."""
    tenant, catalog = params.tenant(request), params.catalog(request)
    body = await read_json(request, "update_storage")
    metastore, storages = request.app[METASTORE], request.app[STORAGE]
    current = await metastore.read(storages.of, tenant, catalog)  # 404 for an unknown one
    storage = Storage.from_json(body["storage"])
    own = not _operator(request)
    await asyncio.to_thread(
        storages.check, tenant, catalog, storage, given=True, own_tenant=own, current=current
    )
    principal = principal_of(request)

    expected = body.get("expected-version")
    outcome = await Idempotency.of(request, metastore, tenant, catalog).run(
        lambda record: storages.update(tenant, catalog, storage, expected, principal, record),
        lambda first: first,
    )
    entity = await metastore.read_point(metastore.get_catalog, tenant, catalog)
    return web.json_response(_catalog_json(catalog, entity, _recorded(outcome)))


@routes.post(CATALOG + "/properties")
async def update_catalog(request: web.Request) -> web.Response:
    tenant, catalog = params.tenant(request), params.catalog(request)
    entity = await _update_record(request, tenant, catalog)
    storage = await request.app[METASTORE].read(request.app[STORAGE].of, tenant, catalog)
    return web.json_response(_catalog_json(catalog, entity, storage))


@routes.delete(CATALOG)
async def delete_catalog(request: web.Request) -> web.Response:
    tenant, catalog = params.tenant(request), params.catalog(request)
    refuse_key(request, "a catalog deletion")
    await request.app[METASTORE].delete_catalog(tenant, catalog, principal_of(request))
    return web.Response(status=204)


@routes.get(CATALOG + "/ref")
async def get_ref(request: web.Request) -> web.Response:
    tenant, catalog = params.tenant(request), params.catalog(request)
    metastore = request.app[METASTORE]
    return web.json_response(
        ref_json(await metastore.read_point(metastore.get_ref, tenant, catalog))
    )


@routes.post(CATALOG + "/ref/reset")
async def reset_ref(request: web.Request) -> web.Response:
    tenant, catalog = params.tenant(request), params.catalog(request)
    body = await read_json(request, "reset_ref")
    refuse_key(request, "a ref reset")
    principal = principal_of(request)
    ref = await request.app[METASTORE].reset_ref(tenant, catalog, int(body["to"]), principal)
    return web.json_response(ref_json(ref))


@routes.get(CATALOG + "/commits")
async def list_commits(request: web.Request) -> web.Response:
    tenant, catalog = params.tenant(request), params.catalog(request)
    token, size = params.page(request)
    metastore = request.app[METASTORE]
    result = await metastore.read(metastore.list_commits, tenant, catalog, token, size)
    return web.json_response(
        {"commits": [commit_json(c) for c in result.items], "next-page-token": result.next_token}
    )


@routes.get(CATALOG + "/commits/{commit_id}")
async def get_commit(request: web.Request) -> web.Response:
    tenant, catalog = params.tenant(request), params.catalog(request)
    raw = request.match_info["commit_id"]
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 20:  # "²".isdigit() is True
        raise NoSuchCommit(f"no commit {raw!r}")
    metastore = request.app[METASTORE]
    commit = await metastore.read(metastore.head, tenant, catalog, int(raw))
    return web.json_response(commit_json(commit))
