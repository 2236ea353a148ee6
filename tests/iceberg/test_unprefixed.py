"""Iceberg routes without a prefix: a client that never asked ``/v1/config`` calls
``/v1/namespaces``, ``/v1/tables/rename``, ... and reaches the default catalog, the one
``/v1/config`` gives without a warehouse (raw HTTP, and PyIceberg without a prefix)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog

from tests.iceberg.conftest import TENANT, Server
from tests.iceberg.support import SCHEMA, assert_error, rows

SCHEMA_JSON = json.loads(SCHEMA.model_dump_json())
# embedded only: a cluster node forwards a write byte for byte with the client's token,
# so the owner reads the same catalog from the same path and caller; a cluster costs
# ~30 s to start in a suite near its time budget
pytestmark = pytest.mark.parametrize("iceberg_server", ["embedded"], indirect=True)
DEFAULT = "default"  # the default catalog, whose prefix /v1/config gives as "default"


def _view(name: str, namespace: str) -> dict[str, Any]:
    version = {
        "version-id": 1,
        "timestamp-ms": 1,
        "schema-id": 0,
        "summary": {},
        "representations": [{"type": "sql", "sql": "select 1", "dialect": "spark"}],
        "default-namespace": [namespace],
    }
    return {"name": name, "schema": SCHEMA_JSON, "view-version": version, "properties": {}}


class Bare:
    """Raw calls to ``/v1/...`` with no prefix."""

    def __init__(self, url: str) -> None:
        self.url = url

    def call(self, method: str, path: str, status: int, **kwargs: Any) -> requests.Response:
        reply = requests.request(method, f"{self.url}/v1{path}", timeout=60, **kwargs)
        assert reply.status_code == status, f"{method} {path}: {reply.status_code} {reply.text}"
        return reply


def test_every_catalog_route_serves_the_default_catalog_without_a_prefix(
    iceberg_server: Server,
) -> None:
    bare = Bare(iceberg_server.url)
    ns = f"u{uuid.uuid4().hex[:8]}"
    prefixed = f"{iceberg_server.url}/v1/{DEFAULT}/namespaces/{ns}"
    # namespaces
    bare.call("POST", "/namespaces", 200, json={"namespace": [ns]})
    assert [ns] in bare.call("GET", "/namespaces", 200).json()["namespaces"]
    bare.call("HEAD", f"/namespaces/{ns}", 204)
    bare.call("POST", f"/namespaces/{ns}/properties", 200, json={"updates": {"k": "v"}})
    assert bare.call("GET", f"/namespaces/{ns}", 200).json()["properties"] == {"k": "v"}
    # the same namespace through the default catalog's prefix
    assert requests.get(prefixed, timeout=60).json()["properties"] == {"k": "v"}
    # tables: create, list, load, exists, commit, register, rename, transactions, drop
    for name in ("t", "donor"):
        body = {"name": name, "schema": SCHEMA_JSON}
        bare.call("POST", f"/namespaces/{ns}/tables", 200, json=body)
    listed = bare.call("GET", f"/namespaces/{ns}/tables", 200).json()["identifiers"]
    assert {"namespace": [ns], "name": "t"} in listed
    bare.call("HEAD", f"/namespaces/{ns}/tables/t", 204)
    update = {"updates": [{"action": "set-properties", "updates": {"a": "1"}}]}
    committed = bare.call("POST", f"/namespaces/{ns}/tables/t", 200, json=update).json()
    assert committed["metadata"]["properties"]["a"] == "1"
    loaded = requests.get(f"{prefixed}/tables/t", timeout=60).json()
    assert loaded["metadata-location"] == committed["metadata-location"]
    # register reaches the default catalog's handler: the donor there holds the location
    donor = bare.call("GET", f"/namespaces/{ns}/tables/donor", 200).json()["metadata-location"]
    register = {"name": "registered", "metadata-location": donor}
    refused = bare.call("POST", f"/namespaces/{ns}/register", 400, json=register)
    assert "another live table" in refused.json()["error"]["message"]
    rename = {
        "source": {"namespace": [ns], "name": "t"},
        "destination": {"namespace": [ns], "name": "moved"},
    }
    bare.call("POST", "/tables/rename", 204, json=rename)
    change = {"identifier": {"namespace": [ns], "name": "moved"}, **update}
    bare.call("POST", "/transactions/commit", 204, json={"table-changes": [change]})
    for name in ("moved", "donor"):
        bare.call("DELETE", f"/namespaces/{ns}/tables/{name}", 204)
    # views: create, list, load, exists, replace, rename, drop
    bare.call("POST", f"/namespaces/{ns}/views", 200, json=_view("v", ns))
    listed = bare.call("GET", f"/namespaces/{ns}/views", 200).json()["identifiers"]
    assert listed == [{"namespace": [ns], "name": "v"}]
    bare.call("GET", f"/namespaces/{ns}/views/v", 200)
    bare.call("HEAD", f"/namespaces/{ns}/views/v", 204)
    bare.call("POST", f"/namespaces/{ns}/views/v", 200, json=update)
    rename = {
        "source": {"namespace": [ns], "name": "v"},
        "destination": {"namespace": [ns], "name": "w"},
    }
    bare.call("POST", "/views/rename", 204, json=rename)
    bare.call("DELETE", f"/namespaces/{ns}/views/w", 204)
    bare.call("DELETE", f"/namespaces/{ns}", 204)
    assert requests.get(prefixed, timeout=60).status_code == 404


def test_pyiceberg_without_a_prefix(iceberg_server: Server) -> None:
    """PyIceberg always asks ``/v1/config``; without the prefix it gave (what a client
    that skips the config call has), every path is ``/v1/namespaces/...``."""
    client = RestCatalog("bare", uri=iceberg_server.url)
    client.properties.pop("prefix")
    assert client.url("namespaces") == f"{iceberg_server.url}/v1/namespaces"
    ns = f"p{uuid.uuid4().hex[:8]}"
    client.create_namespace((ns,))
    table = client.create_table((ns, "t"), SCHEMA)
    table.append(rows([1, 2]))
    table.append(rows([3]))
    assert sorted(client.load_table((ns, "t")).scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]
    assert (ns, "t") in client.list_tables((ns,))
    with_prefix = RestCatalog("prefixed", uri=iceberg_server.url)  # asks /v1/config
    assert with_prefix.properties["prefix"] == DEFAULT
    assert with_prefix.load_table((ns, "t")).metadata_location == table.metadata_location
    client.drop_table((ns, "t"))
    client.drop_namespace((ns,))
    assert (ns,) not in with_prefix.list_namespaces()


def test_a_catalog_named_namespaces_gets_a_prefix_no_path_confuses(
    iceberg_server: Server,
) -> None:
    """``/v1/namespaces/namespaces`` is the default catalog's namespace ``namespaces``;
    the catalog ``namespaces`` is ``default~namespaces``, and a bare ``namespaces``
    prefix is a 400 wherever a path would read it as one."""
    name = "namespaces"
    body: dict[str, Any] = {"name": name}
    if iceberg_server.storage is not None:
        body["storage"] = {"root": iceberg_server.warehouse(name).as_uri()}
    catalogs = f"{iceberg_server.url}/api/v1/tenants/{TENANT}/catalogs"
    assert requests.post(catalogs, json=body, timeout=60).status_code == 201
    config = requests.get(f"{iceberg_server.url}/v1/config?warehouse={name}", timeout=60).json()
    prefix = config["overrides"]["prefix"]
    assert prefix == f"{TENANT}~{name}"
    bare = Bare(iceberg_server.url)
    bare.call("POST", f"/{prefix}/namespaces", 200, json={"namespace": ["inside"]})
    assert bare.call("GET", f"/{prefix}/namespaces", 200).json()["namespaces"] == [["inside"]]
    # the default catalog's namespace called "namespaces"
    bare.call("POST", "/namespaces", 200, json={"namespace": [name]})
    assert bare.call("GET", f"/namespaces/{name}", 200).json()["namespace"] == [name]
    # a bare "namespaces" prefix: 400 (this POST matches no route without a prefix)
    reply = requests.post(
        f"{iceberg_server.url}/v1/{name}/namespaces", json={"namespace": ["x"]}, timeout=60
    )
    assert_error(reply, 400)
    assert bare.call("GET", f"/{prefix}/namespaces", 200).json()["namespaces"] == [["inside"]]
    bare.call("DELETE", f"/namespaces/{name}", 204)
