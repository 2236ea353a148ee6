"""Native API: principal roles, catalog roles and grants (the tenant's access policy).

Principal roles are held by principals; catalog roles belong to one catalog, hold
privileges on it and on what it holds, and are granted to principal roles;
principal roles may also hold privileges on the tenant itself. Everything is a
record of the tenant's system catalog (``metastore.security.grants``) written by a
commit, so every grant and revoke is in the tenant's history
(``GET /api/v1/tenants/{t}/commits``) and applies on every node from the moment the
commit reaches it. Reads answer from the node's policy snapshot, the same one the
checks use. Which caller may call each route is ``metastore.api.access``'s; the one
rule enforced here is that only tenant admins (and service admins) hand out the
built-in ``tenant_admin`` role.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from aiohttp import web

from metastore.api import params
from metastore.api.authz import checker, visible
from metastore.api.idempotency import Idempotency
from metastore.api.native_admin import CATALOG, TENANT
from metastore.api.principal import principal_of
from metastore.api.typedefs import AUTHORIZER, METASTORE
from metastore.api.validation import read_json
from metastore.changes import Change, CreateEntity, DeleteEntity, UpdateEntity
from metastore.commits import CommitOutcome, CommitRequest
from metastore.errors import (
    AlreadyExists,
    BadRequest,
    Forbidden,
    NoSuchCatalog,
    NoSuchGrant,
    NoSuchRole,
    NotFound,
)
from metastore.keys import SYSTEM_CATALOG, EntityKey
from metastore.model import Entity
from metastore.names import check_system_name
from metastore.requirements import AssertEntityId, AssertVersion, Requirement
from metastore.security.grants import (
    GRANT,
    MEMBER,
    PRINCIPAL,
    ROLE_GRANT,
    TENANT_ADMIN,
    Grant,
    Grantee,
    Record,
    catalog_role_record,
    check_user_properties,
    grant_record,
    member_record,
    principal_role_key,
    role_grant_record,
    securable_json,
    securable_path,
    system_key,
    user_properties,
)
from metastore.security.policy import CatalogRole, Policy
from metastore.security.privileges import Privilege

routes = web.RouteTableDef()

PRINCIPAL_ROLES = TENANT + "/principal-roles"
PRINCIPAL_ROLE = PRINCIPAL_ROLES + "/{role}"
MEMBERS = PRINCIPAL_ROLE + "/principals"
MEMBER_PATH = MEMBERS + "/{principal}"
ROLE_CATALOG_ROLES = PRINCIPAL_ROLE + "/catalog-roles"
ROLE_CATALOG_ROLE = ROLE_CATALOG_ROLES + "/{catalog}/{catalog_role}"
ROLE_GRANTS = PRINCIPAL_ROLE + "/grants"
CATALOG_ROLES = CATALOG + "/catalog-roles"
CATALOG_ROLE_PATH = CATALOG_ROLES + "/{role}"
CATALOG_ROLE_GRANTS = CATALOG_ROLE_PATH + "/grants"


# --- helpers ------------------------------------------------------------------------------


def _policy(request: web.Request, tenant: str) -> Policy:
    request.app[METASTORE].check_tenant(tenant)  # 404 for an unknown tenant
    return request.app[AUTHORIZER].policies.get(tenant)


def _role_name(request: web.Request, part: str = "role") -> str:
    return check_system_name("role", request.match_info[part])


def _principal_role(policy: Policy, role: str) -> Entity | None:
    """The role's record; None for the built-in ``tenant_admin`` (404 for no role)."""
    if role == TENANT_ADMIN:
        return None
    entity = policy.principal_roles.get(role)
    if entity is None:
        raise NoSuchRole(f"principal role does not exist: {role}")
    return entity


def _catalog_role(request: web.Request, policy: Policy, tenant: str, catalog: str) -> CatalogRole:
    catalog_id = _catalog_id(request, tenant, catalog)
    name = _role_name(request)
    role = policy.catalog_role(catalog, name, catalog_id)
    if role is None:
        raise NoSuchRole(f"catalog role does not exist: {catalog}.{name}")
    return role


def _catalog_id(request: web.Request, tenant: str, catalog: str) -> int:
    found = request.app[AUTHORIZER].catalog_id(tenant, catalog)
    if found is None:
        raise NoSuchCatalog(f"catalog does not exist: {catalog}")
    return found


def _role_json(name: str, entity: Entity | None) -> dict[str, Any]:
    if entity is None:
        return {"name": name, "built-in": True, "properties": {}}
    return {
        "name": name,
        "built-in": False,
        "properties": user_properties(entity.properties),
        "version": entity.version,
        "created-at-ms": entity.created_at_us // 1000,
        "updated-at-ms": entity.updated_at_us // 1000,
    }


def _grant_json(grant: Grant) -> dict[str, Any]:
    return {
        "privilege": grant.privilege.name,
        "securable": securable_json(grant.kind, grant.path),
    }


async def _commit(
    request: web.Request,
    tenant: str,
    requirements: Sequence[Requirement],
    changes: Sequence[Change],
    operation: str,
) -> CommitOutcome:
    """One commit to the tenant's system catalog; a retried ``Idempotency-Key`` gets the
    first outcome."""
    metastore = request.app[METASTORE]
    commit = CommitRequest(tuple(requirements), tuple(changes), principal_of(request), operation)
    return await Idempotency.of(request, metastore, tenant, SYSTEM_CATALOG).run(
        lambda record: metastore.commit(tenant, SYSTEM_CATALOG, replace(commit, record=record)),
        lambda first: first,
    )


def _put(policy: Policy, record: Record) -> tuple[list[Requirement], Change] | None:
    """The change writing a link record: None if it is there already as given; an update
    of a stale one (a link of a deleted role, say) that must still be the one read."""
    key, properties = record
    current = policy.records.get(key.name)
    if current is None:
        return [], CreateEntity(key, properties)
    if dict(current.properties) == properties:
        return None
    stale = [k for k in current.properties if k not in properties]
    return [AssertVersion(key, current.version)], UpdateEntity(key, properties, tuple(stale))


def _deletions(policy: Policy, *prefixes: str) -> list[Change]:
    return [DeleteEntity(system_key(name)) for name in policy.dependents(*prefixes)]


def _entity_id(entity: Entity | None) -> str:
    return "" if entity is None else str(entity.entity_id)


def _same(key: EntityKey, entity: Entity | None) -> list[Requirement]:
    """The linked record is still the one read (not deleted, maybe re-created, since)."""
    return [] if entity is None else [AssertEntityId(key, entity.entity_id)]


def _privilege(body: dict[str, Any]) -> Privilege:
    try:
        privilege = Privilege.named(body["privilege"])
    except KeyError:
        raise BadRequest(f"no such privilege: {body['privilege']!r}") from None
    if not privilege.grantable:
        raise BadRequest(f"{privilege.name} is held by service admins only; it cannot be granted")
    return privilege


# --- principal roles ------------------------------------------------------------------------


@routes.get(PRINCIPAL_ROLES)
async def list_principal_roles(request: web.Request) -> web.Response:
    tenant = params.tenant(request)
    policy = _policy(request, tenant)
    shown = visible(request)
    roles = [_role_json(TENANT_ADMIN, None)] + [
        _role_json(name, entity) for name, entity in sorted(policy.principal_roles.items())
    ]
    return web.json_response(
        {"principal-roles": [r for r in roles if shown.shows(r["name"])], "next-page-token": None}
    )


@routes.post(PRINCIPAL_ROLES)
async def create_principal_role(request: web.Request) -> web.Response:
    tenant = params.tenant(request)
    body = await read_json(request, "create_role")
    name = check_system_name("principal role", body["name"])
    if name == TENANT_ADMIN:
        raise AlreadyExists(f"{TENANT_ADMIN} is built in")
    properties = check_user_properties(body.get("properties", {}))
    request.app[METASTORE].check_tenant(tenant)
    change = CreateEntity(principal_role_key(name), properties)
    outcome = await _commit(request, tenant, (), (change,), "create principal role")
    return web.json_response(_role_json(name, outcome.entities[change.key]), status=201)


@routes.get(PRINCIPAL_ROLE)
async def get_principal_role(request: web.Request) -> web.Response:
    tenant, role = params.tenant(request), _role_name(request)
    entity = _principal_role(_policy(request, tenant), role)
    return web.json_response(_role_json(role, entity))


@routes.delete(PRINCIPAL_ROLE)
async def delete_principal_role(request: web.Request) -> web.Response:
    """The role and every link to it: memberships, catalog roles granted, grants."""
    tenant, role = params.tenant(request), _role_name(request)
    policy = _policy(request, tenant)
    entity = _principal_role(policy, role)
    if entity is None:
        raise BadRequest(f"{TENANT_ADMIN} is built in; it cannot be deleted")
    key = principal_role_key(role)
    changes = [
        DeleteEntity(key),
        *_deletions(policy, f"{MEMBER}{role}:", f"{ROLE_GRANT}{role}:", f"{GRANT}p:{role}:"),
    ]
    await _commit(request, tenant, _same(key, entity), changes, "delete principal role")
    return web.Response(status=204)


# --- principals holding a principal role ---------------------------------------------------


@routes.get(MEMBERS)
async def list_members(request: web.Request) -> web.Response:
    tenant, role = params.tenant(request), _role_name(request)
    policy = _policy(request, tenant)
    _principal_role(policy, role)
    return web.json_response({"principals": policy.members_of(role), "next-page-token": None})


@routes.post(MEMBERS)
async def add_member(request: web.Request) -> web.Response:
    tenant, role = params.tenant(request), _role_name(request)
    body = await read_json(request, "assign_role")
    name = check_system_name("principal", body["principal"])
    policy = _policy(request, tenant)
    entity = _principal_role(policy, role)
    if entity is None:
        caller = checker(request)
        if caller is not None and not (caller.service_admin or caller.access.admin):
            raise Forbidden(f"only tenant admins may give others the {TENANT_ADMIN} role")
    principal_key = system_key(PRINCIPAL + name)
    try:
        principal = request.app[METASTORE].get_entity(tenant, SYSTEM_CATALOG, principal_key)
    except NotFound:
        raise NotFound(f"principal does not exist: {name}") from None
    put = _put(policy, member_record(role, _entity_id(entity), name, _entity_id(principal)))
    result = {"principal-role": role, "principal": name}
    if put is None:
        return web.json_response(result)
    requirements, change = put
    requirements += _same(principal_role_key(role), entity) + _same(principal_key, principal)
    await _commit(request, tenant, requirements, (change,), "give principal role")
    return web.json_response(result, status=201)


@routes.delete(MEMBER_PATH)
async def remove_member(request: web.Request) -> web.Response:
    tenant, role = params.tenant(request), _role_name(request)
    name = check_system_name("principal", request.match_info["principal"])
    policy = _policy(request, tenant)
    entity = _principal_role(policy, role)
    if entity is None:
        caller = checker(request)
        if caller is not None and not (caller.service_admin or caller.access.admin):
            raise Forbidden(f"only tenant admins may take the {TENANT_ADMIN} role away")
    key, _ = member_record(role, "", name, "")
    if key.name not in policy.records:
        raise NoSuchRole(f"principal {name} does not hold the principal role {role}")
    await _commit(request, tenant, (), (DeleteEntity(key),), "take principal role")
    return web.Response(status=204)


# --- catalog roles granted to a principal role ----------------------------------------------


@routes.get(ROLE_CATALOG_ROLES)
async def list_role_catalog_roles(request: web.Request) -> web.Response:
    tenant, role = params.tenant(request), _role_name(request)
    policy = _policy(request, tenant)
    _principal_role(policy, role)
    held = sorted(policy.role_grants.get(role, ()))
    return web.json_response(
        {"catalog-roles": [{"catalog": c, "name": r} for c, r in held], "next-page-token": None}
    )


@routes.post(ROLE_CATALOG_ROLES)
async def grant_catalog_role(request: web.Request) -> web.Response:
    tenant, role = params.tenant(request), _role_name(request)
    body = await read_json(request, "grant_catalog_role")
    catalog = check_system_name("catalog", body["catalog"])
    name = check_system_name("catalog role", body["catalog-role"])
    policy = _policy(request, tenant)
    entity = _principal_role(policy, role)
    if entity is None:
        raise BadRequest(f"{TENANT_ADMIN} holds every privilege of its tenant already")
    target = policy.catalog_role(catalog, name, _catalog_id(request, tenant, catalog))
    if target is None:
        raise NoSuchRole(f"catalog role does not exist: {catalog}.{name}")
    record = role_grant_record(role, _entity_id(entity), catalog, name, _entity_id(target.entity))
    put = _put(policy, record)
    result = {"catalog": catalog, "name": name}
    if put is None:
        return web.json_response(result)
    requirements, change = put
    requirements += _same(principal_role_key(role), entity)
    requirements += _same(target.entity.key, target.entity)
    await _commit(request, tenant, requirements, (change,), "grant catalog role")
    return web.json_response(result, status=201)


@routes.delete(ROLE_CATALOG_ROLE)
async def revoke_catalog_role(request: web.Request) -> web.Response:
    tenant, role = params.tenant(request), _role_name(request)
    catalog = params.catalog(request)
    name = _role_name(request, "catalog_role")
    policy = _policy(request, tenant)
    key, _ = role_grant_record(role, "", catalog, name, "")
    if key.name not in policy.records:
        raise NoSuchGrant(f"catalog role {catalog}.{name} is not granted to {role}")
    await _commit(request, tenant, (), (DeleteEntity(key),), "revoke catalog role")
    return web.Response(status=204)


# --- privileges on the tenant, held by a principal role -----------------------------------


def _tenant_grant(request: web.Request, policy: Policy, body: dict[str, Any]) -> Grant:
    role = _role_name(request)
    if _principal_role(policy, role) is None:
        raise BadRequest(f"{TENANT_ADMIN} holds every privilege of its tenant already")
    kind, path = securable_path(body.get("securable", {"kind": "tenant"}), None)
    return Grant(Grantee(role), _privilege(body), kind, path)


@routes.get(ROLE_GRANTS)
async def list_role_grants(request: web.Request) -> web.Response:
    tenant, role = params.tenant(request), _role_name(request)
    policy = _policy(request, tenant)
    _principal_role(policy, role)
    grants = sorted(policy.grants.get(Grantee(role), ()), key=lambda g: g.privilege.name)
    return web.json_response({"grants": [_grant_json(g) for g in grants], "next-page-token": None})


@routes.post(ROLE_GRANTS)
async def grant_to_principal_role(request: web.Request) -> web.Response:
    tenant = params.tenant(request)
    body = await read_json(request, "grant_privilege")
    policy = _policy(request, tenant)
    grant = _tenant_grant(request, policy, body)
    entity = policy.principal_roles[grant.grantee.role]
    return await _grant(request, tenant, policy, grant, entity)


@routes.post(ROLE_GRANTS + "/revoke")
async def revoke_from_principal_role(request: web.Request) -> web.Response:
    tenant = params.tenant(request)
    body = await read_json(request, "grant_privilege")
    policy = _policy(request, tenant)
    return await _revoke(request, tenant, policy, _tenant_grant(request, policy, body))


async def _grant(
    request: web.Request, tenant: str, policy: Policy, grant: Grant, grantee: Entity
) -> web.Response:
    put = _put(policy, grant_record(grant, str(grantee.entity_id)))
    if put is None:
        return web.json_response(_grant_json(grant))
    requirements, change = put
    requirements += _same(grantee.key, grantee)
    await _commit(request, tenant, requirements, (change,), f"grant {grant.privilege.name}")
    return web.json_response(_grant_json(grant), status=201)


async def _revoke(request: web.Request, tenant: str, policy: Policy, grant: Grant) -> web.Response:
    if grant.key.name not in policy.records:
        raise NoSuchGrant(f"no such grant: {grant.privilege.name} to {grant.grantee.role}")
    change = DeleteEntity(grant.key)
    await _commit(request, tenant, (), (change,), f"revoke {grant.privilege.name}")
    return web.Response(status=204)


# --- catalog roles ---------------------------------------------------------------------------


@routes.get(CATALOG_ROLES)
async def list_catalog_roles(request: web.Request) -> web.Response:
    tenant, catalog = params.tenant(request), params.catalog(request)
    policy = _policy(request, tenant)
    roles = policy.catalog_roles_of(catalog, _catalog_id(request, tenant, catalog))
    return web.json_response(
        {"catalog-roles": [_role_json(r.name, r.entity) for r in roles], "next-page-token": None}
    )


@routes.post(CATALOG_ROLES)
async def create_catalog_role(request: web.Request) -> web.Response:
    """A catalog role of the catalog as it is now: a role of an earlier catalog of the
    same name (deleted since) is replaced, with every link to it."""
    tenant, catalog = params.tenant(request), params.catalog(request)
    body = await read_json(request, "create_role")
    name = check_system_name("catalog role", body["name"])
    properties = check_user_properties(body.get("properties", {}))
    policy = _policy(request, tenant)
    catalog_id = _catalog_id(request, tenant, catalog)
    if policy.catalog_role(catalog, name, catalog_id) is not None:
        raise AlreadyExists(f"catalog role already exists: {catalog}.{name}")
    key, props = catalog_role_record(catalog, name, catalog_id, properties)
    stale = policy.records.get(key.name)
    changes: list[Change] = [CreateEntity(key, props)]
    requirements: list[Requirement] = []
    if stale is not None:
        removed = tuple(k for k in stale.properties if k not in props)
        changes = [UpdateEntity(key, props, removed), *_catalog_role_links(policy, catalog, name)]
        requirements = [AssertVersion(key, stale.version)]
    outcome = await _commit(request, tenant, requirements, changes, "create catalog role")
    return web.json_response(_role_json(name, outcome.entities[key]), status=201)


def _catalog_role_links(policy: Policy, catalog: str, name: str) -> list[Change]:
    """Deletions of what links to catalog role ``name``: its grants, its role grants."""
    suffix = f":{catalog}:{name}"
    role_grants = [
        DeleteEntity(system_key(n))
        for n in policy.dependents(ROLE_GRANT)
        if n.endswith(suffix) and n.count(":") == 3
    ]
    return [*role_grants, *_deletions(policy, f"{GRANT}c:{catalog}:{name}:")]


@routes.get(CATALOG_ROLE_PATH)
async def get_catalog_role(request: web.Request) -> web.Response:
    tenant, catalog = params.tenant(request), params.catalog(request)
    role = _catalog_role(request, _policy(request, tenant), tenant, catalog)
    return web.json_response(_role_json(role.name, role.entity))


@routes.delete(CATALOG_ROLE_PATH)
async def delete_catalog_role(request: web.Request) -> web.Response:
    tenant, catalog = params.tenant(request), params.catalog(request)
    policy = _policy(request, tenant)
    role = _catalog_role(request, policy, tenant, catalog)
    changes = [DeleteEntity(role.entity.key), *_catalog_role_links(policy, catalog, role.name)]
    await _commit(
        request, tenant, _same(role.entity.key, role.entity), changes, "delete catalog role"
    )
    return web.Response(status=204)


def _catalog_grant(
    request: web.Request, policy: Policy, tenant: str, catalog: str, body: dict[str, Any]
) -> tuple[CatalogRole, Grant]:
    role = _catalog_role(request, policy, tenant, catalog)
    privilege = _privilege(body)
    if "securable" not in body:
        raise BadRequest("a catalog role's grant names its securable: {kind, path}")
    kind, path = securable_path(body["securable"], catalog)
    if not privilege.grantable_on(kind):
        raise BadRequest(f"{privilege.name} cannot be granted on a {kind.value}")
    return role, Grant(Grantee(role.name, catalog), privilege, kind, path)


@routes.get(CATALOG_ROLE_GRANTS)
async def list_catalog_role_grants(request: web.Request) -> web.Response:
    tenant, catalog = params.tenant(request), params.catalog(request)
    policy = _policy(request, tenant)
    role = _catalog_role(request, policy, tenant, catalog)
    grants = sorted(
        policy.grants.get(Grantee(role.name, catalog), ()),
        key=lambda g: (g.path, g.privilege.name),
    )
    return web.json_response({"grants": [_grant_json(g) for g in grants], "next-page-token": None})


@routes.post(CATALOG_ROLE_GRANTS)
async def grant_to_catalog_role(request: web.Request) -> web.Response:
    tenant, catalog = params.tenant(request), params.catalog(request)
    body = await read_json(request, "grant_privilege")
    policy = _policy(request, tenant)
    role, grant = _catalog_grant(request, policy, tenant, catalog, body)
    return await _grant(request, tenant, policy, grant, role.entity)


@routes.post(CATALOG_ROLE_GRANTS + "/revoke")
async def revoke_from_catalog_role(request: web.Request) -> web.Response:
    tenant, catalog = params.tenant(request), params.catalog(request)
    body = await read_json(request, "grant_privilege")
    policy = _policy(request, tenant)
    _, grant = _catalog_grant(request, policy, tenant, catalog, body)
    return await _revoke(request, tenant, policy, grant)
