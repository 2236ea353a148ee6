"""Principals, roles and grants for the authorization tests, made through the real API.

``Caller`` sends requests as one principal; ``Admin`` (a service admin's caller) sets
up tenants, principals, roles and grants with the same endpoints a client would use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from tests.native.support import Api, Reply, assert_status

ROOT = ("root", "root-secret-1")  # a service admin (METASTORE_AUTH_ADMINS)
SECRET = "a-long-enough-secret-1"


def secured_env(*clients: tuple[str, str], admins: str = ROOT[0]) -> dict[str, str]:
    listed = ",".join(f"{c}:{s}" for c, s in (ROOT, *clients))
    return {
        "METASTORE_AUTH": "on",
        "METASTORE_AUTH_CLIENTS": listed,
        "METASTORE_AUTH_ADMINS": admins,
    }


class Caller:
    """Requests to a node as one principal (its bearer token; None: no token at all)."""

    def __init__(self, api: Api, token: str | None, name: str = "") -> None:
        self.api = api
        self.token = token
        self.name = name

    def headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        sent = dict(extra or {})
        if self.token is not None:
            sent["Authorization"] = f"Bearer {self.token}"
        return sent

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, str | int] | None = None,
    ) -> Reply:
        if body is None:
            return await self.api.call(method, path, headers=self.headers(headers), params=params)
        return await self.api.call(
            method, path, json_body=body, headers=self.headers(headers), params=params
        )

    async def ok(self, method: str, path: str, body: Any = None, status: int = 200) -> Any:
        return assert_status(await self.call(method, path, body), status)


async def login(api: Api, client_id: str, secret: str) -> Caller:
    form = {"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret}
    reply = await api.call("POST", "/v1/oauth/tokens", data=form)
    assert reply.status == 200, reply.describe()
    return Caller(api, reply.body["access_token"], client_id)


def tenant_path(tenant: str) -> str:
    return f"/api/v1/tenants/{tenant}"


class Admin(Caller):
    """A service admin setting up what the tests need."""

    async def tenant(self, name: str) -> None:
        await self.ok("POST", "/api/v1/tenants", {"name": name}, 201)

    async def catalog(self, tenant: str, name: str) -> None:
        await self.ok("POST", f"{tenant_path(tenant)}/catalogs", {"name": name}, 201)

    async def principal(self, tenant: str, name: str, secret: str = SECRET) -> str:
        """A service principal of ``tenant``; returns its client id."""
        body = {"name": name, "secret": secret}
        created = await self.ok("POST", f"{tenant_path(tenant)}/principals", body, 201)
        return str(created["id"])

    async def login_as(self, tenant: str, name: str) -> Caller:
        client_id = await self.principal(tenant, name)
        return await login(self.api, client_id, SECRET)

    async def principal_role(self, tenant: str, role: str, *members: str) -> None:
        path = f"{tenant_path(tenant)}/principal-roles"
        if role != "tenant_admin":
            await self.ok("POST", path, {"name": role}, 201)
        for member in members:
            await self.ok("POST", f"{path}/{role}/principals", {"principal": member}, 201)

    async def tenant_grant(self, tenant: str, role: str, *privileges: str) -> None:
        path = f"{tenant_path(tenant)}/principal-roles/{role}/grants"
        for privilege in privileges:
            await self.ok("POST", path, {"privilege": privilege}, 201)

    async def catalog_role(
        self,
        tenant: str,
        catalog: str,
        role: str,
        grants: list[tuple[str, str, list[str]]],
        *principal_roles: str,
    ) -> None:
        """Catalog role ``role`` holding ``grants`` (privilege, kind, path), granted to
        ``principal_roles``."""
        path = f"{tenant_path(tenant)}/catalogs/{catalog}/catalog-roles"
        await self.ok("POST", path, {"name": role}, 201)
        for privilege, kind, names in grants:
            body = {"privilege": privilege, "securable": {"kind": kind, "path": names}}
            await self.ok("POST", f"{path}/{role}/grants", body, 201)
        for principal_role in principal_roles:
            body = {"catalog": catalog, "catalog-role": role}
            await self.ok(
                "POST",
                f"{tenant_path(tenant)}/principal-roles/{principal_role}/catalog-roles",
                body,
                201,
            )

    async def system_head(self, tenant: str) -> str:
        """The newest commit of the tenant's own history (its policy, principals...)."""
        page = await self.ok("GET", f"{tenant_path(tenant)}/commits", None)
        return str(page["commits"][0]["id"])


def seg(*levels: str) -> str:
    return quote("\x1f".join(levels), safe="")
