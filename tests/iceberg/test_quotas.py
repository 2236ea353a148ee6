"""A tenant's quotas as PyIceberg meets them: ``TooManyRequestsError`` (429 with
``Retry-After``), nothing written; the quota is set by a service admin."""

from __future__ import annotations

import pytest
import requests
from pyiceberg.exceptions import TooManyRequestsError

from tests.iceberg.conftest import Server
from tests.iceberg.support import SCHEMA
from tests.iceberg.tenants import SECRET, client, new_tenant, tenant_admin, token


def test_pyiceberg_over_its_tenants_quotas(secured_server: Server) -> None:
    admin = {"Authorization": f"Bearer {token(secured_server, 'alice', 's3cret-alice')}"}
    tenant = new_tenant(secured_server, "sales", admin)
    etl = tenant_admin(secured_server, admin, tenant, "etl")
    quota = f"{secured_server.url}/api/v1/tenants/{tenant}/properties"

    def set_quota(updates: dict[str, str]) -> None:
        reply = requests.post(quota, json={"updates": updates}, headers=admin, timeout=60)
        assert reply.status_code == 200, reply.text

    set_quota({"quota.max-tables": "1"})
    catalog = client(secured_server, "sales", credential=f"{etl}:{SECRET}")
    catalog.create_namespace(("db",))
    catalog.create_table(("db", "first"), SCHEMA)
    with pytest.raises(TooManyRequestsError, match=r"quota\.max-tables"):
        catalog.create_table(("db", "second"), SCHEMA)
    assert catalog.list_tables(("db",)) == [("db", "first")]

    set_quota({"quota.requests-per-second": "0.001", "quota.burst": "2"})
    catalog = client(secured_server, "sales", credential=f"{etl}:{SECRET}")  # /v1/config: 1
    catalog.load_table(("db", "first"))  # 2
    with pytest.raises(TooManyRequestsError, match="request rate"):
        catalog.list_tables(("db",))
    raw = requests.get(
        f"{secured_server.url}/v1/{tenant}~sales/namespaces",
        headers={"Authorization": f"Bearer {token(secured_server, etl, SECRET)}"},
        timeout=60,
    )
    assert raw.status_code == 429 and int(raw.headers["Retry-After"]) >= 1, raw.headers
    assert raw.json()["error"]["type"] == "TooManyRequestsException", raw.text
