"""Every route of both APIs x every kind of caller, each cell asserted.

The callers: no token, a principal without grants, one with the read grant, one with
the write grant, the catalog's admin, another tenant's admin, and a disabled
principal (its token was issued before it was disabled). Each row of ``ROWS`` says
how to call one route (setting up, as a service admin, whatever the call acts on, so
an allowed call succeeds) and which status each caller gets. A refused call must
also leave everything as it was: the catalog's HEAD, the tenants' own histories
(principals, roles, grants), the tenants and catalogs that exist.

``test_every_route_has_a_row`` enumerates the application's routes, so a route
added without a row here fails the suite. aiohttp's ``HEAD`` twin of a ``GET`` route
is called too, expecting what the ``GET`` gets.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from harness.node import NodeProcess
from metastore.config.server_config import ServerConfig
from metastore.iceberg.routes.unprefixed import unprefixed
from metastore.node.app import create_app
from metastore.node.route_privileges import RULES
from tests.native.access_support import (
    ROOT,
    SECRET,
    Admin,
    Caller,
    login,
    secured_env,
    seg,
    tenant_path,
)
from tests.native.support import TIMEOUT, Api, Reply, unique

T, C = "default", "default"  # the tenant and catalog under test (the Iceberg API's default)
CAT = f"{tenant_path(T)}/catalogs/{C}"
ICE = f"/v1/{C}"
NS = "ns"
PERSONAS = ("none", "nogrants", "read", "write", "cadmin", "other", "disabled")
SCHEMA_JSON = json.loads(Schema(NestedField(1, "id", LongType(), required=False)).model_dump_json())
READ = [
    ("NAMESPACE_READ_PROPERTIES", "catalog", []),
    ("TABLE_READ_DATA", "catalog", []),
    ("VIEW_READ", "catalog", []),
]
WRITE = [
    ("NAMESPACE_CREATE", "catalog", []),
    ("NAMESPACE_WRITE_PROPERTIES", "catalog", []),
    ("TABLE_CREATE", "catalog", []),
    ("TABLE_WRITE_DATA", "catalog", []),
    ("VIEW_CREATE", "catalog", []),
    ("VIEW_WRITE", "catalog", []),
]
CATALOG_ADMIN = [
    ("CATALOG_MANAGE_CONTENT", "catalog", []),
    ("CATALOG_MANAGE_ACCESS", "catalog", []),
    ("CATALOG_DROP", "catalog", []),
    ("CATALOG_RESET_REF", "catalog", []),
]
GRANT_SETS = {"readers": READ, "writers": WRITE, "cadmins": CATALOG_ADMIN}
VIEW = {
    "schema": SCHEMA_JSON,
    "view-version": {
        "version-id": 1,
        "timestamp-ms": 1,
        "schema-id": 0,
        "summary": {},
        "representations": [{"type": "sql", "sql": "select 1", "dialect": "spark"}],
        "default-namespace": [NS],
    },
    "properties": {},
}


@dataclass
class Request:
    method: str
    path: str
    body: Any = None
    params: Mapping[str, str] | None = None
    form: Mapping[str, str] | None = None


@dataclass
class World:
    """What every row acts on, and how to call as each persona."""

    api: Api
    admin: Admin
    other_tenant: str
    callers: dict[str, Caller] = field(default_factory=dict)
    counter: Iterator[int] = field(default_factory=itertools.count)

    def fresh(self, prefix: str) -> str:
        return f"{prefix}{next(self.counter)}"

    async def grant_sets(self, catalog: str) -> None:
        """The read, write and catalog-admin grants on ``catalog``."""
        for role, grants in GRANT_SETS.items():
            await self.admin.catalog_role(T, catalog, role, grants, role)

    async def ok(self, method: str, path: str, body: Any = None, status: int = 200) -> Any:
        return await self.admin.ok(method, path, body, status)

    async def iceberg_table(self, name: str) -> None:
        body = {"name": name, "schema": SCHEMA_JSON}
        await self.ok("POST", f"{ICE}/namespaces/{NS}/tables", body)

    async def iceberg_view(self, name: str) -> None:
        await self.ok("POST", f"{ICE}/namespaces/{NS}/views", {**VIEW, "name": name})

    async def state(self) -> dict[str, Any]:
        """What a refused call must leave as it was."""
        tenants = await self.ok("GET", "/api/v1/tenants", None)
        catalogs = await self.ok("GET", f"{tenant_path(T)}/catalogs", None)
        return {
            "head": (await self.ok("GET", f"{CAT}/ref"))["head"],
            "system": await self.admin.system_head(T),
            "other": await self.admin.system_head(self.other_tenant),
            "tenants": sorted(t["name"] for t in tenants["tenants"]),
            "catalogs": sorted(c["name"] for c in catalogs["catalogs"]),
        }


Build = Callable[[World], Awaitable[Request]]


@dataclass(frozen=True)
class Row:
    build: Build
    allowed: Mapping[str, int]  # persona -> status; every persona not named is refused
    refused: Mapping[str, int] = field(default_factory=dict)  # refusals other than 403/401
    # persona -> (names the listing must show, names it must not show)
    listed: Mapping[str, tuple[list[str], list[str]]] | None = None
    key: str = ""  # the listing's field


REFUSED = {"none": 401, "nogrants": 403, "read": 403, "write": 403, "cadmin": 403}
REFUSED |= {"other": 403, "disabled": 401}
ALL_IN_TENANT = ("nogrants", "read", "write", "cadmin")


def ok_for(status: int, *personas: str) -> dict[str, int]:
    return dict.fromkeys(personas, status)


def fixed(method: str, path: str, body: Any = None, **params: str) -> Build:
    async def build(world: World) -> Request:
        return Request(method, path, body, params or None)

    return build


# --- builders that set up what the call acts on ---------------------------------------


async def _new_namespace(world: World) -> str:
    name = world.fresh("n")
    await world.ok("POST", f"{CAT}/namespaces", {"namespace": [name]}, 201)
    return name


async def _new_table(world: World) -> str:
    name = world.fresh("t")
    await world.ok("POST", f"{CAT}/namespaces/{NS}/tables", {"name": name}, 201)
    return name


def delete_namespace(prefix: str) -> Build:
    async def build(world: World) -> Request:
        return Request("DELETE", f"{prefix}/namespaces/{seg(await _new_namespace(world))}")

    return build


async def delete_native_table(world: World) -> Request:
    return Request("DELETE", f"{CAT}/namespaces/{NS}/tables/{await _new_table(world)}")


async def undrop_native_table(world: World) -> Request:
    name = await _new_table(world)
    await world.ok("DELETE", f"{CAT}/namespaces/{NS}/tables/{name}", None, 204)  # kept
    return Request("POST", f"{CAT}/namespaces/{NS}/tables/{name}/undrop")


async def rename_native_table(world: World) -> Request:
    source = await _new_table(world)
    body = {
        "source": {"kind": "table", "path": [NS, source]},
        "destination": {"kind": "table", "path": [NS, world.fresh("renamed")]},
    }
    return Request("POST", f"{CAT}/rename", body)


async def native_commit(world: World) -> Request:
    change = {"action": "create", "entity": {"kind": "table", "path": [NS, world.fresh("c")]}}
    return Request("POST", f"{CAT}/commit", {"changes": [change]})


async def create_native(world: World) -> Request:
    return Request("POST", f"{CAT}/namespaces", {"namespace": [world.fresh("new")]})


async def create_native_table(world: World) -> Request:
    return Request("POST", f"{CAT}/namespaces/{NS}/tables", {"name": world.fresh("new")})


async def reset_ref(world: World) -> Request:
    before = (await world.ok("GET", f"{CAT}/ref"))["head"]
    await _new_namespace(world)
    return Request("POST", f"{CAT}/ref/reset", {"to": before})


async def get_commit(world: World) -> Request:
    head = (await world.ok("GET", f"{CAT}/ref"))["head"]
    return Request("GET", f"{CAT}/commits/{head}")


async def get_commit_diff(world: World) -> Request:
    head = (await world.ok("GET", f"{CAT}/ref"))["head"]
    return Request("GET", f"{CAT}/commits/{head}/diff")


async def delete_catalog(world: World) -> Request:
    name = world.fresh("gone")
    await world.admin.catalog(T, name)
    await world.grant_sets(name)
    return Request("DELETE", f"{tenant_path(T)}/catalogs/{name}")


async def update_storage(world: World) -> Request:
    storage = (await world.ok("GET", CAT))["storage"]
    del storage["version"]
    return Request("POST", f"{CAT}/storage", {"storage": storage})


async def create_tenant(world: World) -> Request:
    return Request("POST", "/api/v1/tenants", {"name": world.fresh("tenant")})


async def create_catalog(world: World) -> Request:
    return Request("POST", f"{tenant_path(T)}/catalogs", {"name": world.fresh("cat")})


async def create_principal(world: World) -> Request:
    body = {"name": world.fresh("p"), "secret": SECRET}
    return Request("POST", f"{tenant_path(T)}/principals", body)


def on_new_principal(method: str, suffix: str = "", body: Any = None) -> Build:
    async def build(world: World) -> Request:
        name = world.fresh("p")
        await world.admin.principal(T, name)
        return Request(method, f"{tenant_path(T)}/principals/{name}{suffix}", body)

    return build


async def token_request(world: World) -> Request:
    form = {"grant_type": "client_credentials", "client_id": "target", "client_secret": SECRET}
    return Request("POST", "/v1/oauth/tokens", form=form)


ROLES = f"{tenant_path(T)}/principal-roles"
CATALOG_ROLES = f"{CAT}/catalog-roles"


async def create_principal_role(world: World) -> Request:
    return Request("POST", ROLES, {"name": world.fresh("role")})


async def _new_role(world: World) -> str:
    name = world.fresh("role")
    await world.ok("POST", ROLES, {"name": name}, 201)
    return name


async def delete_principal_role(world: World) -> Request:
    return Request("DELETE", f"{ROLES}/{await _new_role(world)}")


async def add_member(world: World) -> Request:
    return Request("POST", f"{ROLES}/{await _new_role(world)}/principals", {"principal": "target"})


async def remove_member(world: World) -> Request:
    role = await _new_role(world)
    await world.ok("POST", f"{ROLES}/{role}/principals", {"principal": "target"}, 201)
    return Request("DELETE", f"{ROLES}/{role}/principals/target")


async def tenant_grant(world: World) -> Request:
    role = await _new_role(world)
    return Request("POST", f"{ROLES}/{role}/grants", {"privilege": "CATALOG_LIST"})


async def tenant_revoke(world: World) -> Request:
    role = await _new_role(world)
    await world.ok("POST", f"{ROLES}/{role}/grants", {"privilege": "CATALOG_LIST"}, 201)
    return Request("POST", f"{ROLES}/{role}/grants/revoke", {"privilege": "CATALOG_LIST"})


async def _new_catalog_role(world: World) -> str:
    name = world.fresh("crole")
    await world.ok("POST", CATALOG_ROLES, {"name": name}, 201)
    return name


async def grant_catalog_role(world: World) -> Request:
    role, catalog_role = await _new_role(world), await _new_catalog_role(world)
    body = {"catalog": C, "catalog-role": catalog_role}
    return Request("POST", f"{ROLES}/{role}/catalog-roles", body)


async def revoke_catalog_role(world: World) -> Request:
    role, catalog_role = await _new_role(world), await _new_catalog_role(world)
    body = {"catalog": C, "catalog-role": catalog_role}
    await world.ok("POST", f"{ROLES}/{role}/catalog-roles", body, 201)
    return Request("DELETE", f"{ROLES}/{role}/catalog-roles/{C}/{catalog_role}")


async def create_catalog_role(world: World) -> Request:
    return Request("POST", CATALOG_ROLES, {"name": world.fresh("crole")})


async def delete_catalog_role(world: World) -> Request:
    return Request("DELETE", f"{CATALOG_ROLES}/{await _new_catalog_role(world)}")


CATALOG_GRANT = {"privilege": "TABLE_LIST", "securable": {"kind": "namespace", "path": [NS]}}


async def catalog_role_grant(world: World) -> Request:
    role = await _new_catalog_role(world)
    return Request("POST", f"{CATALOG_ROLES}/{role}/grants", CATALOG_GRANT)


async def catalog_role_revoke(world: World) -> Request:
    role = await _new_catalog_role(world)
    await world.ok("POST", f"{CATALOG_ROLES}/{role}/grants", CATALOG_GRANT, 201)
    return Request("POST", f"{CATALOG_ROLES}/{role}/grants/revoke", CATALOG_GRANT)


# Iceberg


async def ice_create_namespace(world: World) -> Request:
    return Request("POST", f"{ICE}/namespaces", {"namespace": [world.fresh("ice")]})


async def ice_create_table(world: World) -> Request:
    body = {"name": world.fresh("it"), "schema": SCHEMA_JSON}
    return Request("POST", f"{ICE}/namespaces/{NS}/tables", body)


async def ice_register(world: World) -> Request:
    donor = world.fresh("donor")
    await world.iceberg_table(donor)
    loaded = await world.ok("GET", f"{ICE}/namespaces/{NS}/tables/{donor}")
    await world.ok("DELETE", f"{ICE}/namespaces/{NS}/tables/{donor}", None, 204)
    # its own name: a dropped table's location yields to no other
    body = {"name": donor, "metadata-location": loaded["metadata-location"]}
    return Request("POST", f"{ICE}/namespaces/{NS}/register", body)


PROPERTIES = {"updates": [{"action": "set-properties", "updates": {"k": "v"}}]}
SCAN_REPORT = {
    "report-type": "scan-report",
    "table-name": f"{NS}.ice",
    "snapshot-id": -1,
    "filter": True,
    "schema-id": 0,
    "projected-field-ids": [1],
    "projected-field-names": ["id"],
    "metrics": {"result-data-files": {"unit": "count", "value": 0}},
}
SIGN_READ = {"region": "us-east-1", "method": "GET", "uri": "http://127.0.0.1:9/b/k", "headers": {}}


async def ice_drop_table(world: World) -> Request:
    name = world.fresh("it")
    await world.iceberg_table(name)
    return Request("DELETE", f"{ICE}/namespaces/{NS}/tables/{name}")


async def ice_rename_table(world: World) -> Request:
    name = world.fresh("it")
    await world.iceberg_table(name)
    body = {
        "source": {"namespace": [NS], "name": name},
        "destination": {"namespace": [NS], "name": world.fresh("moved")},
    }
    return Request("POST", f"{ICE}/tables/rename", body)


async def ice_create_view(world: World) -> Request:
    body = {**VIEW, "name": world.fresh("iv")}
    return Request("POST", f"{ICE}/namespaces/{NS}/views", body)


async def ice_drop_view(world: World) -> Request:
    name = world.fresh("iv")
    await world.iceberg_view(name)
    return Request("DELETE", f"{ICE}/namespaces/{NS}/views/{name}")


async def ice_rename_view(world: World) -> Request:
    name = world.fresh("iv")
    await world.iceberg_view(name)
    body = {
        "source": {"namespace": [NS], "name": name},
        "destination": {"namespace": [NS], "name": world.fresh("movedv")},
    }
    return Request("POST", f"{ICE}/views/rename", body)


# --- the rows -----------------------------------------------------------------------------

READERS = ("read", "write", "cadmin")
WRITERS = ("write", "cadmin")
ENTITY_NAMESPACE = "/api/v1/tenants/{tenant}/catalogs/{catalog}/namespaces/{namespace}"
ENTITY = ENTITY_NAMESPACE + "/{kind}/{name}"
ROWS: dict[tuple[str, str], Row] = {
    # operations and tokens
    ("GET", "/health"): Row(fixed("GET", "/health"), ok_for(200, *PERSONAS)),
    ("GET", "/metrics"): Row(fixed("GET", "/metrics"), {}),  # METASTORE_METRICS_AUTH is on
    ("POST", "/v1/oauth/tokens"): Row(token_request, ok_for(200, *PERSONAS)),
    ("GET", "/api/v1/whoami"): Row(
        fixed("GET", "/api/v1/whoami"), ok_for(200, *ALL_IN_TENANT, "other")
    ),
    ("POST", "/api/v1/token-keys/rotate"): Row(fixed("POST", "/api/v1/token-keys/rotate"), {}),
    # the API's descriptions: no data, for any authenticated caller (like /v1/config)
    ("GET", "/api/v1/openapi.json"): Row(
        fixed("GET", "/api/v1/openapi.json"), ok_for(200, *ALL_IN_TENANT, "other")
    ),
    ("GET", "/v1/openapi.yaml"): Row(
        fixed("GET", "/v1/openapi.yaml"), ok_for(200, *ALL_IN_TENANT, "other")
    ),
    # the web console: static pages for everyone; the cluster's layout for service admins
    ("GET", "/"): Row(fixed("GET", "/"), ok_for(200, *PERSONAS)),
    ("GET", "/console/{asset}"): Row(fixed("GET", "/console/app.js"), ok_for(200, *PERSONAS)),
    ("GET", "/api/v1/admin/cluster"): Row(fixed("GET", "/api/v1/admin/cluster"), {}),
    # checkpoints of the node's database (the data pipeline): service admins only
    ("POST", "/api/v1/admin/checkpoints"): Row(fixed("POST", "/api/v1/admin/checkpoints"), {}),
    ("GET", "/api/v1/admin/checkpoints"): Row(fixed("GET", "/api/v1/admin/checkpoints"), {}),
    ("DELETE", "/api/v1/admin/checkpoints/{checkpoint}"): Row(
        fixed("DELETE", "/api/v1/admin/checkpoints/ck-0000000000000-00000000"), {}
    ),
    # garbage collection and the batch jobs' task records: service admins only
    ("POST", "/api/v1/tenants/{tenant}/catalogs/{catalog}/gc/sweep"): Row(
        fixed("POST", f"{CAT}/gc/sweep", {"mark-head": "1", "candidates": []}), {}
    ),
    ("POST", "/api/v1/tenants/{tenant}/catalogs/{catalog}/gc/expire"): Row(
        fixed("POST", f"{CAT}/gc/expire", {}), {}
    ),
    ("POST", "/api/v1/admin/gc/leases"): Row(fixed("POST", "/api/v1/admin/gc/leases", {}), {}),
    ("GET", "/api/v1/admin/tasks"): Row(fixed("GET", "/api/v1/admin/tasks"), {}),
    ("POST", "/api/v1/admin/tasks"): Row(
        fixed(
            "POST",
            "/api/v1/admin/tasks",
            {"job": "gc", "scope": "all", "run": "r1", "lease-seconds": 60},
        ),
        {},
    ),
    ("PUT", "/api/v1/admin/tasks/{job}/{scope}"): Row(
        fixed("PUT", "/api/v1/admin/tasks/gc/all", {"run": "r1", "lease-seconds": 60}), {}
    ),
    ("DELETE", "/api/v1/admin/tasks/{job}/{scope}"): Row(
        fixed("DELETE", "/api/v1/admin/tasks/gc/all", run="r1"), {}
    ),
    # tenants
    ("GET", "/api/v1/tenants"): Row(
        fixed("GET", "/api/v1/tenants"),
        ok_for(200, *ALL_IN_TENANT, "other"),
        listed={
            "nogrants": ([], [T, "<other>"]),
            "read": ([T], ["<other>"]),
            "other": (["<other>"], [T]),
        },
        key="tenants",
    ),
    ("POST", "/api/v1/tenants"): Row(create_tenant, {}),
    ("GET", "/api/v1/tenants/{tenant}"): Row(fixed("GET", tenant_path(T)), {}),
    ("DELETE", "/api/v1/tenants/{tenant}"): Row(fixed("DELETE", tenant_path(T)), {}),
    ("POST", "/api/v1/tenants/{tenant}/properties"): Row(
        fixed("POST", f"{tenant_path(T)}/properties", {"updates": {"k": "v"}}), {}
    ),
    ("GET", "/api/v1/tenants/{tenant}/commits"): Row(fixed("GET", f"{tenant_path(T)}/commits"), {}),
    # principals
    ("GET", "/api/v1/tenants/{tenant}/principals"): Row(
        fixed("GET", f"{tenant_path(T)}/principals"),
        ok_for(200, *ALL_IN_TENANT),
        listed={"nogrants": (["nogrants"], ["read", "target"]), "read": (["read"], ["target"])},
        key="principals",
    ),
    ("POST", "/api/v1/tenants/{tenant}/principals"): Row(create_principal, {}),
    ("GET", "/api/v1/tenants/{tenant}/principals/{principal}"): Row(
        fixed("GET", f"{tenant_path(T)}/principals/target"), {}
    ),
    ("POST", "/api/v1/tenants/{tenant}/principals/{principal}/rotate"): Row(
        on_new_principal("POST", "/rotate", {}), {}
    ),
    ("POST", "/api/v1/tenants/{tenant}/principals/{principal}/disable"): Row(
        on_new_principal("POST", "/disable"), {}
    ),
    ("POST", "/api/v1/tenants/{tenant}/principals/{principal}/enable"): Row(
        on_new_principal("POST", "/enable"), {}
    ),
    ("DELETE", "/api/v1/tenants/{tenant}/principals/{principal}"): Row(
        on_new_principal("DELETE"), {}
    ),
    # principal roles
    ("GET", "/api/v1/tenants/{tenant}/principal-roles"): Row(
        fixed("GET", ROLES),
        ok_for(200, *ALL_IN_TENANT),
        listed={
            "nogrants": ([], ["readers"]),
            "read": (["readers"], ["writers"]),
            "cadmin": (["cadmins"], ["readers"]),
        },
        key="principal-roles",
    ),
    ("POST", "/api/v1/tenants/{tenant}/principal-roles"): Row(create_principal_role, {}),
    ("GET", "/api/v1/tenants/{tenant}/principal-roles/{role}"): Row(
        fixed("GET", f"{ROLES}/readers"), ok_for(200, "read")
    ),
    ("DELETE", "/api/v1/tenants/{tenant}/principal-roles/{role}"): Row(delete_principal_role, {}),
    ("GET", "/api/v1/tenants/{tenant}/principal-roles/{role}/principals"): Row(
        fixed("GET", f"{ROLES}/readers/principals"), {}
    ),
    ("POST", "/api/v1/tenants/{tenant}/principal-roles/{role}/principals"): Row(add_member, {}),
    ("DELETE", "/api/v1/tenants/{tenant}/principal-roles/{role}/principals/{principal}"): Row(
        remove_member, {}
    ),
    ("GET", "/api/v1/tenants/{tenant}/principal-roles/{role}/grants"): Row(
        fixed("GET", f"{ROLES}/readers/grants"), {}
    ),
    ("POST", "/api/v1/tenants/{tenant}/principal-roles/{role}/grants"): Row(tenant_grant, {}),
    ("POST", "/api/v1/tenants/{tenant}/principal-roles/{role}/grants/revoke"): Row(
        tenant_revoke, {}
    ),
    ("GET", "/api/v1/tenants/{tenant}/principal-roles/{role}/catalog-roles"): Row(
        fixed("GET", f"{ROLES}/readers/catalog-roles"), {}
    ),
    ("POST", "/api/v1/tenants/{tenant}/principal-roles/{role}/catalog-roles"): Row(
        grant_catalog_role, ok_for(201, "cadmin")
    ),
    (
        "DELETE",
        "/api/v1/tenants/{tenant}/principal-roles/{role}/catalog-roles/{catalog}/{catalog_role}",
    ): Row(revoke_catalog_role, ok_for(204, "cadmin")),
    # catalogs
    ("GET", "/api/v1/tenants/{tenant}/catalogs"): Row(
        fixed("GET", f"{tenant_path(T)}/catalogs"),
        ok_for(200, *ALL_IN_TENANT),
        listed={"nogrants": ([], [C, "hidden"]), "read": ([C], ["hidden"])},
        key="catalogs",
    ),
    ("POST", "/api/v1/tenants/{tenant}/catalogs"): Row(create_catalog, {}),
    ("GET", "/api/v1/tenants/{tenant}/catalogs/{catalog}"): Row(
        fixed("GET", CAT), ok_for(200, "cadmin")
    ),
    ("DELETE", "/api/v1/tenants/{tenant}/catalogs/{catalog}"): Row(
        delete_catalog, ok_for(204, "cadmin")
    ),
    ("POST", "/api/v1/tenants/{tenant}/catalogs/{catalog}/properties"): Row(
        fixed("POST", f"{CAT}/properties", {"updates": {"k": "v"}}), ok_for(200, "cadmin")
    ),
    ("POST", "/api/v1/tenants/{tenant}/catalogs/{catalog}/storage"): Row(
        update_storage,
        {},  # a service admin's without METASTORE_STORAGE_ROOTS
    ),
    ("GET", "/api/v1/tenants/{tenant}/catalogs/{catalog}/ref"): Row(
        fixed("GET", f"{CAT}/ref"), ok_for(200, "cadmin")
    ),
    ("POST", "/api/v1/tenants/{tenant}/catalogs/{catalog}/ref/reset"): Row(
        reset_ref, ok_for(200, "cadmin")
    ),
    ("GET", "/api/v1/tenants/{tenant}/catalogs/{catalog}/commits"): Row(
        fixed("GET", f"{CAT}/commits"), ok_for(200, "cadmin")
    ),
    ("GET", "/api/v1/tenants/{tenant}/catalogs/{catalog}/commits/{commit_id}"): Row(
        get_commit, ok_for(200, "cadmin")
    ),
    ("GET", "/api/v1/tenants/{tenant}/catalogs/{catalog}/commits/{commit_id}/diff"): Row(
        get_commit_diff, ok_for(200, "cadmin")
    ),
    # the change feed: whoever sees something in the catalog (events filtered per entity)
    ("GET", "/api/v1/tenants/{tenant}/catalogs/{catalog}/events"): Row(
        fixed("GET", f"{CAT}/events"), ok_for(200, *READERS)
    ),
    # catalog roles
    ("GET", "/api/v1/tenants/{tenant}/catalogs/{catalog}/catalog-roles"): Row(
        fixed("GET", CATALOG_ROLES), ok_for(200, "cadmin")
    ),
    ("POST", "/api/v1/tenants/{tenant}/catalogs/{catalog}/catalog-roles"): Row(
        create_catalog_role, ok_for(201, "cadmin")
    ),
    ("GET", "/api/v1/tenants/{tenant}/catalogs/{catalog}/catalog-roles/{role}"): Row(
        fixed("GET", f"{CATALOG_ROLES}/readers"), ok_for(200, "cadmin")
    ),
    ("DELETE", "/api/v1/tenants/{tenant}/catalogs/{catalog}/catalog-roles/{role}"): Row(
        delete_catalog_role, ok_for(204, "cadmin")
    ),
    ("GET", "/api/v1/tenants/{tenant}/catalogs/{catalog}/catalog-roles/{role}/grants"): Row(
        fixed("GET", f"{CATALOG_ROLES}/readers/grants"), ok_for(200, "cadmin")
    ),
    ("POST", "/api/v1/tenants/{tenant}/catalogs/{catalog}/catalog-roles/{role}/grants"): Row(
        catalog_role_grant, ok_for(201, "cadmin")
    ),
    (
        "POST",
        "/api/v1/tenants/{tenant}/catalogs/{catalog}/catalog-roles/{role}/grants/revoke",
    ): Row(catalog_role_revoke, ok_for(204, "cadmin")),
    # native namespaces, tables, views
    ("GET", "/api/v1/tenants/{tenant}/catalogs/{catalog}/namespaces"): Row(
        fixed("GET", f"{CAT}/namespaces"), ok_for(200, *READERS)
    ),
    ("POST", "/api/v1/tenants/{tenant}/catalogs/{catalog}/namespaces"): Row(
        create_native, ok_for(201, *WRITERS)
    ),
    ("GET", "/api/v1/tenants/{tenant}/catalogs/{catalog}/namespaces/{namespace}"): Row(
        fixed("GET", f"{CAT}/namespaces/{NS}"), ok_for(200, *READERS)
    ),
    ("POST", "/api/v1/tenants/{tenant}/catalogs/{catalog}/namespaces/{namespace}/properties"): Row(
        fixed("POST", f"{CAT}/namespaces/{NS}/properties", {"updates": {"k": "v"}}),
        ok_for(200, *WRITERS),
    ),
    ("DELETE", "/api/v1/tenants/{tenant}/catalogs/{catalog}/namespaces/{namespace}"): Row(
        delete_namespace(CAT), ok_for(204, "cadmin")
    ),
    ("GET", "/api/v1/tenants/{tenant}/catalogs/{catalog}/namespaces/{namespace}/{kind}"): Row(
        fixed("GET", f"{CAT}/namespaces/{NS}/tables"), ok_for(200, *READERS)
    ),
    ("POST", "/api/v1/tenants/{tenant}/catalogs/{catalog}/namespaces/{namespace}/{kind}"): Row(
        create_native_table, ok_for(201, *WRITERS)
    ),
    ("GET", ENTITY): Row(fixed("GET", f"{CAT}/namespaces/{NS}/tables/tbl"), ok_for(200, *READERS)),
    ("POST", ENTITY): Row(
        fixed("POST", f"{CAT}/namespaces/{NS}/tables/tbl", {"updates": {"k": "v"}}),
        ok_for(200, *WRITERS),
    ),
    ("DELETE", ENTITY): Row(delete_native_table, ok_for(204, "cadmin")),
    ("POST", ENTITY + "/undrop"): Row(undrop_native_table, ok_for(200, *WRITERS)),
    ("POST", "/api/v1/tenants/{tenant}/catalogs/{catalog}/rename"): Row(
        rename_native_table, ok_for(204, "cadmin")
    ),
    ("POST", "/api/v1/tenants/{tenant}/catalogs/{catalog}/commit"): Row(
        native_commit, ok_for(200, *WRITERS)
    ),
    ("GET", f"{ENTITY_NAMESPACE}/tables/{{name}}/metrics-reports"): Row(
        fixed("GET", f"{CAT}/namespaces/{NS}/tables/ice/metrics-reports"), ok_for(200, *READERS)
    ),
    # Iceberg REST
    ("GET", "/v1/config"): Row(
        fixed("GET", "/v1/config", warehouse=f"{T}/{C}"), ok_for(200, *ALL_IN_TENANT)
    ),
    ("GET", "/v1/{prefix}/namespaces"): Row(
        fixed("GET", f"{ICE}/namespaces"), ok_for(200, *READERS)
    ),
    ("POST", "/v1/{prefix}/namespaces"): Row(ice_create_namespace, ok_for(200, *WRITERS)),
    ("GET", "/v1/{prefix}/namespaces/{namespace}"): Row(
        fixed("GET", f"{ICE}/namespaces/{NS}"), ok_for(200, *READERS)
    ),
    ("HEAD", "/v1/{prefix}/namespaces/{namespace}"): Row(
        fixed("HEAD", f"{ICE}/namespaces/{NS}"), ok_for(204, *READERS)
    ),
    ("DELETE", "/v1/{prefix}/namespaces/{namespace}"): Row(
        delete_namespace(ICE), ok_for(204, "cadmin")
    ),
    ("POST", "/v1/{prefix}/namespaces/{namespace}/properties"): Row(
        fixed("POST", f"{ICE}/namespaces/{NS}/properties", {"updates": {"k": "v"}}),
        ok_for(200, *WRITERS),
    ),
    ("GET", "/v1/{prefix}/namespaces/{namespace}/tables"): Row(
        fixed("GET", f"{ICE}/namespaces/{NS}/tables"), ok_for(200, *READERS)
    ),
    ("POST", "/v1/{prefix}/namespaces/{namespace}/tables"): Row(
        ice_create_table, ok_for(200, *WRITERS)
    ),
    ("POST", "/v1/{prefix}/namespaces/{namespace}/register"): Row(
        ice_register, ok_for(200, *WRITERS)
    ),
    ("GET", "/v1/{prefix}/namespaces/{namespace}/tables/{table}"): Row(
        fixed("GET", f"{ICE}/namespaces/{NS}/tables/ice"), ok_for(200, *READERS)
    ),
    ("HEAD", "/v1/{prefix}/namespaces/{namespace}/tables/{table}"): Row(
        fixed("HEAD", f"{ICE}/namespaces/{NS}/tables/ice"), ok_for(204, *READERS)
    ),
    # a catalog without credential-vending settings answers an empty list
    ("GET", "/v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials"): Row(
        fixed("GET", f"{ICE}/namespaces/{NS}/tables/ice/credentials"), ok_for(200, *READERS)
    ),
    ("POST", "/v1/{prefix}/namespaces/{namespace}/tables/{table}"): Row(
        fixed("POST", f"{ICE}/namespaces/{NS}/tables/ice", PROPERTIES), ok_for(200, *WRITERS)
    ),
    # signing a read: TABLE_READ_DATA; the catalog's storage is file://, so an allowed caller
    # then gets a 400 (signing itself: tests/iceberg/test_remote_signing.py)
    ("POST", "/v1/{prefix}/namespaces/{namespace}/tables/{table}/sign"): Row(
        fixed("POST", f"{ICE}/namespaces/{NS}/tables/ice/sign", SIGN_READ), ok_for(400, *READERS)
    ),
    ("DELETE", "/v1/{prefix}/namespaces/{namespace}/tables/{table}"): Row(
        ice_drop_table, ok_for(204, "cadmin")
    ),
    ("POST", "/v1/{prefix}/tables/rename"): Row(ice_rename_table, ok_for(204, "cadmin")),
    ("POST", "/v1/{prefix}/transactions/commit"): Row(
        fixed(
            "POST",
            f"{ICE}/transactions/commit",
            {"table-changes": [{"identifier": {"namespace": [NS], "name": "ice"}, **PROPERTIES}]},
        ),
        ok_for(204, *WRITERS),
    ),
    ("GET", "/v1/{prefix}/namespaces/{namespace}/views"): Row(
        fixed("GET", f"{ICE}/namespaces/{NS}/views"), ok_for(200, *READERS)
    ),
    ("POST", "/v1/{prefix}/namespaces/{namespace}/views"): Row(
        ice_create_view, ok_for(200, *WRITERS)
    ),
    ("GET", "/v1/{prefix}/namespaces/{namespace}/views/{view}"): Row(
        fixed("GET", f"{ICE}/namespaces/{NS}/views/iv"), ok_for(200, *READERS)
    ),
    ("HEAD", "/v1/{prefix}/namespaces/{namespace}/views/{view}"): Row(
        fixed("HEAD", f"{ICE}/namespaces/{NS}/views/iv"), ok_for(204, *READERS)
    ),
    ("POST", "/v1/{prefix}/namespaces/{namespace}/views/{view}"): Row(
        fixed("POST", f"{ICE}/namespaces/{NS}/views/iv", PROPERTIES), ok_for(200, *WRITERS)
    ),
    ("DELETE", "/v1/{prefix}/namespaces/{namespace}/views/{view}"): Row(
        ice_drop_view, ok_for(204, "cadmin")
    ),
    ("POST", "/v1/{prefix}/views/rename"): Row(ice_rename_view, ok_for(204, "cadmin")),
    ("POST", "/v1/{prefix}/namespaces/{namespace}/tables/{table}/metrics"): Row(
        fixed("POST", f"{ICE}/namespaces/{NS}/tables/ice/metrics", SCAN_REPORT),
        ok_for(204, *READERS),
    ),
}


def without_prefix(row: Row) -> Row:
    """The row of an Iceberg route's twin without a prefix: the same call on ``/v1/...``,
    which serves the caller's default catalog: the catalog under test for this tenant's
    personas, while another tenant's admin reaches its own tenant's, which does not
    exist (404, nothing changed)."""

    async def build(world: World) -> Request:
        request = await row.build(world)
        assert request.path.startswith(f"{ICE}/"), request.path
        request.path = "/v1/" + request.path.removeprefix(f"{ICE}/")
        return request

    return replace(row, build=build, refused={**row.refused, "other": 404})


for (_method, _template), _row in list(ROWS.items()):
    _twin = unprefixed(_template)
    if _twin is not None:
        ROWS[(_method, _twin)] = without_prefix(_row)


# --- the routes the application has -------------------------------------------------------


def app_routes(tmp: Path) -> set[tuple[str, str]]:
    app = create_app(ServerConfig(data_dir=tmp, auth="on"))
    return {(r.method, r.resource.canonical) for r in app.router.routes() if r.resource}


def head_twins(routes: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """aiohttp's HEAD routes of GET routes: they have the GET's row and rule."""
    return {
        (m, t) for m, t in routes if m == "HEAD" and ("GET", t) in routes and (m, t) not in ROWS
    }


def test_every_route_has_a_row_and_a_rule(tmp_path: Path) -> None:
    routes = app_routes(tmp_path)
    twins = head_twins(routes)
    missing = sorted(routes - twins - set(ROWS))
    assert not missing, f"routes without a row in the authorization matrix: {missing}"
    stale = sorted(set(ROWS) - routes)
    assert not stale, f"rows of routes the application does not have: {stale}"
    unruled = sorted(r for r in routes - twins if r not in RULES)
    assert not unruled, f"routes without an authorization rule: {unruled}"


CELLS = sorted(ROWS) + sorted(
    ("HEAD", t) for m, t in ROWS if m == "GET" and ("HEAD", t) not in ROWS
)


# --- the world, set up once -----------------------------------------------------------------


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    root = tmp_path_factory.mktemp("matrix")
    env = secured_env() | {"METASTORE_METRICS_AUTH": "on"}
    process = NodeProcess(root / "data", log_path=root / "node.log", env=env)
    with process:
        yield process
    log = process.log_path.read_text(errors="replace")
    assert "Traceback" not in log, f"the node logged an unhandled error:\n{process.log_tail(60)}"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(node: NodeProcess) -> AsyncIterator[World]:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        api = Api(session, node.url)
        root = await login(api, *ROOT)
        admin = Admin(api, root.token, root.name)
        world = World(api, admin, unique("other"))
        await admin.tenant(world.other_tenant)
        world.callers["other"] = await admin.login_as(world.other_tenant, "boss")
        await admin.principal_role(world.other_tenant, "tenant_admin", "boss")
        world.callers["none"] = Caller(api, None)
        for persona in ("nogrants", "read", "write", "cadmin", "disabled"):
            world.callers[persona] = await admin.login_as(T, persona)
        await admin.principal(T, "target")
        await admin.catalog(T, "hidden")  # nobody but admins holds anything in it
        await admin.principal_role(T, "readers", "read", "disabled")
        await admin.principal_role(T, "writers", "write")
        await admin.principal_role(T, "cadmins", "cadmin")
        await world.grant_sets(C)
        await admin.ok("POST", f"{tenant_path(T)}/principals/disabled/disable", None)
        await world.ok("POST", f"{CAT}/namespaces", {"namespace": [NS]}, 201)
        await world.ok("POST", f"{CAT}/namespaces/{NS}/tables", {"name": "tbl"}, 201)
        await world.iceberg_table("ice")
        await world.iceberg_view("iv")
        yield world


async def send(caller: Caller, request: Request) -> Reply:
    if request.form is not None:
        return await caller.api.call(
            request.method, request.path, data=request.form, headers=caller.headers()
        )
    return await caller.call(request.method, request.path, request.body, params=request.params)


def expected(row: Row, persona: str) -> int:
    return row.allowed.get(persona) or row.refused.get(persona) or REFUSED[persona]


@pytest.mark.parametrize("cell", CELLS, ids=lambda c: f"{c[0]} {c[1]}")
@pytest.mark.asyncio(loop_scope="module")
async def test_route(world: World, cell: tuple[str, str]) -> None:
    method, template = cell
    row = ROWS.get(cell) or ROWS[("GET", template)]
    failures = []
    for persona in PERSONAS:
        request = await row.build(world)
        request.method = method
        status = expected(row, persona)
        allowed = persona in row.allowed
        before = None if allowed else await world.state()
        reply = await send(world.callers[persona], request)
        where = f"{persona}: {reply.describe()[:400]}"
        if reply.status != status:
            failures.append(f"expected {status}, {where}")
            continue
        if not allowed:
            if method != "HEAD":
                error = reply.body.get("error") if isinstance(reply.body, dict) else None
                if not (isinstance(error, dict) and error.get("code") == status):
                    failures.append(f"not the Iceberg error shape, {where}")
            after = await world.state()
            if after != before:
                failures.append(f"refused but changed {before} -> {after}, {where}")
        elif row.listed is not None and persona in row.listed and method == "GET":
            names = {item["name"] for item in reply.body[row.key]}
            shown, hidden = (
                {world.other_tenant if n == "<other>" else n for n in group}
                for group in row.listed[persona]
            )
            if not shown <= names or hidden & names:
                failures.append(f"listed {sorted(names)}: want {shown}, not {hidden}, {where}")
    assert not failures, "\n".join(failures)


@pytest.mark.asyncio(loop_scope="module")
async def test_protected_metrics_answer_service_admins(world: World) -> None:
    """The other half of the /metrics row (METASTORE_METRICS_AUTH=on): a service admin."""
    reply = await world.admin.call("GET", "/metrics")
    assert reply.status == 200 and "metastore_commits_total" in reply.text, reply.describe()
