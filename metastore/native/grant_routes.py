"""Native API: principal roles, catalog roles and grants (the tenant's access policy).

Principal roles are held by principals; catalog roles belong to one catalog, hold
privileges on it and on what it holds, and are granted to principal roles;
principal roles may also hold privileges on the tenant itself. Everything is a
record of the tenant's system catalog (``metastore.security.grants``) written by a
commit, so every grant and revoke is in the tenant's history
(``GET /api/v1/tenants/{t}/commits``) and applies on every node from the moment the
commit reaches it. Reads answer from the node's policy snapshot, the same one the
checks use. Which caller may call each route is ``metastore.node.route_privileges``'s; the one
rule enforced here is that only tenant admins (and service admins) hand out the
built-in ``tenant_admin`` role.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from metastore.engine.commits import CommitOutcome
from metastore.errors import (
    AlreadyExists,
    BadRequest,
    Forbidden,
    NoSuchCatalog,
    NoSuchGrant,
    NoSuchRole,
    NotFound,
)
from metastore.http import params
from metastore.http.authz import checker, visible
from metastore.http.caller import principal_of
from metastore.http.idempotency import Idempotency
from metastore.http.typedefs import AUTHORIZER, METASTORE
from metastore.http.validation import read_json
from metastore.model.keys import SYSTEM_CATALOG
from metastore.model.names import check_system_name
from metastore.model.records import Entity
from metastore.native.admin_routes import CATALOG, TENANT
from metastore.security import policy_changes as changes
from metastore.security.grants import (
    PRINCIPAL,
    TENANT_ADMIN,
    Grant,
    Grantee,
    catalog_role_key,
    check_user_properties,
    principal_role_key,
    securable_json,
    securable_path,
    system_key,
    user_properties,
)
from metastore.security.policy import CatalogRole, Policy
from metastore.security.policy_changes import PolicyChange
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


async def _policy(request: web.Request, tenant: str) -> Policy:
    """The tenant's policy (404 for an unknown tenant), read from the store: a thread."""
    return await request.app[METASTORE].read(_read_policy, request, tenant)


def _read_policy(request: web.Request, tenant: str) -> Policy:
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


async def _catalog_role(
    request: web.Request, policy: Policy, tenant: str, catalog: str
) -> CatalogRole:
    catalog_id = await _catalog_id(request, tenant, catalog)
    name = _role_name(request)
    role = policy.catalog_role(catalog, name, catalog_id)
    if role is None:
        raise NoSuchRole(f"catalog role does not exist: {catalog}.{name}")
    return role


async def _catalog_id(request: web.Request, tenant: str, catalog: str) -> int:
    """The catalog's record id (404 for no such catalog), a point read."""
    found = await request.app[METASTORE].read_point(
        request.app[AUTHORIZER].catalog_id, tenant, catalog
    )
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


async def _commit(request: web.Request, tenant: str, change: PolicyChange) -> CommitOutcome:
    """One commit to the tenant's system catalog; a retried ``Idempotency-Key`` gets the
    first outcome."""
    metastore, principal = request.app[METASTORE], principal_of(request)
    return await Idempotency.of(request, metastore, tenant, SYSTEM_CATALOG).run(
        lambda record: change.commit(metastore, tenant, principal, record),
        lambda first: first,
    )


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
    policy = await _policy(request, tenant)
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
    metastore = request.app[METASTORE]
    await metastore.read_point(metastore.check_tenant, tenant)  # 404 for an unknown tenant
    outcome = await _commit(request, tenant, changes.create_principal_role(name, properties))
    return web.json_response(
        _role_json(name, outcome.entities[principal_role_key(name)]), status=201
    )


@routes.get(PRINCIPAL_ROLE)
async def get_principal_role(request: web.Request) -> web.Response:
    tenant, role = params.tenant(request), _role_name(request)
    entity = _principal_role(await _policy(request, tenant), role)
    return web.json_response(_role_json(role, entity))


@routes.delete(PRINCIPAL_ROLE)
async def delete_principal_role(request: web.Request) -> web.Response:
    """The role and every link to it: memberships, catalog roles granted, grants."""
    tenant, role = params.tenant(request), _role_name(request)
    policy = await _policy(request, tenant)
    entity = _principal_role(policy, role)
    if entity is None:
        raise BadRequest(f"{TENANT_ADMIN} is built in; it cannot be deleted")
    await _commit(request, tenant, changes.delete_principal_role(policy, role, entity))
    return web.Response(status=204)


# --- principals holding a principal role ---------------------------------------------------


@routes.get(MEMBERS)
async def list_members(request: web.Request) -> web.Response:
    tenant, role = params.tenant(request), _role_name(request)
    policy = await _policy(request, tenant)
    _principal_role(policy, role)
    return web.json_response({"principals": policy.members_of(role), "next-page-token": None})


@routes.post(MEMBERS)
async def add_member(request: web.Request) -> web.Response:
    tenant, role = params.tenant(request), _role_name(request)
    body = await read_json(request, "assign_role")
    name = check_system_name("principal", body["principal"])
    policy = await _policy(request, tenant)
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
    change = changes.add_member(policy, role, entity, name, principal)
    result = {"principal-role": role, "principal": name}
    if change is None:
        return web.json_response(result)
    await _commit(request, tenant, change)
    return web.json_response(result, status=201)


@routes.delete(MEMBER_PATH)
async def remove_member(request: web.Request) -> web.Response:
    tenant, role = params.tenant(request), _role_name(request)
    name = check_system_name("principal", request.match_info["principal"])
    policy = await _policy(request, tenant)
    entity = _principal_role(policy, role)
    if entity is None:
        caller = checker(request)
        if caller is not None and not (caller.service_admin or caller.access.admin):
            raise Forbidden(f"only tenant admins may take the {TENANT_ADMIN} role away")
    if changes.member_key(role, name).name not in policy.records:
        raise NoSuchRole(f"principal {name} does not hold the principal role {role}")
    await _commit(request, tenant, changes.remove_member(role, name))
    return web.Response(status=204)


# --- catalog roles granted to a principal role ----------------------------------------------


@routes.get(ROLE_CATALOG_ROLES)
async def list_role_catalog_roles(request: web.Request) -> web.Response:
    tenant, role = params.tenant(request), _role_name(request)
    policy = await _policy(request, tenant)
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
    policy = await _policy(request, tenant)
    entity = _principal_role(policy, role)
    if entity is None:
        raise BadRequest(f"{TENANT_ADMIN} holds every privilege of its tenant already")
    target = policy.catalog_role(catalog, name, await _catalog_id(request, tenant, catalog))
    if target is None:
        raise NoSuchRole(f"catalog role does not exist: {catalog}.{name}")
    change = changes.grant_catalog_role(policy, role, entity, target)
    result = {"catalog": catalog, "name": name}
    if change is None:
        return web.json_response(result)
    await _commit(request, tenant, change)
    return web.json_response(result, status=201)


@routes.delete(ROLE_CATALOG_ROLE)
async def revoke_catalog_role(request: web.Request) -> web.Response:
    tenant, role = params.tenant(request), _role_name(request)
    catalog = params.catalog(request)
    name = _role_name(request, "catalog_role")
    policy = await _policy(request, tenant)
    if changes.role_grant_key(role, catalog, name).name not in policy.records:
        raise NoSuchGrant(f"catalog role {catalog}.{name} is not granted to {role}")
    await _commit(request, tenant, changes.revoke_catalog_role(role, catalog, name))
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
    policy = await _policy(request, tenant)
    _principal_role(policy, role)
    grants = sorted(policy.grants.get(Grantee(role), ()), key=lambda g: g.privilege.name)
    return web.json_response({"grants": [_grant_json(g) for g in grants], "next-page-token": None})


@routes.post(ROLE_GRANTS)
async def grant_to_principal_role(request: web.Request) -> web.Response:
    tenant = params.tenant(request)
    body = await read_json(request, "grant_privilege")
    policy = await _policy(request, tenant)
    grant = _tenant_grant(request, policy, body)
    entity = policy.principal_roles[grant.grantee.role]
    return await _grant(request, tenant, policy, grant, entity)


@routes.post(ROLE_GRANTS + "/revoke")
async def revoke_from_principal_role(request: web.Request) -> web.Response:
    tenant = params.tenant(request)
    body = await read_json(request, "grant_privilege")
    policy = await _policy(request, tenant)
    return await _revoke(request, tenant, policy, _tenant_grant(request, policy, body))


async def _grant(
    request: web.Request, tenant: str, policy: Policy, grant: Grant, grantee: Entity
) -> web.Response:
    change = changes.grant(policy, grant, grantee)
    if change is None:
        return web.json_response(_grant_json(grant))
    await _commit(request, tenant, change)
    return web.json_response(_grant_json(grant), status=201)


async def _revoke(request: web.Request, tenant: str, policy: Policy, grant: Grant) -> web.Response:
    if grant.key.name not in policy.records:
        raise NoSuchGrant(f"no such grant: {grant.privilege.name} to {grant.grantee.role}")
    await _commit(request, tenant, changes.revoke(grant))
    return web.Response(status=204)


# --- catalog roles ---------------------------------------------------------------------------


@routes.get(CATALOG_ROLES)
async def list_catalog_roles(request: web.Request) -> web.Response:
    tenant, catalog = params.tenant(request), params.catalog(request)
    policy = await _policy(request, tenant)
    roles = policy.catalog_roles_of(catalog, await _catalog_id(request, tenant, catalog))
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
    policy = await _policy(request, tenant)
    catalog_id = await _catalog_id(request, tenant, catalog)
    if policy.catalog_role(catalog, name, catalog_id) is not None:
        raise AlreadyExists(f"catalog role already exists: {catalog}.{name}")
    change = changes.create_catalog_role(policy, catalog, name, catalog_id, properties)
    outcome = await _commit(request, tenant, change)
    entity = outcome.entities[catalog_role_key(catalog, name)]
    return web.json_response(_role_json(name, entity), status=201)


@routes.get(CATALOG_ROLE_PATH)
async def get_catalog_role(request: web.Request) -> web.Response:
    tenant, catalog = params.tenant(request), params.catalog(request)
    role = await _catalog_role(request, await _policy(request, tenant), tenant, catalog)
    return web.json_response(_role_json(role.name, role.entity))


@routes.delete(CATALOG_ROLE_PATH)
async def delete_catalog_role(request: web.Request) -> web.Response:
    tenant, catalog = params.tenant(request), params.catalog(request)
    policy = await _policy(request, tenant)
    role = await _catalog_role(request, policy, tenant, catalog)
    await _commit(request, tenant, changes.delete_catalog_role(policy, role))
    return web.Response(status=204)


async def _catalog_grant(
    request: web.Request, policy: Policy, tenant: str, catalog: str, body: dict[str, Any]
) -> tuple[CatalogRole, Grant]:
    role = await _catalog_role(request, policy, tenant, catalog)
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
    policy = await _policy(request, tenant)
    role = await _catalog_role(request, policy, tenant, catalog)
    grants = sorted(
        policy.grants.get(Grantee(role.name, catalog), ()),
        key=lambda g: (g.path, g.privilege.name),
    )
    return web.json_response({"grants": [_grant_json(g) for g in grants], "next-page-token": None})


@routes.post(CATALOG_ROLE_GRANTS)
async def grant_to_catalog_role(request: web.Request) -> web.Response:
    tenant, catalog = params.tenant(request), params.catalog(request)
    body = await read_json(request, "grant_privilege")
    policy = await _policy(request, tenant)
    role, grant = await _catalog_grant(request, policy, tenant, catalog, body)
    return await _grant(request, tenant, policy, grant, role.entity)


@routes.post(CATALOG_ROLE_GRANTS + "/revoke")
async def revoke_from_catalog_role(request: web.Request) -> web.Response:
    tenant, catalog = params.tenant(request), params.catalog(request)
    body = await read_json(request, "grant_privilege")
    policy = await _policy(request, tenant)
    _, grant = await _catalog_grant(request, policy, tenant, catalog, body)
    return await _revoke(request, tenant, policy, grant)
