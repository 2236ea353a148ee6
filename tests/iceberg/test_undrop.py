"""Soft drop and undrop through real PyIceberg, on an embedded node and on a cluster.

A drop without purge keeps the table or view (no longer loadable or listed), lists it
with ``?include-dropped=true`` on the native API, and restores it with ``.../undrop``
with its metadata and data; a reused name is a 409, a purge or a restore leaves nothing
to undrop (404), and the catalog's ``drop.retention-ms`` decides when the node's
expiry (the garbage collection job's last step) collects it and purges its files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import BadRequestError, NoSuchTableError, NoSuchViewError

from tests.iceberg.conftest import TENANT, Server
from tests.iceberg.support import SCHEMA, assert_error, rows
from tests.iceberg.test_views import _version


class Native:
    """The native API of one catalog."""

    def __init__(self, url: str, catalog: str) -> None:
        self.base = f"{url}/api/v1/tenants/{TENANT}/catalogs/{catalog}"

    def call(self, method: str, path: str, body: Any = None) -> requests.Response:
        return requests.request(method, self.base + path, json=body, timeout=60)

    def ok(self, method: str, path: str, body: Any = None, status: int = 200) -> Any:
        reply = self.call(method, path, body)
        assert reply.status_code == status, reply.text
        return reply.json() if reply.content else None

    def dropped(self, kind: str = "tables", namespace: str = "db") -> list[dict[str, Any]]:
        listed = self.ok("GET", f"/namespaces/{namespace}/{kind}?include-dropped=true")
        found: list[dict[str, Any]] = listed["dropped"]
        return found

    def undrop(self, name: str, kind: str = "tables", body: Any = None) -> requests.Response:
        return self.call("POST", f"/namespaces/db/{kind}/{name}/undrop", body)

    def retention(self, ms: int) -> None:
        self.ok("POST", "/properties", {"updates": {"drop.retention-ms": str(ms)}})

    def expire(self) -> dict[str, Any]:
        found: dict[str, Any] = self.ok("POST", "/gc/expire", {})
        return found


def _files(location: str) -> set[Path]:
    return {p for p in Path(urlparse(location).path).rglob("*") if p.is_file()}


def test_a_dropped_table_is_listed_and_undropped_with_its_data(
    iceberg_server: Server, catalog_name: str, catalog: RestCatalog
) -> None:
    native = Native(iceberg_server.url, catalog_name)
    catalog.create_namespace(("db",))
    table = catalog.create_table(("db", "orders"), SCHEMA)
    table.append(rows([1, 2, 3]))
    before = catalog.load_table(("db", "orders"))
    files = _files(before.metadata.location)

    catalog.drop_table(("db", "orders"))  # no purge: kept
    with pytest.raises(NoSuchTableError):
        catalog.load_table(("db", "orders"))
    assert catalog.list_tables(("db",)) == []
    assert native.ok("GET", "/namespaces/db/tables")["tables"] == []
    assert "dropped" not in native.ok("GET", "/namespaces/db/tables")
    (kept,) = native.dropped()
    assert kept["name"] == "orders" and kept["namespace"] == ["db"]
    assert kept["dropped-by"] == "anonymous" and kept["dropped-at-ms"] > 0
    assert "metastore.engine.dropped-by" not in kept["properties"]
    assert _files(before.metadata.location) == files  # nothing deleted

    restored = native.undrop("orders")
    assert restored.status_code == 200, restored.text
    assert restored.json()["entity-id"] == kept["entity-id"]
    assert native.dropped() == []
    loaded = catalog.load_table(("db", "orders"))
    assert loaded.metadata_location == before.metadata_location
    assert loaded.metadata.table_uuid == before.metadata.table_uuid
    assert loaded.current_snapshot() == before.current_snapshot()
    assert loaded.properties == before.properties
    assert sorted(loaded.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]
    loaded.append(rows([4]))  # live again: commits go on
    assert catalog.load_table(("db", "orders")).scan().to_arrow().num_rows == 4

    assert_error(native.undrop("orders"), 404, "NoSuchTableException")  # restored already


def test_a_reused_name_is_a_conflict_and_each_dropped_instance_stays_addressable(
    iceberg_server: Server, catalog_name: str, catalog: RestCatalog
) -> None:
    native = Native(iceberg_server.url, catalog_name)
    catalog.create_namespace(("db",))
    catalog.create_table(("db", "t"), SCHEMA).append(rows([1]))
    first = catalog.load_table(("db", "t")).metadata.location
    catalog.drop_table(("db", "t"))
    second = catalog.create_table(("db", "t"), SCHEMA)  # the name is free at once
    second.append(rows([10, 20]))
    assert second.metadata.location == first  # the kept one yields its very location
    assert_error(native.undrop("t"), 409, "AlreadyExistsException")  # the name is taken
    (old,) = native.dropped()
    assert_error(native.undrop("t", body={"entity-id": old["entity-id"]}), 409)

    catalog.drop_table(("db", "t"))
    newest, oldest = native.dropped()  # dropped last first
    assert oldest["entity-id"] == old["entity-id"] and newest["location"] == second.location()
    # the newest drop of the name owns the location: the older one cannot take it back
    assert_error(native.undrop("t", body={"entity-id": old["entity-id"]}), 409)
    picked = native.undrop("t", body={"entity-id": newest["entity-id"]})
    assert picked.status_code == 200, picked.text
    assert catalog.load_table(("db", "t")).scan().to_arrow()["id"].to_pylist() == [10, 20]
    assert [d["entity-id"] for d in native.dropped()] == [old["entity-id"]]
    assert_error(native.undrop("t", body={"entity-id": "12345"}), 404)
    assert_error(native.undrop("t", body={"entity-id": 12345}), 400)  # ids are strings


def test_a_renamed_away_tables_location_still_gives_a_new_table_its_own(
    catalog: RestCatalog,
) -> None:
    """Only a kept (dropped) table yields its location: a live one renamed away keeps it,
    so a new table of the old name gets a location of its own."""
    catalog.create_namespace(("mv",))
    moved = catalog.create_table(("mv", "a"), SCHEMA)
    catalog.rename_table(("mv", "a"), ("mv", "b"))
    fresh = catalog.create_table(("mv", "a"), SCHEMA)
    assert fresh.metadata.location != moved.metadata.location


def test_a_purged_table_cannot_be_undropped(
    iceberg_server: Server, catalog_name: str, catalog: RestCatalog
) -> None:
    native = Native(iceberg_server.url, catalog_name)
    catalog.create_namespace(("db",))
    table = catalog.create_table(("db", "gone"), SCHEMA)
    table.append(rows([1]))
    location = table.metadata.location
    catalog.purge_table(("db", "gone"))
    assert native.dropped() == []
    assert_error(native.undrop("gone"), 404, "NoSuchTableException")
    assert not any(p.suffix == ".parquet" for p in _files(location))  # purge stays immediate


def test_views_and_native_entities_are_kept_and_undropped(
    iceberg_server: Server, catalog_name: str, catalog: RestCatalog
) -> None:
    native = Native(iceberg_server.url, catalog_name)
    catalog.create_namespace(("db",))
    catalog.create_view(("db", "v"), SCHEMA, _version("SELECT 1"))
    catalog.drop_view(("db", "v"))
    with pytest.raises(NoSuchViewError):
        catalog.load_view(("db", "v"))
    assert [v["name"] for v in native.dropped("views")] == ["v"]
    assert native.undrop("v", "views").status_code == 200
    assert catalog.load_view(("db", "v")).metadata.versions[0].representations[0].root.sql == (
        "SELECT 1"
    )

    native.ok("POST", "/namespaces/db/tables", {"name": "n", "properties": {"a": "1"}}, 201)
    assert native.call("DELETE", "/namespaces/db/tables/n").status_code == 204
    assert_error(native.call("GET", "/namespaces/db/tables/n"), 404, "NoSuchTableException")
    (kept,) = native.dropped()
    assert kept["properties"] == {"a": "1"}
    assert_error(native.undrop("n", "views"), 404, "NoSuchViewException")  # a table's name
    restored = native.undrop("n").json()
    assert restored["properties"] == {"a": "1"} and restored["version"] == kept["version"] + 1
    assert native.ok("GET", "/namespaces/db/tables/n")["properties"] == {"a": "1"}
    commits = native.ok("GET", "/commits?pageSize=2")["commits"]
    assert [c["operation"] for c in commits] == ["undrop table", "drop table"]
    assert_error(native.call("GET", "/namespaces/db/tables?include-dropped=maybe"), 400)


def test_the_expiry_keeps_a_dropped_table_within_its_retention_and_collects_it_after(
    iceberg_server: Server, catalog_name: str, catalog: RestCatalog
) -> None:
    native = Native(iceberg_server.url, catalog_name)
    assert_error(
        native.call("POST", "/properties", {"updates": {"drop.retention-ms": "a week"}}), 400
    )
    catalog.create_namespace(("db",))
    table = catalog.create_table(("db", "t"), SCHEMA)
    table.append(rows([1, 2]))
    location = table.metadata.location
    files = _files(location)
    catalog.drop_table(("db", "t"))

    assert native.expire()["collected"] == 0  # within the default 7 days
    assert _files(location) == files
    native.retention(3_600_000)
    assert native.expire()["collected"] == 0
    assert _files(location) == files and len(native.dropped()) == 1

    native.retention(0)  # everything dropped is past it now
    assert native.expire()["collected"] == 1
    assert native.dropped() == []
    assert_error(native.undrop("t"), 404)
    assert not any(p.suffix in (".parquet", ".avro") for p in _files(location)), _files(location)
    assert native.expire()["collected"] == 0
    again = catalog.create_table(("db", "t2"), SCHEMA, location=location)  # location freed
    assert again.metadata.location == location


def test_a_dropped_tables_location_yields_to_a_register_of_its_metadata(
    iceberg_server: Server, catalog_name: str, catalog: RestCatalog
) -> None:
    """Drop without purge, then register the same metadata under another name of its
    namespace (how tables move between names): the dropped one's location yields to the
    live one, it cannot be undropped while that one holds it, and its collection keeps
    their files. In another namespace the register (or a create there) is a 400: whoever
    may create only elsewhere in the catalog does not get the dropped table's files."""
    native = Native(iceberg_server.url, catalog_name)
    catalog.create_namespace(("db",))
    catalog.create_namespace(("scratch",))
    catalog.create_table(("db", "orig"), SCHEMA).append(rows([1, 2, 3]))
    metadata_location = catalog.load_table(("db", "orig")).metadata_location
    location = catalog.load_table(("db", "orig")).metadata.location
    catalog.drop_table(("db", "orig"))
    with pytest.raises(BadRequestError, match="kept for undrop"):
        catalog.register_table(("scratch", "orig"), metadata_location)
    with pytest.raises(BadRequestError, match="kept for undrop"):
        catalog.create_table(("scratch", "grab"), SCHEMA, location=location)
    again = catalog.register_table(("db", "again"), metadata_location)
    assert_error(native.undrop("orig"), 409, "AlreadyExistsException")  # its location is taken

    native.retention(0)
    assert native.expire()["collected"] == 1  # its purge keeps what the live table holds
    assert sorted(again.refresh().scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]
    assert_error(native.undrop("orig"), 404)


def test_a_purge_of_a_table_registered_from_a_dropped_ones_metadata_keeps_its_files(
    iceberg_server: Server, catalog_name: str, catalog: RestCatalog
) -> None:
    """Drop (kept), register its metadata under another name (the location yields), purge
    that one: the location goes back to the kept table, so the purge deletes none of the
    files it shares with it, and the kept table undrops and reads its rows. Before, the
    purge let the location go free and deleted every file the kept table needed, and its
    undrop still answered 200."""
    native = Native(iceberg_server.url, catalog_name)
    catalog.create_namespace(("db",))
    catalog.create_table(("db", "t"), SCHEMA).append(rows([1, 2]))
    table = catalog.load_table(("db", "t"))
    files = _files(table.metadata.location)
    catalog.drop_table(("db", "t"))
    copy = catalog.register_table(("db", "t2"), table.metadata_location)
    assert copy.metadata.location == table.metadata.location
    catalog.purge_table(("db", "t2"))
    assert files <= _files(table.metadata.location)
    native.ok("POST", "/namespaces/db/tables/t/undrop")
    assert sorted(catalog.load_table(("db", "t")).scan().to_arrow()["id"].to_pylist()) == [1, 2]
    # the location is the undropped table's again: a purge of it deletes its files
    catalog.purge_table(("db", "t"))
    assert not any(p.suffix == ".parquet" for p in _files(table.metadata.location))


def test_a_register_racing_a_purge_of_its_metadata_never_gets_purged_files(
    iceberg_server: Server, catalog_name: str, catalog: RestCatalog
) -> None:
    """A purge of a table with many snapshots, and a client registering that table's
    metadata file over and over meanwhile: each register is refused (the location is
    being purged, or its metadata file is gone) or wins before the purge reads what is
    held, and then the registered table keeps every file. Before, a register committed
    while the purge deleted got a table whose manifests were gone."""
    import threading

    catalog.create_namespace(("db",))
    table = catalog.create_table(("db", "big"), SCHEMA)
    for i in range(30):
        table.append(rows([i]))
    table = catalog.load_table(("db", "big"))
    client = RestCatalog("racer", uri=iceberg_server.url, warehouse=catalog_name)
    outcomes: list[str] = []
    done = threading.Event()

    def register() -> None:
        while not done.is_set():
            try:
                client.register_table(("db", "again"), table.metadata_location)
            except Exception as exc:  # refused: the race goes on until the purge ends
                outcomes.append(type(exc).__name__)
            else:
                outcomes.append("registered")
                return

    racer = threading.Thread(target=register)
    racer.start()
    try:
        catalog.purge_table(("db", "big"))
    finally:
        done.set()
        racer.join(60)
    if "registered" in outcomes:  # it won before the purge read what is held: all kept
        again = catalog.load_table(("db", "again"))
        assert sorted(again.scan().to_arrow()["id"].to_pylist()) == list(range(30))
    assert not {"ServerError", "InternalServerError"} & set(outcomes), outcomes
