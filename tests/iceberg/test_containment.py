"""Storage containment: no request makes the server read, write or delete a file outside
the table it names, and two live tables or views never share (or nest) a location.

Every attack here is a real request to a real node; the victims are real files: the
tables of another catalog and files outside the warehouse, checked on disk afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.table import Table

from tests.iceberg.conftest import Server
from tests.iceberg.support import SCHEMA, Http, assert_error, rows

SCHEMA_JSON = json.loads(SCHEMA.model_dump_json())
T = ("db", "t")
TABLE = "/namespaces/db/tables/t"


def _path(uri: str) -> Path:
    return Path(urlparse(uri).path)


def _files(location: str) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in _path(location).rglob("*") if p.is_file()}


def _climb(table: Table, target: Path) -> str:
    """``target`` spelled as a path under the table's location that climbs out with ``..``."""
    return table.location() + "/" + os.path.relpath(target, _path(table.location()))


def _metric(server: Server, name: str) -> int:
    """A counter summed over the nodes (a cluster purges on the catalog's owner)."""
    total = 0  # not exported (yet): the assertions that follow say what was expected
    for url in server.node_urls or (server.url,):
        text = requests.get(f"{url}/metrics", timeout=30).text
        for line in text.splitlines():
            if line.startswith(name + " "):
                total += int(line.split()[1])
    return total


@pytest.fixture
def victim(iceberg_server: Server) -> Table:
    """A table with data in another catalog of the same node."""
    client = iceberg_server.client(iceberg_server.new_catalog())
    client.create_namespace(("db",))
    table = client.create_table(("db", "victim"), SCHEMA)
    table.append(rows([1, 2, 3]))
    return client.load_table(("db", "victim"))


@pytest.fixture
def outside(iceberg_server: Server) -> Path:
    """A parquet file outside every warehouse (no field ids, so PyIceberg can add it)."""
    path = iceberg_server.data_dir.parent / f"outside-{uuid.uuid4().hex[:8]}" / "keep.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(pa.table({"id": pa.array([7], pa.int64()), "region": ["x"]}), path)
    return path


def _snapshot(manifest_list: str) -> dict[str, Any]:
    return {
        "action": "add-snapshot",
        "snapshot": {
            "snapshot-id": 4242,
            "sequence-number": 1,
            "timestamp-ms": int(time.time() * 1000),
            "manifest-list": manifest_list,
            "summary": {"operation": "append"},
            "schema-id": 0,
        },
    }


# --- a. purge never escapes the table ------------------------------------------------


@pytest.mark.parametrize("spelling", ["..", "%2e%2e", "%2E%2E", "%252e%252e"])
def test_a_manifest_list_outside_the_table_is_refused_and_purge_keeps_the_victim(
    iceberg_server: Server, catalog_name: str, catalog: RestCatalog, victim: Table, spelling: str
) -> None:
    catalog.create_namespace(("db",))
    table = catalog.create_table(T, SCHEMA)
    before = _files(victim.location())
    victim_list = victim.current_snapshot().manifest_list  # type: ignore[union-attr]
    escape = _climb(table, _path(victim_list)).replace("..", spelling)
    http = Http(iceberg_server.url, catalog_name)
    head = http.head_commit()
    reply = http.call("POST", TABLE, json={"updates": [_snapshot(escape)]})
    assert_error(reply, 400)
    assert http.head_commit() == head

    reply = http.call("DELETE", TABLE, params={"purgeRequested": "true"})
    assert reply.status_code == 204, reply.text
    assert _files(victim.location()) == before
    assert victim.refresh().scan().to_arrow()["id"].to_pylist() == [1, 2, 3]


def test_purge_keeps_data_files_that_climb_or_link_out_of_the_table(
    iceberg_server: Server, catalog: RestCatalog, outside: Path
) -> None:
    """Data paths live in manifests the server reads only when purging: the purge
    normalizes them (``..``, symlinks) and keeps what lies outside, counting it."""
    catalog.create_namespace(("db",))
    table = catalog.create_table(T, SCHEMA)
    table_dir = _path(table.location())
    (table_dir / "data").mkdir(parents=True, exist_ok=True)
    os.symlink(outside.parent, table_dir / "data" / "link")
    other = outside.with_name("linked.parquet")
    other.write_bytes(outside.read_bytes())
    linked = table.location() + "/data/link/" + other.name
    own = table_dir / "data" / "region=a%2Fb" / "own.parquet"  # as Java encodes "a/b"
    own.parent.mkdir()
    own.write_bytes(outside.read_bytes())
    own_path = table.location() + "/data/" + own.parent.name + "/" + own.name
    table.add_files([_climb(table, outside), linked, own_path])
    assert len(catalog.load_table(T).scan().to_arrow()) == 3
    kept = _metric(iceberg_server, "metastore_purge_kept_total")

    catalog.purge_table(T)
    assert outside.read_bytes()[:4] == other.read_bytes()[:4] == b"PAR1"
    assert _metric(iceberg_server, "metastore_purge_kept_total") >= kept + 2
    assert not own.exists()
    assert not any(p.is_file() for p in table_dir.rglob("*")), "own files are deleted"


def test_a_location_through_a_symlink_is_refused_and_a_swapped_one_purges_nothing(
    iceberg_server: Server, catalog_name: str, catalog: RestCatalog, victim: Table
) -> None:
    """A client that writes in its own table's folder can put a link there. A table
    created through it had, by its real path, another catalog's table folder as its
    own: its metadata files were written there and its purge deleted that table's
    files. Now such a location is a 400; one swapped for a link after its create is
    refused at its next commit, and its purge deletes nothing."""
    catalog.create_namespace(("db",))
    sibling = catalog.create_table(("db", "sibling"), SCHEMA)
    sibling.append(rows([4, 5]))
    sibling_files = _files(sibling.location())
    victim_dir = _path(victim.location())
    before = _files(victim.location())
    holder = catalog.create_table(("db", "a"), SCHEMA)
    a_dir = _path(holder.location())
    a_dir.mkdir(parents=True, exist_ok=True)
    os.symlink(_path(sibling.location()), a_dir / "lnk")  # inside the catalog, by its real path
    (a_dir / "own").mkdir()
    catalog.purge_table(("db", "a"))  # frees its location; its folder and the link stay
    http = Http(iceberg_server.url, catalog_name)
    for location in (f"{holder.location()}/lnk", f"{holder.location()}/lnk/sub"):
        body = {"name": "e1", "schema": SCHEMA_JSON, "location": location}
        reply = http.call("POST", "/namespaces/db/tables", json=body)
        assert_error(reply, 400, "BadRequestException")
        assert "symbolic link" in reply.json()["error"]["message"], reply.text
    assert _files(sibling.location()) == sibling_files  # no metadata file landed there

    swapped = catalog.create_table(("db", "e2"), SCHEMA, location=f"{holder.location()}/own")
    victim_file = next(victim_dir.rglob("*.parquet"))
    statistics = {
        "snapshot-id": 1,
        "statistics-path": f"{swapped.location()}/data/{victim_file.name}",
        "file-size-in-bytes": 1,
        "file-footer-size-in-bytes": 1,
        "blob-metadata": [],
    }
    path = "/namespaces/db/tables/e2"
    reply = http.call(
        "POST", path, json={"updates": [{"action": "set-statistics", "statistics": statistics}]}
    )
    assert reply.status_code == 200, reply.text
    shutil.rmtree(a_dir / "own")  # the client swaps its folder for a link
    os.symlink(victim_dir, a_dir / "own")
    reply = http.call(
        "POST", path, json={"updates": [{"action": "set-properties", "updates": {"k": "v"}}]}
    )
    assert_error(reply, 400, "BadRequestException")
    reply = http.call("DELETE", path, params={"purgeRequested": "true"})
    assert reply.status_code == 204, reply.text
    assert _files(victim.location()) == before
    assert victim.refresh().scan().to_arrow()["id"].to_pylist() == [1, 2, 3]


def test_register_refuses_metadata_whose_paths_leave_the_table(
    iceberg_server: Server, catalog_name: str, catalog: RestCatalog, victim: Table
) -> None:
    catalog.create_namespace(("db",))
    donor = catalog.create_table(("db", "donor"), SCHEMA)
    donor.append(rows([1]))
    metadata = json.loads(_path(catalog.load_table(("db", "donor")).metadata_location).read_text())
    catalog.drop_table(("db", "donor"))  # its location is free: a register may take it
    http = Http(iceberg_server.url, catalog_name)
    escape = _climb(donor, _path(victim.metadata_location))
    forged = {
        "metadata-log": [*metadata["metadata-log"], {"metadata-file": escape, "timestamp-ms": 1}]
    }
    for name, change in [
        ("log", forged),
        ("props", {"properties": {"write.metadata.path": victim.location()}}),
        ("elsewhere", {"location": victim.location()}),
    ]:
        path = _path(donor.location()) / "metadata" / f"forged-{name}.metadata.json"
        path.write_text(json.dumps({**metadata, **change}))
        body = {"name": f"copy-{name}", "metadata-location": path.as_uri()}
        assert_error(http.call("POST", "/namespaces/db/register", json=body), 400)
    assert catalog.list_tables(("db",)) == []
    assert victim.refresh().scan().to_arrow()["id"].to_pylist() == [1, 2, 3]


@pytest.mark.parametrize(
    "location",
    [
        "ROOT/db/%2e%2e/%2e%2e/OTHER/db/x",
        "ROOT/db/x/%2E%2E/%2E%2E/%2E%2E/OTHER",
        "ROOT/db/a%2Fb",
        "ROOT/../OTHER/db/x",
        "ROOT",
        "file:///tmp/elsewhere",
        "relative/path",
    ],
)
def test_locations_that_leave_the_catalog_are_refused(
    iceberg_server: Server, catalog_name: str, catalog: RestCatalog, location: str
) -> None:
    catalog.create_namespace(("db",))
    catalog.create_table(T, SCHEMA)
    http = Http(iceberg_server.url, catalog_name)
    other = iceberg_server.new_catalog()
    root = iceberg_server.warehouse(catalog_name).as_uri()
    location = location.replace("ROOT", root).replace("OTHER", other)
    head = http.head_commit()
    create = {"name": "x", "schema": SCHEMA_JSON, "location": location}
    assert_error(http.call("POST", "/namespaces/db/tables", json=create), 400)
    move = {"updates": [{"action": "set-location", "location": location}]}
    assert_error(http.call("POST", TABLE, json=move), 400)
    view = {**create, "view-version": _view_version(), "properties": {}}
    assert_error(http.call("POST", "/namespaces/db/views", json=view), 400)
    assert http.head_commit() == head
    assert not (iceberg_server.warehouse(other)).exists()


def _view_version() -> dict[str, Any]:
    return {
        "version-id": 1,
        "timestamp-ms": int(time.time() * 1000),
        "schema-id": 0,
        "summary": {},
        "representations": [{"type": "sql", "sql": "select 1", "dialect": "spark"}],
        "default-namespace": ["db"],
    }


# --- b. locations are unique and not nested ------------------------------------------


def test_registering_a_live_tables_metadata_is_refused(
    iceberg_server: Server, catalog_name: str, catalog: RestCatalog
) -> None:
    catalog.create_namespace(("db",))
    original = catalog.create_table(("db", "orig"), SCHEMA)
    original.append(rows([1, 2]))
    original = catalog.load_table(("db", "orig"))
    before = _files(original.location())
    http = Http(iceberg_server.url, catalog_name)
    body = {"name": "copy", "metadata-location": original.metadata_location}
    reply = http.call("POST", "/namespaces/db/register", json=body)
    assert_error(reply, 400)
    assert "unique and not nested" in reply.json()["error"]["message"]
    purge = http.call("DELETE", "/namespaces/db/tables/copy", params={"purgeRequested": "true"})
    assert_error(purge, 404)
    assert _files(original.location()) == before
    assert len(catalog.load_table(("db", "orig")).scan().to_arrow()) == 2


def test_tables_and_views_never_share_or_nest_locations(
    iceberg_server: Server, catalog_name: str, catalog: RestCatalog
) -> None:
    catalog.create_namespace(("db",))
    table = catalog.create_table(T, SCHEMA)
    http = Http(iceberg_server.url, catalog_name)
    for location in (table.location(), table.location() + "/", table.location() + "/inner"):
        create = {"name": "u", "schema": SCHEMA_JSON, "location": location}
        assert_error(http.call("POST", "/namespaces/db/tables", json=create), 400)
        view = {**create, "view-version": _view_version(), "properties": {}}
        assert_error(http.call("POST", "/namespaces/db/views", json=view), 400)
    parent = table.location().rsplit("/", 1)[0]
    create = {"name": "u", "schema": SCHEMA_JSON, "location": parent}
    assert_error(http.call("POST", "/namespaces/db/tables", json=create), 400)
    other = catalog.create_table(("db", "other"), SCHEMA)
    move = {"updates": [{"action": "set-location", "location": table.location() + "/x"}]}
    assert_error(http.call("POST", "/namespaces/db/tables/other", json=move), 400)
    assert catalog.load_table(("db", "other")).location() == other.location()


def test_a_renamed_tables_name_gets_a_location_of_its_own(catalog: RestCatalog) -> None:
    catalog.create_namespace(("db",))
    first = catalog.create_table(T, SCHEMA)
    first.append(rows([1]))
    catalog.rename_table(T, ("db", "moved"))
    second = catalog.create_table(T, SCHEMA)  # the default location is taken: a fresh one
    second.append(rows([2]))
    assert second.location() != first.location()
    assert not second.location().startswith(first.location() + "/")
    catalog.purge_table(T)
    assert catalog.load_table(("db", "moved")).scan().to_arrow()["id"].to_pylist() == [1]


def test_concurrent_creates_at_one_location_let_exactly_one_win(
    iceberg_server: Server, catalog_name: str, catalog: RestCatalog
) -> None:
    catalog.create_namespace(("db",))
    http = Http(iceberg_server.url, catalog_name)
    location = iceberg_server.warehouse(catalog_name).as_uri() + "/shared"

    def create(i: int) -> int:
        body = {"name": f"t{i}", "schema": SCHEMA_JSON, "location": location + ("/x" * (i % 2))}
        return http.call("POST", "/namespaces/db/tables", json=body).status_code

    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(create, range(8)))
    assert statuses.count(200) == 1, statuses
    assert set(statuses) <= {200, 400, 409}, statuses
    assert len(catalog.list_tables(("db",))) == 1


# --- c. location properties ----------------------------------------------------------


@pytest.mark.parametrize(
    "key", ["write.metadata.path", "write.data.path", "write.object-storage.path"]
)
def test_location_properties_outside_the_table_are_refused(
    iceberg_server: Server, catalog_name: str, catalog: RestCatalog, key: str
) -> None:
    catalog.create_namespace(("db",))
    table = catalog.create_table(T, SCHEMA)
    http = Http(iceberg_server.url, catalog_name)
    elsewhere = iceberg_server.data_dir.parent / f"elsewhere-{uuid.uuid4().hex[:8]}"
    for value in (elsewhere.as_uri(), table.location() + "/../sibling"):
        change = {"updates": [{"action": "set-properties", "updates": {key: value}}]}
        assert_error(http.call("POST", TABLE, json=change), 400)
        create = {"name": "x", "schema": SCHEMA_JSON, "properties": {key: value}}
        assert_error(http.call("POST", "/namespaces/db/tables", json=create), 400)
    assert not elsewhere.exists()
    inside = table.location() + "/custom"
    change = {"updates": [{"action": "set-properties", "updates": {key: inside}}]}
    reply = http.call("POST", TABLE, json=change)
    assert reply.status_code == 200, reply.text
    if key == "write.metadata.path":
        assert reply.json()["metadata-location"].startswith(inside + "/")


def test_column_settings_are_not_locations(
    iceberg_server: Server, catalog_name: str, catalog: RestCatalog
) -> None:
    catalog.create_namespace(("db",))
    catalog.create_table(T, SCHEMA)
    http = Http(iceberg_server.url, catalog_name)
    settings = {"write.metadata.metrics.column.path": "full"}  # a column named "path"
    change = {"updates": [{"action": "set-properties", "updates": settings}]}
    reply = http.call("POST", TABLE, json=change)
    assert reply.status_code == 200, reply.text


def test_the_server_never_loads_a_location_provider_a_client_names(
    iceberg_server: Server, catalog_name: str, catalog: RestCatalog
) -> None:
    catalog.create_namespace(("db",))
    table = catalog.create_table(T, SCHEMA)
    http = Http(iceberg_server.url, catalog_name)
    provider = {"write.py-location-provider.impl": "no_such_module.Provider"}
    change = {"updates": [{"action": "set-properties", "updates": provider}]}
    reply = http.call("POST", TABLE, json=change)
    assert reply.status_code == 200, reply.text
    assert reply.json()["metadata-location"].startswith(table.location() + "/metadata/")


# --- d. a purge after the drop never fails the drop ----------------------------------


def test_a_purge_that_hits_bad_files_still_answers_the_committed_drop(
    iceberg_server: Server, catalog_name: str, catalog: RestCatalog
) -> None:
    """Manifest lists inside the table that are not manifest lists: a manifest (Avro of
    another schema), a metadata.json, garbage, a directory. The drop stands (204), the
    table's other files go, each failure is counted."""
    catalog.create_namespace(("db",))
    table = catalog.create_table(T, SCHEMA)
    table.append(rows([1]))
    table = catalog.load_table(T)
    metadata_dir = _path(table.location()) / "metadata"
    (metadata_dir / "garbage.avro").write_bytes(b"not avro at all")
    (metadata_dir / "dir.avro").mkdir()
    manifest = table.current_snapshot().manifests(table.io)[0].manifest_path  # type: ignore[union-attr]
    bad = [manifest, table.metadata_location, f"{metadata_dir.as_uri()}/garbage.avro"]
    bad.append(f"{metadata_dir.as_uri()}/dir.avro")
    http = Http(iceberg_server.url, catalog_name)
    updates = []
    for number, manifest_list in enumerate(bad):
        snapshot = _snapshot(manifest_list)
        snapshot["snapshot"] |= {"snapshot-id": 100 + number, "sequence-number": 2 + number}
        updates.append(snapshot)
    reply = http.call("POST", TABLE, json={"updates": updates})
    assert reply.status_code == 200, reply.text
    failures = _metric(iceberg_server, "metastore_purge_failures_total")

    reply = http.call("DELETE", TABLE, params={"purgeRequested": "true"})
    assert reply.status_code == 204, reply.text
    assert not catalog.table_exists(T)
    assert _metric(iceberg_server, "metastore_purge_failures_total") >= failures + 3
    assert not any(p.suffix == ".parquet" for p in _path(table.location()).rglob("*"))


# --- i. bad input to register, idempotent retries after a purge ----------------------


@pytest.mark.parametrize(
    "content", ["[1, 2]", "{}", '{"format-version": 2}', "null", "not json", "VIEW"]
)
def test_register_of_anything_but_table_metadata_is_a_400(
    iceberg_server: Server, catalog_name: str, catalog: RestCatalog, content: str
) -> None:
    catalog.create_namespace(("db",))
    http = Http(iceberg_server.url, catalog_name)
    if content == "VIEW":
        view = {
            "name": "v",
            "schema": SCHEMA_JSON,
            "view-version": _view_version(),
            "properties": {},
        }
        reply = http.call("POST", "/namespaces/db/views", json=view)
        assert reply.status_code == 200, reply.text
        location = reply.json()["metadata-location"]
    else:
        path = iceberg_server.warehouse(catalog_name) / "db" / "x" / "metadata" / "x.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        location = path.as_uri()
    head = http.head_commit()
    body = {"name": "r", "metadata-location": location}
    assert_error(http.call("POST", "/namespaces/db/register", json=body), 400)
    assert http.head_commit() == head


def test_an_idempotent_create_retried_after_a_purge_is_not_a_500(
    iceberg_server: Server, catalog_name: str, catalog: RestCatalog
) -> None:
    catalog.create_namespace(("db",))
    http = Http(iceberg_server.url, catalog_name)
    key = {"Idempotency-Key": f"create-{uuid.uuid4().hex}"}
    create = {"name": "t", "schema": SCHEMA_JSON}
    first = http.call("POST", "/namespaces/db/tables", json=create, headers=key)
    assert first.status_code == 200, first.text
    reply = http.call("DELETE", TABLE, params={"purgeRequested": "true"})
    assert reply.status_code == 204, reply.text
    retried = http.call("POST", "/namespaces/db/tables", json=create, headers=key)
    assert retried.status_code < 500, retried.text
    if retried.status_code >= 400:
        assert_error(retried, retried.status_code)


def test_statistics_files_may_lie_anywhere_and_purge_keeps_those_outside(
    iceberg_server: Server, catalog: RestCatalog, outside: Path
) -> None:
    """Statistics files are the engines' (never read by the server): a path outside the
    table is accepted, as Java's catalogs do, and the purge deletes only the table's own."""
    from pyiceberg.table.statistics import BlobMetadata, StatisticsFile

    catalog.create_namespace(("db",))
    table = catalog.create_table(T, SCHEMA)
    table.append(rows([1, 2]))
    snapshot = table.current_snapshot()
    assert snapshot is not None
    own = _path(table.location()) / "metadata" / "own.stats"
    own.write_bytes(b"PFA1")
    blob = BlobMetadata(
        type="apache-datasketches-theta-v1",
        snapshot_id=snapshot.snapshot_id,
        sequence_number=snapshot.sequence_number,
        fields=[1],
        properties={},
    )
    for path in (outside.as_uri(), own.as_uri()):
        statistics = StatisticsFile(
            snapshot_id=snapshot.snapshot_id,
            statistics_path=path,
            file_size_in_bytes=4,
            file_footer_size_in_bytes=4,
            blob_metadata=[blob],
        )
        with table.update_statistics() as update:
            update.set_statistics(statistics)  # one per snapshot: the second replaces it
        assert catalog.load_table(T).metadata.statistics[0].statistics_path == path

    catalog.purge_table(T)
    assert outside.read_bytes()[:4] == b"PAR1"  # outside the table: kept
    assert not own.exists()
