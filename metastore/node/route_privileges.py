"""Which privilege every route needs, on what: one table, checked before any handler.

``RULES`` maps each route of both APIs (method, path template) to a rule; the
``authorize`` middleware (``metastore.node.middlewares``) finds the matched route's
rule and runs it before the handler, so a refused request is a 403 that has read and
written nothing. A route with no rule is refused for everyone but service admins (and
a test enumerates the app's routes against this table). A ``HEAD`` route aiohttp
adds to a ``GET`` one has the ``GET``'s rule.

Rules build their securables from the path (and for a few routes the body, parsed
and schema-checked here once; the handler reuses the parsed body, so a malformed
body is a 400 before any check). With authentication off nothing is checked: a
node without authentication trusts its network.

Privileges per operation follow Apache Polaris: a listing needs the kind's LIST
privilege on the parent to show everything (else it shows what the caller holds
something on); a load needs READ (an Iceberg table load hands out where its data
files are, so it needs ``TABLE_READ_DATA``); a commit that only sets or removes
properties needs ``TABLE_WRITE_PROPERTIES``, any other ``TABLE_WRITE_DATA``; a
rename needs DROP on the source and CREATE in the destination namespace; a purge
needs ``TABLE_WRITE_DATA`` besides ``TABLE_DROP``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from aiohttp import web

from metastore.errors import Forbidden
from metastore.http import params
from metastore.http.guards import (
    Anyone,
    Browse,
    ByKind,
    ChoosesStorage,
    FromBody,
    FromRequest,
    InTenant,
    Internal,
    Listed,
    Metrics,
    Need,
    On,
    Open,
    Requires,
    Rule,
    ServiceAdmin,
)
from metastore.iceberg.routes import (
    catalog_routes,
    credential_routes,
    sign_routes,
    table_routes,
    view_routes,
)
from metastore.iceberg.routes import metrics_routes as report_routes
from metastore.iceberg.routes.context import PREFIX, catalog_of, flag, identifier, warehouse_of
from metastore.iceberg.routes.unprefixed import unprefixed
from metastore.model.keys import EntityKey, Kind
from metastore.model.names import check_namespace, check_system_name
from metastore.native import admin_routes as admin
from metastore.native import checkpoint_routes as checkpoints
from metastore.native import entity_routes as entities
from metastore.native import event_routes as events
from metastore.native import gc_routes as gc
from metastore.native import grant_routes as grants
from metastore.native import principal_routes as principals
from metastore.native import report_routes as reports
from metastore.native import task_routes as tasks
from metastore.security.authorizer import Checker
from metastore.security.policy import EVERYTHING, Visibility
from metastore.security.privileges import Level, Privilege
from metastore.security.securables import Securable

P = Privilege


# --- the rule of a route ------------------------------------------------------------------


def rule_for(method: str, template: str) -> Rule | None:
    """The rule of the route ``(method, path template)``; None for a route with none
    (``metastore.node.middlewares.authorize`` lets only service admins through it)."""
    rule = RULES.get((method, template))
    if rule is None and method == "HEAD":  # aiohttp's HEAD twin of a GET route
        rule = RULES.get(("GET", template))
    return rule


# --- securables from the request ----------------------------------------------------------


def _tenant(request: web.Request) -> Securable:
    return Securable.of_tenant(params.tenant(request))


def _catalog(request: web.Request) -> Securable:
    return Securable.of_catalog(params.tenant(request), params.catalog(request))


def _namespace(request: web.Request) -> Securable:
    tenant, catalog = params.tenant(request), params.catalog(request)
    return Securable.of_namespace(tenant, catalog, params.namespace(request))


def _parent(request: web.Request) -> Securable:
    tenant, catalog = params.tenant(request), params.catalog(request)
    return Securable.of_namespace(tenant, catalog, params.parent(request))


def _entity(request: web.Request) -> Securable:
    tenant, catalog = params.tenant(request), params.catalog(request)
    return Securable.of_entity(tenant, catalog, params.entity_key(request))


def _native(request: web.Request, key: EntityKey) -> Securable:
    return Securable.of_entity(params.tenant(request), params.catalog(request), key)


def _native_parent(request: web.Request, key: EntityKey) -> Securable:
    """Where ``key`` is created: its namespace (the catalog for a top-level namespace)."""
    tenant, catalog = params.tenant(request), params.catalog(request)
    return Securable.of_namespace(tenant, catalog, key.namespace)


def _service(request: web.Request) -> Securable:
    return Securable.of_service()


def _native_table(request: web.Request) -> Securable:
    return _native(request, reports.table_key(request))


# the Iceberg API names its catalog in the prefix


def _ice(request: web.Request) -> tuple[str, str]:
    return catalog_of(request)  # the names alone: 403 before anything is looked up


def _ice_catalog(request: web.Request) -> Securable:
    return Securable.of_catalog(*_ice(request))


def _ice_namespace(request: web.Request) -> Securable:
    return Securable.of_namespace(*_ice(request), params.namespace(request))


def _ice_parent(request: web.Request) -> Securable:
    return Securable.of_namespace(*_ice(request), params.parent(request))


def _ice_key(request: web.Request, key: EntityKey) -> Securable:
    return Securable.of_entity(*_ice(request), key)


def _ice_named(kind: Kind, part: str) -> On:
    def on(request: web.Request) -> Securable:
        name = request.match_info[part]
        return _ice_key(request, EntityKey(kind, params.namespace(request), name))

    return on


def _config_catalog(request: web.Request) -> Securable:
    return Securable.of_catalog(*warehouse_of(request))


# --- body-dependent needs -----------------------------------------------------------------

_READ = {Kind.NAMESPACE: P.NAMESPACE_READ_PROPERTIES, Kind.TABLE: P.TABLE_READ_PROPERTIES}
_READ |= {Kind.VIEW: P.VIEW_READ}
_CREATE = {Kind.NAMESPACE: P.NAMESPACE_CREATE, Kind.TABLE: P.TABLE_CREATE, Kind.VIEW: P.VIEW_CREATE}
_UPDATE = {Kind.NAMESPACE: P.NAMESPACE_WRITE_PROPERTIES, Kind.TABLE: P.TABLE_WRITE_PROPERTIES}
_UPDATE |= {Kind.VIEW: P.VIEW_WRITE}
_DROP = {Kind.NAMESPACE: P.NAMESPACE_DROP, Kind.TABLE: P.TABLE_DROP, Kind.VIEW: P.VIEW_DROP}
_PROPERTY_UPDATES = frozenset({"set-properties", "remove-properties"})


def _create_namespace(request: web.Request, body: dict[str, Any]) -> Iterator[Need]:
    key = EntityKey.namespace_key(check_namespace(body["namespace"]))
    yield P.NAMESPACE_CREATE, _native_parent(request, key)


def _rename(request: web.Request, body: dict[str, Any]) -> Iterator[Need]:
    source = params.key_from_json(body["source"])
    destination = params.key_from_json(body["destination"])
    yield _DROP[source.kind], _native(request, source)
    yield _CREATE[destination.kind], _native_parent(request, destination)


def _commit(request: web.Request, body: dict[str, Any]) -> Iterator[Need]:
    """Each change's privilege on its entity; reading each asserted entity."""
    for item in body.get("requirements", []):
        if item["type"] == "assert-empty":
            levels = check_namespace(item["namespace"], allow_empty=True)
            yield P.NAMESPACE_LIST, _native_parent(request, EntityKey(Kind.TABLE, levels, "_"))
        else:
            key = params.key_from_json(item["entity"])
            yield _READ[key.kind], _native(request, key)
    for item in body["changes"]:
        key = params.key_from_json(item["entity"])
        action = item["action"]
        if action == "create":
            yield _CREATE[key.kind], _native_parent(request, key)
        elif action == "update":
            yield _UPDATE[key.kind], _native(request, key)
        elif action == "delete":
            yield _DROP[key.kind], _native(request, key)
            if key.kind is Kind.TABLE:
                # a delete keeps no dropped record and purges nothing: the table's files
                # stay where its location was, free for any new table of the catalog to
                # take (and be vended credentials for), so only one who may read them
                # may leave them so
                yield P.TABLE_READ_DATA, _native(request, key)
        else:
            destination = params.key_from_json(item["to"])
            yield _DROP[key.kind], _native(request, key)
            yield _CREATE[destination.kind], _native_parent(request, destination)


def _grant_catalog_role(request: web.Request, body: dict[str, Any]) -> Iterator[Need]:
    catalog = check_system_name("catalog", body["catalog"])
    yield P.CATALOG_MANAGE_ACCESS, Securable.of_catalog(params.tenant(request), catalog)


def _ice_create_namespace(request: web.Request, body: dict[str, Any]) -> Iterator[Need]:
    levels = check_namespace(body["namespace"])
    yield P.NAMESPACE_CREATE, Securable.of_namespace(*_ice(request), levels[:-1])


def _ice_rename(kind: Kind) -> Callable[[web.Request, dict[str, Any]], Iterator[Need]]:
    def needs(request: web.Request, body: dict[str, Any]) -> Iterator[Need]:
        source, destination = (
            identifier(body["source"], kind),
            identifier(body["destination"], kind),
        )
        yield _DROP[kind], _ice_key(request, source)
        yield _CREATE[kind], Securable.of_namespace(*_ice(request), destination.namespace)

    return needs


def _table_write(updates: Any) -> Privilege:
    """Changing only properties needs TABLE_WRITE_PROPERTIES; anything else WRITE_DATA."""
    actions = {u.get("action") if isinstance(u, dict) else None for u in updates or ()}
    return P.TABLE_WRITE_PROPERTIES if actions <= _PROPERTY_UPDATES else P.TABLE_WRITE_DATA


def _creates(change: dict[str, Any]) -> bool:
    """A table change asserting that its table does not exist yet makes it: the end of a
    staged create, or a create sent as a commit."""
    requirements = change.get("requirements") or ()
    return any(isinstance(r, dict) and r.get("type") == "assert-create" for r in requirements)


def _ice_change(request: web.Request, key: EntityKey, change: dict[str, Any]) -> Iterator[Need]:
    """A table change writes its table; one that makes it also creates in its namespace,
    as a create does (writing a table one may write but not create is no create right)."""
    if _creates(change):
        yield P.TABLE_CREATE, Securable.of_namespace(*_ice(request), key.namespace)
    yield _table_write(change.get("updates")), _ice_key(request, key)


def _ice_commit_table(request: web.Request, body: dict[str, Any]) -> Iterator[Need]:
    name = request.match_info["table"]
    yield from _ice_change(request, EntityKey(Kind.TABLE, params.namespace(request), name), body)


def _ice_transaction(request: web.Request, body: dict[str, Any]) -> Iterator[Need]:
    for change in body["table-changes"]:
        yield from _ice_change(request, identifier(change.get("identifier"), Kind.TABLE), change)


def _ice_register(request: web.Request, body: dict[str, Any]) -> Iterator[Need]:
    namespace = _ice_namespace(request)
    yield P.TABLE_CREATE, namespace
    if body.get("overwrite"):
        name = body["name"]
        yield (
            P.TABLE_DROP,
            _ice_key(request, EntityKey(Kind.TABLE, params.namespace(request), name)),
        )


def _ice_sign(request: web.Request, body: dict[str, Any]) -> Iterator[Need]:
    """Signing a read of the table's files needs what reading them needs; any other
    request (a write, a delete) what writing them needs (``sign_routes``)."""
    reads = body["method"] in sign_routes.READS
    yield (
        P.TABLE_READ_DATA if reads else P.TABLE_WRITE_DATA,
        _ice_named(Kind.TABLE, "table")(request),
    )


def _ice_drop_table(request: web.Request, checker: Checker) -> Iterator[Need]:
    table = _ice_named(Kind.TABLE, "table")(request)
    yield P.TABLE_DROP, table
    if flag(request, "purgeRequested"):
        yield P.TABLE_WRITE_DATA, table


def _own_principal(privilege: Privilege) -> Callable[[web.Request, Checker], Iterator[Need]]:
    """A principal may read (or rotate) its own record; others need ``privilege``."""

    def needs(request: web.Request, checker: Checker) -> Iterator[Need]:
        tenant = params.tenant(request)
        name = request.match_info["principal"]
        me = checker.principal
        if not (me.tenant == tenant and me.name == name and me.kind in ("service", "user")):
            yield privilege, Securable.of_tenant(tenant)

    return needs


def _principal_role(request: web.Request, checker: Checker) -> Iterator[Need]:
    """A principal role's holders may read it; others need PRINCIPAL_ROLE_READ_PROPERTIES."""
    tenant, role = params.tenant(request), request.match_info["role"]
    me = checker.principal
    if me.tenant == tenant and not checker.service_admin:
        held = checker.authorizer.policies.get(tenant).roles_of(me)
        if role in held:
            return
    yield P.PRINCIPAL_ROLE_READ_PROPERTIES, Securable.of_tenant(tenant)


# --- listings whose visibility is their own -----------------------------------------------


def _tenants(request: web.Request, checker: Checker) -> Visibility:
    if checker.service_admin:
        return EVERYTHING
    mine = checker.principal.tenant
    return Visibility(False, {mine: None} if checker.member_of(mine) else {})


Visible = Callable[[web.Request, Checker], Visibility]


def _own_or_all(privilege: Privilege, own: Callable[[Checker], Iterable[str]]) -> Visible:
    def visibility(request: web.Request, checker: Checker) -> Visibility:
        tenant = Securable.of_tenant(params.tenant(request))
        if checker.allows(privilege, tenant):
            return EVERYTHING
        if tenant.tenant != checker.principal.tenant:
            raise Forbidden(f"principal {checker.principal.id!r} belongs to another tenant")
        return Visibility(False, dict.fromkeys(own(checker)))

    return visibility


def _self(checker: Checker) -> Iterable[str]:
    return (checker.principal.name,)


def _held_roles(checker: Checker) -> Iterable[str]:
    me = checker.principal
    return checker.authorizer.policies.get(me.tenant).roles_of(me)


# --- the table ----------------------------------------------------------------------------

OPEN, ANYONE = Open(), Anyone()
CATALOG, NAMESPACE = admin.CATALOG, entities.NAMESPACE
ICE_NAMESPACES, ICE_NAMESPACE = catalog_routes.NAMESPACES, catalog_routes.NAMESPACE
TABLES, TABLE = table_routes.TABLES, table_routes.TABLE
VIEWS, VIEW = view_routes.VIEWS, view_routes.VIEW

_TABLE: dict[tuple[str, str], Rule] = {
    # operations and tokens
    ("GET", "/health"): OPEN,
    ("GET", "/metrics"): Metrics(),
    # the API's descriptions: no data, read like /v1/config (any authenticated caller)
    ("GET", "/api/v1/openapi.json"): ANYONE,
    ("GET", "/v1/openapi.yaml"): ANYONE,
    ("POST", "/v1/oauth/tokens"): OPEN,
    ("GET", "/api/v1/whoami"): ANYONE,
    # the web console's static pages (it reads data through the APIs, as its user)
    ("GET", "/"): OPEN,
    ("GET", "/console/{asset}"): OPEN,
    ("GET", "/api/v1/admin/cluster"): ServiceAdmin(),
    ("POST", principals.TOKEN_KEYS + "/rotate"): ServiceAdmin(),
    # checkpoints of the node's database for the data pipeline
    ("POST", checkpoints.CHECKPOINTS): ServiceAdmin(),
    ("GET", checkpoints.CHECKPOINTS): ServiceAdmin(),
    ("DELETE", checkpoints.CHECKPOINT): ServiceAdmin(),
    # garbage collection and the batch jobs' task records: service admins only
    ("POST", gc.SWEEP): ServiceAdmin(),
    ("POST", gc.EXPIRE): ServiceAdmin(),
    ("POST", gc.LEASES): ServiceAdmin(),
    ("GET", tasks.TASKS): ServiceAdmin(),
    ("POST", tasks.TASKS): ServiceAdmin(),
    ("PUT", "/api/v1/admin/tasks/{job}/{scope}"): ServiceAdmin(),
    ("DELETE", "/api/v1/admin/tasks/{job}/{scope}"): ServiceAdmin(),
    ("POST", "/internal/v1/updateables"): Internal(),
    ("GET", "/internal/v1/view"): Internal(),
    # tenants
    ("GET", admin.TENANTS): Listed(_tenants),
    ("POST", admin.TENANTS): Requires(P.TENANT_CREATE, _service),
    ("GET", admin.TENANT): Requires(P.TENANT_READ_PROPERTIES, _tenant),
    ("DELETE", admin.TENANT): Requires(P.TENANT_DROP, _tenant),
    ("POST", admin.TENANT + "/properties"): Requires(P.TENANT_WRITE_PROPERTIES, _tenant),
    ("GET", principals.TENANT_COMMITS): Requires(P.TENANT_READ_HISTORY, _tenant),
    # principals
    ("GET", principals.PRINCIPALS): Listed(_own_or_all(P.PRINCIPAL_LIST, _self)),
    ("POST", principals.PRINCIPALS): Requires(P.PRINCIPAL_CREATE, _tenant),
    ("GET", principals.PRINCIPAL): FromRequest(_own_principal(P.PRINCIPAL_READ_PROPERTIES)),
    ("POST", principals.PRINCIPAL + "/rotate"): FromRequest(
        _own_principal(P.PRINCIPAL_ROTATE_CREDENTIALS)
    ),
    ("POST", principals.PRINCIPAL + "/disable"): Requires(P.PRINCIPAL_WRITE_PROPERTIES, _tenant),
    ("POST", principals.PRINCIPAL + "/enable"): Requires(P.PRINCIPAL_WRITE_PROPERTIES, _tenant),
    ("DELETE", principals.PRINCIPAL): Requires(P.PRINCIPAL_DROP, _tenant),
    # principal roles and what they hold
    ("GET", grants.PRINCIPAL_ROLES): Listed(_own_or_all(P.PRINCIPAL_ROLE_LIST, _held_roles)),
    ("POST", grants.PRINCIPAL_ROLES): Requires(P.PRINCIPAL_ROLE_CREATE, _tenant),
    ("GET", grants.PRINCIPAL_ROLE): FromRequest(_principal_role),
    ("DELETE", grants.PRINCIPAL_ROLE): Requires(P.PRINCIPAL_ROLE_DROP, _tenant),
    ("GET", grants.MEMBERS): Requires(P.PRINCIPAL_ROLE_READ_PROPERTIES, _tenant),
    ("POST", grants.MEMBERS): Requires(P.TENANT_MANAGE_ACCESS, _tenant),
    ("DELETE", grants.MEMBER_PATH): Requires(P.TENANT_MANAGE_ACCESS, _tenant),
    ("GET", grants.ROLE_GRANTS): Requires(P.PRINCIPAL_ROLE_READ_PROPERTIES, _tenant),
    ("POST", grants.ROLE_GRANTS): Requires(P.TENANT_MANAGE_ACCESS, _tenant),
    ("POST", grants.ROLE_GRANTS + "/revoke"): Requires(P.TENANT_MANAGE_ACCESS, _tenant),
    ("GET", grants.ROLE_CATALOG_ROLES): Requires(P.PRINCIPAL_ROLE_READ_PROPERTIES, _tenant),
    ("POST", grants.ROLE_CATALOG_ROLES): FromBody("grant_catalog_role", _grant_catalog_role),
    ("DELETE", grants.ROLE_CATALOG_ROLE): Requires(P.CATALOG_MANAGE_ACCESS, _catalog),
    # catalogs
    ("GET", admin.CATALOGS): Browse(Level.CATALOG, _tenant),
    ("POST", admin.CATALOGS): ChoosesStorage(P.CATALOG_CREATE, _tenant, "create_catalog"),
    ("GET", CATALOG): Requires(P.CATALOG_READ_PROPERTIES, _catalog),
    ("DELETE", CATALOG): Requires(P.CATALOG_DROP, _catalog),
    ("POST", CATALOG + "/properties"): Requires(P.CATALOG_WRITE_PROPERTIES, _catalog),
    ("POST", CATALOG + "/storage"): ChoosesStorage(P.CATALOG_WRITE_PROPERTIES, _catalog),
    ("GET", CATALOG + "/ref"): Requires(P.CATALOG_READ_HISTORY, _catalog),
    ("POST", CATALOG + "/ref/reset"): Requires(P.CATALOG_RESET_REF, _catalog),
    ("GET", CATALOG + "/commits"): Requires(P.CATALOG_READ_HISTORY, _catalog),
    ("GET", CATALOG + "/commits/{commit_id}"): Requires(P.CATALOG_READ_HISTORY, _catalog),
    # the change feed: a caller that sees something in the catalog; events filtered per entity
    ("GET", events.EVENTS): Browse(Level.NAMESPACE, _catalog),
    ("GET", CATALOG + "/commits/{commit_id}/diff"): Requires(P.CATALOG_READ_HISTORY, _catalog),
    # catalog roles
    ("GET", grants.CATALOG_ROLES): Requires(P.CATALOG_MANAGE_ACCESS, _catalog),
    ("POST", grants.CATALOG_ROLES): Requires(P.CATALOG_MANAGE_ACCESS, _catalog),
    ("GET", grants.CATALOG_ROLE_PATH): Requires(P.CATALOG_MANAGE_ACCESS, _catalog),
    ("DELETE", grants.CATALOG_ROLE_PATH): Requires(P.CATALOG_MANAGE_ACCESS, _catalog),
    ("GET", grants.CATALOG_ROLE_GRANTS): Requires(P.CATALOG_MANAGE_ACCESS, _catalog),
    ("POST", grants.CATALOG_ROLE_GRANTS): Requires(P.CATALOG_MANAGE_ACCESS, _catalog),
    ("POST", grants.CATALOG_ROLE_GRANTS + "/revoke"): Requires(P.CATALOG_MANAGE_ACCESS, _catalog),
    # native namespaces, tables, views
    ("GET", entities.NAMESPACES): Browse(Level.NAMESPACE, _parent),
    ("POST", entities.NAMESPACES): FromBody("create_namespace", _create_namespace),
    ("GET", NAMESPACE): Requires(P.NAMESPACE_READ_PROPERTIES, _namespace),
    ("POST", NAMESPACE + "/properties"): Requires(P.NAMESPACE_WRITE_PROPERTIES, _namespace),
    ("DELETE", NAMESPACE): Requires(P.NAMESPACE_DROP, _namespace),
    ("GET", entities.COLLECTION): Browse(None, _namespace),
    ("POST", entities.COLLECTION): ByKind(P.TABLE_CREATE, P.VIEW_CREATE, _namespace),
    ("GET", entities.ENTITY): ByKind(P.TABLE_READ_PROPERTIES, P.VIEW_READ, _entity),
    ("POST", entities.ENTITY): ByKind(P.TABLE_WRITE_PROPERTIES, P.VIEW_WRITE, _entity),
    ("DELETE", entities.ENTITY): ByKind(P.TABLE_DROP, P.VIEW_DROP, _entity),
    # an undrop creates the name again in its namespace
    ("POST", entities.UNDROP): ByKind(P.TABLE_CREATE, P.VIEW_CREATE, _namespace),
    ("POST", CATALOG + "/rename"): FromBody("rename", _rename),
    ("POST", CATALOG + "/commit"): FromBody("commit", _commit),
    # the metrics reports engines sent about a table tell what its readers asked for
    ("GET", reports.REPORTS): Requires(P.TABLE_READ_DATA, _native_table),
    # Iceberg REST
    ("GET", "/v1/config"): InTenant(_config_catalog),
    ("GET", ICE_NAMESPACES): Browse(Level.NAMESPACE, _ice_parent),
    ("POST", ICE_NAMESPACES): FromBody("iceberg_create_namespace", _ice_create_namespace),
    ("GET", ICE_NAMESPACE): Requires(P.NAMESPACE_READ_PROPERTIES, _ice_namespace),
    ("HEAD", ICE_NAMESPACE): Requires(P.NAMESPACE_READ_PROPERTIES, _ice_namespace),
    ("DELETE", ICE_NAMESPACE): Requires(P.NAMESPACE_DROP, _ice_namespace),
    ("POST", ICE_NAMESPACE + "/properties"): Requires(P.NAMESPACE_WRITE_PROPERTIES, _ice_namespace),
    ("GET", TABLES): Browse(Level.TABLE, _ice_namespace),
    ("POST", TABLES): Requires(P.TABLE_CREATE, _ice_namespace),
    ("POST", PREFIX + "/namespaces/{namespace}/register"): FromBody(
        "iceberg_register_table", _ice_register
    ),
    ("GET", TABLE): Requires(P.TABLE_READ_DATA, _ice_named(Kind.TABLE, "table")),
    # vended credentials reach the table's files: as loading it does (write: its data's writers)
    ("GET", credential_routes.CREDENTIALS): Requires(
        P.TABLE_READ_DATA, _ice_named(Kind.TABLE, "table")
    ),
    ("HEAD", TABLE): Requires(P.TABLE_LIST, _ice_named(Kind.TABLE, "table")),
    ("POST", TABLE): FromBody("iceberg_commit_table", _ice_commit_table),
    ("DELETE", TABLE): FromRequest(_ice_drop_table),
    ("POST", sign_routes.SIGN): FromBody(sign_routes.SCHEMA, _ice_sign),
    ("POST", PREFIX + "/tables/rename"): FromBody("iceberg_rename", _ice_rename(Kind.TABLE)),
    ("POST", PREFIX + "/transactions/commit"): FromBody("iceberg_transaction", _ice_transaction),
    ("GET", VIEWS): Browse(Level.VIEW, _ice_namespace),
    ("POST", VIEWS): Requires(P.VIEW_CREATE, _ice_namespace),
    ("GET", VIEW): Requires(P.VIEW_READ, _ice_named(Kind.VIEW, "view")),
    ("HEAD", VIEW): Requires(P.VIEW_LIST, _ice_named(Kind.VIEW, "view")),
    ("POST", VIEW): Requires(P.VIEW_WRITE, _ice_named(Kind.VIEW, "view")),
    ("DELETE", VIEW): Requires(P.VIEW_DROP, _ice_named(Kind.VIEW, "view")),
    ("POST", PREFIX + "/views/rename"): FromBody("iceberg_rename", _ice_rename(Kind.VIEW)),
    ("POST", report_routes.METRICS): Requires(P.TABLE_READ_DATA, _ice_named(Kind.TABLE, "table")),
}


def canonical(template: str) -> str:
    """A path template as aiohttp reports a matched route's: ``{kind:tables|views}`` ->
    ``{kind}``."""
    return re.sub(r"\{(\w+):[^}]*\}", r"{\1}", template)


def _with_unprefixed(rules: Mapping[tuple[str, str], Rule]) -> dict[tuple[str, str], Rule]:
    """Every Iceberg route's twin without a prefix (``metastore.iceberg.routes.unprefixed``)
    has its route's rule: the securables come from ``catalog_of``, which names the
    caller's default catalog there."""
    twins = {}
    for (method, template), rule in rules.items():
        twin = unprefixed(template)
        if twin is not None:
            twins[(method, twin)] = rule
    return {**rules, **twins}


RULES: Mapping[tuple[str, str], Rule] = _with_unprefixed(
    {(method, canonical(template)): rule for (method, template), rule in _TABLE.items()}
)
