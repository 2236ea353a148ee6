"""PyIceberg's own client, unchanged, against the node: the issue's end-to-end scenarios."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlparse

import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import (
    BadRequestError,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.types import LongType

from tests.iceberg.conftest import Server
from tests.iceberg.support import BY_REGION, SCHEMA, Http, assert_error, rows

SCHEMA_JSON = json.loads(SCHEMA.model_dump_json())


def _path(uri: str) -> Path:
    return Path(urlparse(uri).path)


def test_config_names_the_catalog_and_its_endpoints(
    iceberg_server: Server, catalog_name: str
) -> None:
    client = iceberg_server.client(catalog_name)
    assert client.properties["prefix"] == catalog_name
    endpoints = {str(e) for e in client._supported_endpoints}
    assert "HEAD /v1/{prefix}/namespaces/{namespace}" in endpoints
    assert "GET /v1/{prefix}/namespaces/{namespace}/views/{view}" in endpoints
    default = RestCatalog("d", uri=iceberg_server.url)  # no warehouse: the default catalog
    assert default.properties["prefix"] == "default"
    with pytest.raises(Exception, match="NoSuchWarehouse"):
        iceberg_server.client("no-such-catalog")


def test_namespace_tree(catalog: RestCatalog) -> None:
    catalog.create_namespace(("sales",), {"owner": "ana"})
    catalog.create_namespace(("sales", "eu"))
    catalog.create_namespace(("sales", "eu", "fr"), {"level": "3"})
    catalog.create_namespace(("hr",))
    with pytest.raises(NamespaceAlreadyExistsError):
        catalog.create_namespace(("sales",))
    assert catalog.list_namespaces() == [("hr",), ("sales",)]
    assert catalog.list_namespaces(("sales",)) == [("sales", "eu")]
    assert catalog.list_namespaces(("sales", "eu")) == [("sales", "eu", "fr")]
    assert catalog.load_namespace_properties(("sales", "eu", "fr")) == {"level": "3"}
    assert catalog.namespace_exists(("sales", "eu"))
    assert not catalog.namespace_exists(("sales", "us"))
    with pytest.raises(NoSuchNamespaceError):
        catalog.list_namespaces(("nope",))

    summary = catalog.update_namespace_properties(
        ("sales",), removals={"owner", "absent"}, updates={"team": "bi"}
    )
    assert (summary.removed, summary.updated, summary.missing) == (["owner"], ["team"], ["absent"])
    assert catalog.load_namespace_properties(("sales",)) == {"team": "bi"}

    with pytest.raises(NamespaceNotEmptyError):
        catalog.drop_namespace(("sales", "eu"))
    catalog.drop_namespace(("sales", "eu", "fr"))
    catalog.drop_namespace(("sales", "eu"))
    assert catalog.list_namespaces(("sales",)) == []
    with pytest.raises(NoSuchNamespaceError):
        catalog.drop_namespace(("sales", "eu"))


def test_partitioned_table_append_and_scan(
    iceberg_server: Server, catalog_name: str, catalog: RestCatalog
) -> None:
    catalog.create_namespace(("db",))
    table = catalog.create_table(("db", "events"), SCHEMA, partition_spec=BY_REGION)
    assert table.spec().fields[0].name == "region"
    table.append(rows([1, 2, 3], "eu"))
    table.append(rows([4, 5], "us"))

    loaded = catalog.load_table(("db", "events"))
    data = loaded.scan().to_arrow().sort_by("id").to_pydict()
    assert data == {"id": [1, 2, 3, 4, 5], "region": ["eu", "eu", "eu", "us", "us"]}
    assert len(loaded.metadata.snapshots) == 2
    eu_only = loaded.scan(row_filter="region == 'eu'").to_arrow()
    assert sorted(eu_only["id"].to_pylist()) == [1, 2, 3]

    # The metadata file the server wrote is the metadata it serves.
    written = json.loads(_path(loaded.metadata_location).read_text())
    assert written["table-uuid"] == str(loaded.metadata.table_uuid)
    assert written["current-snapshot-id"] == loaded.metadata.current_snapshot_id
    assert _path(loaded.location()).is_relative_to(iceberg_server.warehouse(catalog_name))
    assert len(written["metadata-log"]) == 2  # create, then two appends


def test_schema_evolution_and_properties(catalog: RestCatalog) -> None:
    catalog.create_namespace(("db",))
    table = catalog.create_table(("db", "t"), SCHEMA, properties={"keep": "1", "drop": "2"})
    table.append(rows([1]))
    with table.update_schema() as update:
        update.add_column("amount", LongType())
        update.rename_column("region", "area")
    table = catalog.load_table(("db", "t"))
    assert [f.name for f in table.schema().fields] == ["id", "area", "amount"]
    assert len(table.metadata.schemas) == 2

    table.transaction().set_properties(added="3").remove_properties("drop").commit_transaction()
    table = catalog.load_table(("db", "t"))
    assert {k: v for k, v in table.properties.items() if k in ("keep", "drop", "added")} == {
        "keep": "1",
        "added": "3",
    }
    assert table.scan().to_arrow().to_pydict() == {"id": [1], "area": ["eu"], "amount": [None]}


def test_rename(catalog: RestCatalog) -> None:
    catalog.create_namespace(("a",))
    catalog.create_namespace(("b",))
    table = catalog.create_table(("a", "t"), SCHEMA)
    table.append(rows([7]))
    catalog.create_table(("b", "taken"), SCHEMA)
    renamed = catalog.rename_table(("a", "t"), ("b", "moved"))
    assert renamed.scan().to_arrow()["id"].to_pylist() == [7]
    assert renamed.location() == table.location()  # a rename moves no files
    assert catalog.list_tables(("a",)) == []
    with pytest.raises(NoSuchTableError):
        catalog.load_table(("a", "t"))
    with pytest.raises(TableAlreadyExistsError):
        catalog.rename_table(("b", "moved"), ("b", "taken"))
    with pytest.raises(NoSuchTableError):
        catalog.rename_table(("a", "gone"), ("b", "x"))


def test_listing_over_several_pages(iceberg_server: Server, catalog_name: str) -> None:
    client = iceberg_server.client(catalog_name, **{"rest-page-size": "3"})
    for i in range(7):
        client.create_namespace((f"ns{i}",))
    for i in range(8):
        client.create_table(("ns0", f"t{i}"), SCHEMA)
    assert client.list_namespaces() == [(f"ns{i}",) for i in range(7)]
    assert client.list_tables(("ns0",)) == [("ns0", f"t{i}") for i in range(8)]
    http = Http(iceberg_server.url, catalog_name)
    first = http.call("GET", "/namespaces/ns0/tables", params={"pageSize": 3}).json()
    assert len(first["identifiers"]) == 3 and first["next-page-token"]


def test_a_listing_without_a_page_token_holds_every_item(
    iceberg_server: Server, catalog_name: str
) -> None:
    """Without ``pageToken`` (nor ``pageSize``) a server that pages must answer everything
    at once, past its default page of 100; with either, one page and a token."""
    http = Http(iceberg_server.url, catalog_name)
    names = [f"n{i:03}" for i in range(130)]
    for name in names:
        assert http.call("POST", "/namespaces", json={"namespace": [name]}).status_code == 200
    for i in range(105):
        body = {"name": f"t{i:03}", "schema": SCHEMA_JSON}
        assert http.call("POST", "/namespaces/n000/tables", json=body).status_code == 200
    everything = http.call("GET", "/namespaces").json()
    assert [n[0] for n in everything["namespaces"]] == names
    assert everything["next-page-token"] is None
    tables = http.call("GET", "/namespaces/n000/tables").json()
    assert len(tables["identifiers"]) == 105 and tables["next-page-token"] is None
    for paged in ({"pageToken": ""}, {"pageSize": "100"}):
        page = http.call("GET", "/namespaces", params=paged).json()
        assert len(page["namespaces"]) == 100 and page["next-page-token"], paged


def test_drop_with_and_without_purge(catalog: RestCatalog) -> None:
    catalog.create_namespace(("db",))
    kept = catalog.create_table(("db", "kept"), SCHEMA)
    kept.append(rows([1, 2]))
    purged = catalog.create_table(("db", "purged"), SCHEMA)
    purged.append(rows([3]))
    kept_files = {p for p in _path(kept.location()).rglob("*") if p.is_file()}
    purged_files = {p for p in _path(purged.location()).rglob("*") if p.is_file()}
    assert any(p.suffix == ".parquet" for p in purged_files)

    catalog.drop_table(("db", "kept"))
    catalog.purge_table(("db", "purged"))
    assert catalog.list_tables(("db",)) == []
    assert all(p.exists() for p in kept_files)
    assert not any(p.exists() for p in purged_files)
    with pytest.raises(NoSuchTableError):
        catalog.drop_table(("db", "kept"))


def test_register_an_existing_table(
    iceberg_server: Server, catalog_name: str, catalog: RestCatalog
) -> None:
    catalog.create_namespace(("db",))
    table = catalog.create_table(("db", "orig"), SCHEMA)
    table.append(rows([1, 2, 3]))
    location = catalog.load_table(("db", "orig")).metadata_location
    catalog.drop_table(("db", "orig"))

    catalog.create_namespace(("elsewhere",))
    with pytest.raises(BadRequestError, match="kept for undrop"):  # only in its namespace
        catalog.register_table(("elsewhere", "again"), location)
    registered = catalog.register_table(("db", "again"), location)
    assert registered.metadata_location == location
    assert sorted(registered.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]
    registered.append(rows([4]))
    assert len(catalog.load_table(("db", "again")).scan().to_arrow()) == 4
    with pytest.raises(TableAlreadyExistsError):
        catalog.register_table(("db", "again"), location)

    http = Http(iceberg_server.url, catalog_name)
    outside = http.call(
        "POST",
        "/namespaces/db/register",
        json={"name": "evil", "metadata-location": "file:///etc/passwd"},
    )
    assert_error(outside, 400)


def test_transaction_with_several_updates(catalog: RestCatalog) -> None:
    catalog.create_namespace(("db",))
    table = catalog.create_table(("db", "t"), SCHEMA)
    before = table.metadata_location
    with table.transaction() as tx:
        tx.set_properties(owner="bi")
        with tx.update_schema() as update:
            update.add_column("amount", LongType())
        tx.append(rows([1, 2]).append_column("amount", __import__("pyarrow").array([5, 6])))
    table = catalog.load_table(("db", "t"))
    assert table.properties["owner"] == "bi"
    assert len(table.metadata.snapshots) == 1
    assert sorted(table.scan().to_arrow()["amount"].to_pylist()) == [5, 6]
    assert [e.metadata_file for e in table.metadata.metadata_log] == [before]  # one commit


def test_stage_create_then_commit(catalog: RestCatalog) -> None:
    catalog.create_namespace(("db",))
    tx = catalog.create_table_transaction(("db", "staged"), SCHEMA, properties={"p": "1"})
    assert not catalog.table_exists(("db", "staged"))
    tx.append(rows([10, 11]))
    tx.commit_transaction()
    table = catalog.load_table(("db", "staged"))
    assert table.properties["p"] == "1"
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [10, 11]


def test_load_with_only_referenced_snapshots(
    iceberg_server: Server, catalog_name: str, catalog: RestCatalog
) -> None:
    catalog.create_namespace(("db",))
    table = catalog.create_table(("db", "t"), SCHEMA)
    for i in range(3):
        table.append(rows([i]))
    http = Http(iceberg_server.url, catalog_name)
    path = http.table_path(("db",), "t")
    everything = http.call("GET", path, params={"snapshots": "all"}).json()["metadata"]
    referenced = http.call("GET", path, params={"snapshots": "refs"}).json()["metadata"]
    assert len(everything["snapshots"]) == len(everything["snapshot-log"]) == 3
    assert [s["snapshot-id"] for s in referenced["snapshots"]] == [
        everything["current-snapshot-id"]
    ]
    # the log keeps only the entries of the snapshots answered (as Iceberg's own catalog)
    assert referenced["snapshot-log"] == everything["snapshot-log"][-1:]
    refs = iceberg_server.client(catalog_name, **{"snapshot-loading-mode": "refs"})
    table = refs.load_table(("db", "t"))
    assert len(table.metadata.snapshot_log) == len(table.metadata.snapshots) == 1
    table.append(rows([3]))  # a client that loaded only the referenced snapshots appends
    assert sorted(refs.load_table(("db", "t")).scan().to_arrow()["id"].to_pylist()) == [0, 1, 2, 3]
    assert_error(http.call("GET", path, params={"snapshots": "some"}), 400)
