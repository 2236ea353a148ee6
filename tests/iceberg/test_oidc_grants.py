"""Roles an external identity provider asserts are principal roles for the grants: a user
holds what the principal roles of those names hold, through PyIceberg too; a role that
does not exist gives nothing, and ``tenant_admin`` asserted by the provider makes a
tenant admin."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import ForbiddenError
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from harness.node import NodeProcess
from tests.iceberg.test_auth import node
from tests.iceberg.test_oidc import Provider, provider_env

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


@pytest.fixture(scope="module")
def idp() -> Iterator[Provider]:
    provider = Provider()
    yield provider
    provider.close()


@pytest.fixture(scope="module")
def secured(idp: Provider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    with node(tmp_path_factory.mktemp("oidc-grants"), provider_env(idp, "/grants")) as process:
        yield process


def call(url: str, token: str, method: str, path: str, body: Any = None) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"}
    return requests.request(method, url + path, json=body, headers=headers, timeout=60)


def test_roles_from_the_provider_hold_what_their_principal_roles_hold(
    idp: Provider, secured: NodeProcess
) -> None:
    ops = idp.token("ops")  # a service admin (METASTORE_AUTH_ADMINS)
    url, tenant = secured.url, "/api/v1/tenants/default"
    catalog = f"c{uuid.uuid4().hex[:8]}"
    steps = [
        ("POST", f"{tenant}/catalogs", {"name": catalog}),
        ("POST", f"{tenant}/principal-roles", {"name": "reader"}),
        ("POST", f"{tenant}/catalogs/{catalog}/catalog-roles", {"name": "readers"}),
        (
            "POST",
            f"{tenant}/catalogs/{catalog}/catalog-roles/readers/grants",
            {"privilege": "TABLE_READ_DATA", "securable": {"kind": "catalog"}},
        ),
        (
            "POST",
            f"{tenant}/principal-roles/reader/catalog-roles",
            {"catalog": catalog, "catalog-role": "readers"},
        ),
    ]
    for method, path, body in steps:
        reply = call(url, ops, method, path, body)
        assert reply.status_code == 201, reply.text
    admin = RestCatalog("ops", uri=url, warehouse=catalog, token=ops)
    admin.create_namespace(("sales",))
    admin.create_table(("sales", "orders"), SCHEMA)
    admin.close()

    # ana's token says reader and writer: "writer" is no principal role here
    ana = RestCatalog("ana", uri=url, warehouse=catalog, token=idp.token("ana"))
    assert ana.load_table(("sales", "orders")).schema() == SCHEMA
    with pytest.raises(ForbiddenError):
        ana.create_namespace(("hr",))
    ana.close()
    bob = idp.token("bob", realm_access={"roles": ["writer"]})
    reply = call(url, bob, "GET", f"/v1/{catalog}/namespaces/sales/tables/orders")
    assert reply.status_code == 403, reply.text
    boss = idp.token("boss", realm_access={"roles": ["tenant_admin"]})
    reply = call(url, boss, "POST", f"{tenant}/catalogs/{catalog}/namespaces", {"namespace": ["x"]})
    assert reply.status_code == 201, reply.text
