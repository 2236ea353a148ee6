"""Every tenant's catalogs through the Iceberg REST API, with real PyIceberg.

A ``warehouse`` is ``catalog`` (the caller's own tenant; the default tenant with
authentication off) or ``tenant/catalog``; ``/v1/config`` answers the prefix that
names both (``tenant~catalog``, the bare catalog in the default tenant). A principal
reaches only its own tenant's catalogs, and a refusal reads the same whether the
other tenant's catalog exists or not.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import ForbiddenError

from tests.iceberg.conftest import Server
from tests.iceberg.support import SCHEMA, assert_error, rows
from tests.iceberg.tenants import (
    SECRET,
    catalog_body,
    client,
    new_tenant,
    post,
    tenant_admin,
    token,
)

ADMIN = {"credential": "alice:s3cret-alice"}  # the secured server's service admin


def _events(catalog: RestCatalog, ids: list[int]) -> list[int]:
    """Create db.events, append ``ids``, scan it back."""
    catalog.create_namespace(("db",))
    table = catalog.create_table(("db", "events"), SCHEMA)
    table.append(rows(ids))
    loaded = catalog.load_table(("db", "events"))
    return sorted(loaded.scan().to_arrow()["id"].to_pylist())


# --- authentication off: any tenant by name ----------------------------------------------


def test_pyiceberg_reaches_a_second_tenant_by_warehouse(iceberg_server: Server) -> None:
    name = f"c{uuid.uuid4().hex[:8]}"  # the same catalog name in two tenants
    tenant = new_tenant(iceberg_server, name)
    post(
        iceberg_server,
        "/api/v1/tenants/default/catalogs",
        catalog_body(iceberg_server, "default", name),
    )

    other = client(iceberg_server, f"{tenant}/{name}")
    assert other.properties["prefix"] == f"{tenant}~{name}"
    default = client(iceberg_server, name)
    assert default.properties["prefix"] == name  # the default tenant's prefix as before
    assert client(iceberg_server, f"default/{name}").properties["prefix"] == name

    assert _events(other, [1, 2, 3]) == [1, 2, 3]
    assert _events(default, [7]) == [7]  # same names, another tenant: its own table
    assert other.list_tables(("db",)) == [("db", "events")]
    assert sorted(other.load_table(("db", "events")).scan().to_arrow()["id"].to_pylist()) == [
        1,
        2,
        3,
    ]

    native = f"{iceberg_server.url}/api/v1/tenants/{tenant}/catalogs/{name}"
    table = requests.get(f"{native}/namespaces/db/tables/events", timeout=60)
    assert table.status_code == 200, table.text
    location = table.json()["location"]
    assert f"/{tenant}/{name}/db/events" in location  # the tenant's catalog's storage

    # the tenant~catalog prefix by hand, and the default tenant's spelled out
    listed = requests.get(f"{iceberg_server.url}/v1/{tenant}~{name}/namespaces", timeout=60)
    assert listed.status_code == 200 and listed.json()["namespaces"] == [["db"]], listed.text
    spelled = requests.get(f"{iceberg_server.url}/v1/default~{name}/namespaces", timeout=60)
    assert spelled.status_code == 200 and spelled.json()["namespaces"] == [["db"]], spelled.text


@pytest.mark.parametrize(
    ("warehouse", "status", "error_type"),
    [
        ("nosuchtenant/default", 404, "NoSuchTenantException"),
        ("default/nosuchcatalog", 404, "NoSuchWarehouseException"),
        ("a/b/c", 400, "BadRequestException"),
        ("/default", 400, "BadRequestException"),
        ("default/", 400, "BadRequestException"),
        ("default~default", 400, "BadRequestException"),
        ("bad name", 400, "BadRequestException"),
    ],
)
def test_config_refuses_unknown_or_malformed_warehouses(
    iceberg_server: Server, warehouse: str, status: int, error_type: str
) -> None:
    reply = requests.get(
        f"{iceberg_server.url}/v1/config", params={"warehouse": warehouse}, timeout=60
    )
    assert_error(reply, status, error_type)


@pytest.mark.parametrize(
    ("prefix", "status"),
    [("nosuchtenant~default", 404), ("default~nosuch", 404), ("~default", 400), ("a~", 400)],
)
def test_unknown_or_malformed_prefixes(iceberg_server: Server, prefix: str, status: int) -> None:
    reply = requests.get(f"{iceberg_server.url}/v1/{prefix}/namespaces", timeout=60)
    assert_error(reply, status)


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/namespaces", {"namespace": "not a list"}),
        ("POST", "/namespaces/db/tables", {"name": "t", "schema": "not a schema"}),
        ("POST", "/namespaces/db/tables/t", {"requirements": "no", "updates": []}),
        ("POST", "/namespaces/db/register", {"name": 1}),
        ("DELETE", "/namespaces/db/tables/t?purgeRequested=maybe", None),
        ("POST", "/tables/rename", {"source": 1}),
        ("POST", "/namespaces/db/views", {"name": "v"}),
    ],
)
def test_a_mutation_of_an_unknown_catalog_is_a_404_whatever_else_it_gets_wrong(
    iceberg_server: Server, method: str, path: str, body: Any
) -> None:
    """Mutations check their catalog in the work they do, not in a read of their own
    first, and still answer in the order of every route: the unknown catalog first;
    in a catalog that exists, the same request is the client error it is."""
    for prefix, status in (("default~nosuch", 404), ("default", 400)):
        url = f"{iceberg_server.url}/v1/{prefix}{path}"
        reply = requests.request(method, url, json=body, timeout=60)
        assert_error(reply, status)


# --- authentication on: the caller's own tenant ------------------------------------------


@pytest.fixture(scope="module")
def acme(secured_server: Server) -> Iterator[tuple[str, str]]:
    """Tenant ``acme-*`` with catalog ``sales`` and its tenant admin ``etl``; returns the
    tenant and etl's client id."""
    admin = {"Authorization": f"Bearer {token(secured_server, 'alice', 's3cret-alice')}"}
    tenant = new_tenant(secured_server, "sales", admin)
    yield tenant, tenant_admin(secured_server, admin, tenant, "etl")


def test_a_principal_reaches_its_own_tenant_by_catalog_name(
    secured_server: Server, acme: tuple[str, str]
) -> None:
    tenant, etl = acme
    catalog = client(secured_server, "sales", credential=f"{etl}:{SECRET}")
    assert catalog.properties["prefix"] == f"{tenant}~sales"
    assert _events(catalog, [4, 5]) == [4, 5]
    spelled = client(secured_server, f"{tenant}/sales", credential=f"{etl}:{SECRET}")
    assert spelled.properties["prefix"] == f"{tenant}~sales"
    assert spelled.list_tables(("db",)) == [("db", "events")]
    # a service admin (of the default tenant) names the tenant
    admin = client(secured_server, f"{tenant}/sales", **ADMIN)
    assert sorted(admin.load_table(("db", "events")).scan().to_arrow()["id"].to_pylist()) == [4, 5]
    with pytest.raises(ForbiddenError):  # the default tenant's catalog is not etl's
        client(secured_server, "default/default", credential=f"{etl}:{SECRET}")


def test_another_tenant_is_refused_alike_whether_its_catalogs_exist_or_not(
    secured_server: Server, acme: tuple[str, str]
) -> None:
    tenant, _ = acme
    admin = {"Authorization": f"Bearer {token(secured_server, 'alice', 's3cret-alice')}"}
    beta = new_tenant(secured_server, "sales", admin)
    intruder = tenant_admin(secured_server, admin, beta, "ops")
    headers = {"Authorization": f"Bearer {token(secured_server, intruder, SECRET)}"}
    messages: dict[str, list[str]] = {}
    for prefix in (f"{tenant}~sales", f"{tenant}~nosuch", "nosuchtenant~sales"):
        for path in ("/namespaces", "/namespaces/db", "/namespaces/db/tables/events"):
            url = f"{secured_server.url}/v1/{prefix}{path}"
            reply = requests.get(url, headers=headers, timeout=60)
            assert_error(reply, 403, "ForbiddenException")
            message = reply.json()["error"]["message"]
            messages.setdefault(prefix, []).append(message.replace("nosuch", "sales"))
        created = requests.post(
            f"{secured_server.url}/v1/{prefix}/namespaces",
            json={"namespace": ["x"]},
            headers=headers,
            timeout=60,
        )
        assert_error(created, 403, "ForbiddenException")
    for warehouse in (f"{tenant}/sales", f"{tenant}/nosuch", "nosuchtenant/sales"):
        reply = requests.get(
            f"{secured_server.url}/v1/config",
            params={"warehouse": warehouse},
            headers=headers,
            timeout=60,
        )
        assert_error(reply, 403, "ForbiddenException")
    # the same answer whether the catalog exists or not
    assert messages[f"{tenant}~sales"] == messages[f"{tenant}~nosuch"], messages
    # its own "sales" is beta's, not acme's
    own = client(secured_server, "sales", token=headers["Authorization"].split()[1])
    assert own.properties["prefix"] == f"{beta}~sales"
    assert own.list_namespaces() == []
    # nothing was written in acme's catalog
    admin_view = client(secured_server, f"{tenant}/sales", **ADMIN)
    assert ("x",) not in admin_view.list_namespaces()
