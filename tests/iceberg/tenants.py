"""Tenants, their admins and PyIceberg clients for the tenancy tests, made through the
real API of a running node."""

from __future__ import annotations

import uuid
from typing import Any

import requests
from pyiceberg.catalog.rest import RestCatalog

from tests.iceberg.conftest import Server

SECRET = "a-long-enough-secret-1"


def post(server: Server, path: str, body: Any, headers: dict[str, str] | None = None) -> Any:
    reply = requests.post(server.url + path, json=body, headers=headers, timeout=60)
    assert reply.status_code in (200, 201), f"POST {path}: {reply.text}"
    return reply.json()


def catalog_body(server: Server, tenant: str, name: str) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name}
    if server.storage is not None:  # a cluster: a root every node reaches
        body["storage"] = {"root": (server.storage / tenant / name).as_uri()}
    return body


def new_tenant(server: Server, catalog: str, headers: dict[str, str] | None = None) -> str:
    """A fresh tenant holding one catalog."""
    tenant = f"t{uuid.uuid4().hex[:10]}"
    post(server, "/api/v1/tenants", {"name": tenant}, headers)
    post(
        server, f"/api/v1/tenants/{tenant}/catalogs", catalog_body(server, tenant, catalog), headers
    )
    return tenant


def client(server: Server, warehouse: str, **properties: str) -> RestCatalog:
    if "credential" in properties:
        properties["oauth2-server-uri"] = f"{server.url}/v1/oauth/tokens"
    return RestCatalog("t", uri=server.url, warehouse=warehouse, **properties)


def token(server: Server, client_id: str, secret: str) -> str:
    form = {"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret}
    reply = requests.post(f"{server.url}/v1/oauth/tokens", data=form, timeout=60)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["access_token"])


def tenant_admin(server: Server, admin: dict[str, str], tenant: str, name: str) -> str:
    """A service principal holding ``tenant_admin`` in ``tenant``; returns its client id."""
    base = f"/api/v1/tenants/{tenant}"
    created = post(server, f"{base}/principals", {"name": name, "secret": SECRET}, admin)
    post(server, f"{base}/principal-roles/tenant_admin/principals", {"principal": name}, admin)
    return str(created["id"])
