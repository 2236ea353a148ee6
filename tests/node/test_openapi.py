"""The API descriptions a real node serves: both are valid OpenAPI 3.1 documents, and
together they describe every route the app registers (routes added later included:
the walk is over the app's own router, in embedded and in cluster mode)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from openapi_spec_validator import validate

from harness.node import NodeProcess
from metastore.config.server_config import ServerConfig
from metastore.http.documents import build
from metastore.http.openapi import component_schemas, normalized, openapi_path
from metastore.http.validation import validator
from metastore.node.app import create_app
from metastore.util.resources import schemas_dir

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 30
SCHEMA_REF = "#/components/schemas/"


@pytest.fixture(scope="module")
def documents(node: NodeProcess) -> tuple[dict[str, Any], dict[str, Any]]:
    """(native, Iceberg) as the node serves them."""
    native = requests.get(node.url + "/api/v1/openapi.json", timeout=TIMEOUT)
    assert native.status_code == 200 and native.headers["Content-Type"].startswith(
        "application/json"
    )
    iceberg = requests.get(node.url + "/v1/openapi.yaml", timeout=TIMEOUT)
    assert iceberg.status_code == 200 and "yaml" in iceberg.headers["Content-Type"]
    assert iceberg.text.startswith("#\n# Licensed to the Apache Software Foundation")
    return native.json(), yaml.safe_load(iceberg.text)


@pytest.fixture(scope="module")
def cluster_documents(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The native document of a cluster-mode app (built from its router; never started)."""
    root = tmp_path_factory.mktemp("cluster-docs")
    config = ServerConfig(
        data_dir=root / "data", kafka="127.0.0.1:9", warehouse=(root / "wh").as_uri()
    )
    native, _ = build(create_app(config))
    yield json.loads(native)


def operations_of(document: dict[str, Any]) -> set[tuple[str, str]]:
    methods = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}
    return {
        (method, normalized(path))
        for path, item in document["paths"].items()
        for method in item
        if method in methods
    }


def registered(config: ServerConfig) -> set[tuple[str, str]]:
    """Every (method, path) of the app's router, aiohttp's HEAD twins of GET routes aside."""
    app = create_app(config)
    routes = {
        (r.method.lower(), normalized(openapi_path(r.resource)))
        for r in app.router.routes()
        if r.resource is not None
    }
    return {(m, p) for m, p in routes if not (m == "head" and ("get", p) in routes)}


def test_both_documents_are_valid_openapi_3_1(
    documents: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    native, iceberg = documents
    for document in (native, iceberg):
        assert document["openapi"].startswith("3.1"), document["openapi"]
        validate(document)


def test_every_route_of_the_app_is_described_once(
    documents: tuple[dict[str, Any], dict[str, Any]],
    cluster_documents: dict[str, Any],
    tmp_path: Path,
) -> None:
    native, iceberg = documents
    in_native, in_iceberg = operations_of(native), operations_of(iceberg)
    routes = registered(ServerConfig(data_dir=tmp_path))
    missing = sorted(r for r in routes if r not in in_native and r not in in_iceberg)
    assert not missing, f"routes no document describes: {missing}"
    twice = sorted(in_native & in_iceberg)
    assert not twice, f"routes described by both documents: {twice}"
    # the node-to-node routes of a cluster node are described too
    cluster = registered(ServerConfig(data_dir=tmp_path, kafka="127.0.0.1:9", warehouse="s3://w"))
    internal = {r for r in cluster if r[1].startswith("/internal/")}
    assert internal and internal <= operations_of(cluster_documents), internal
    # nothing is described that the app does not serve (HEAD answers on every GET path)
    served = routes | {("head", p) for m, p in routes if m == "get"}
    assert in_native <= served and in_iceberg <= served, sorted((in_native | in_iceberg) - served)


def test_the_iceberg_document_is_the_published_one_narrowed(
    documents: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    _, iceberg = documents
    shipped = schemas_dir() / "iceberg"
    assert (shipped / "LICENSE").is_file() and (shipped / "NOTICE").is_file()
    spec = "rest-catalog-open-api.yaml"
    assert (shipped / spec).read_bytes() == (REPO / "tests/iceberg/spec" / spec).read_bytes()
    published = yaml.safe_load((shipped / spec).read_text())
    assert set(iceberg["paths"]) <= set(published["paths"])
    assert "/v1/{prefix}/namespaces/{namespace}/tables/{table}" in iceberg["paths"]
    table = iceberg["paths"]["/v1/{prefix}/namespaces/{namespace}/tables/{table}"]
    assert {"get", "post", "delete", "head"} <= set(table), sorted(table)
    # the published document names operations this node does not serve: left out
    planned = "/v1/{prefix}/namespaces/{namespace}/tables/{table}/plan"
    assert planned in published["paths"] and planned not in iceberg["paths"]
    assert iceberg["info"]["license"]["name"] == "Apache 2.0"


def test_request_bodies_are_the_schemas_the_server_validates_with(
    documents: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    native, _ = documents
    components = native["components"]["schemas"]

    def body(path: str, method: str) -> tuple[str, bool]:
        request = native["paths"][path][method]["requestBody"]
        schema = request["content"]["application/json"]["schema"]
        return schema["$ref"].removeprefix(SCHEMA_REF), request["required"]

    catalog = "/api/v1/tenants/{tenant}/catalogs/{catalog}"
    assert body(catalog + "/namespaces", "post") == ("create_namespace", True)
    assert body(catalog + "/properties", "post") == ("update_properties", True)
    assert body(catalog + "/gc/expire", "post") == ("gc_expire", False)  # optional body
    assert "requestBody" not in native["paths"][catalog + "/namespaces"]["get"]
    # one source of truth: each component is the file the server validates with
    for name in (p.stem for p in (schemas_dir() / "api").glob("*.json")):
        assert components[name] == component_schemas()[name]
        original = validator(name).schema
        assert (
            components[name].get("properties", {}).keys() == original.get("properties", {}).keys()
        ), name
    # and every reference inside resolves within the document
    text = json.dumps(components)
    for ref in {part.split('"')[0] for part in text.split('"$ref": "')[1:]}:
        node: Any = native
        for step in ref.removeprefix("#/").split("/"):
            node = node[step]
        assert isinstance(node, dict), ref
