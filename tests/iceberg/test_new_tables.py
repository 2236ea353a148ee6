"""New tables through real PyIceberg and raw HTTP against a real node.

Format version 3: create, load, commit with row lineage (the server hands out
row ids), the upgrade from version 2, the version 3 features the server refuses
(a 400 naming them). Metadata files: a failed create leaves the warehouse as it
was. Defaults of new tables, and staged creates on a local warehouse (the
table's folders exist before the engine writes, only inside the catalog).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, date, datetime
from datetime import time as dtime
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from uuid import UUID

import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    IntegerType,
    LongType,
    NestedField,
    PrimitiveType,
    StringType,
    StructType,
    TimestampNanoType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from tests.iceberg.conftest import Server
from tests.iceberg.support import SCHEMA, Http, assert_error, rows

pytestmark = pytest.mark.parametrize("iceberg_server", ["embedded"], indirect=True)

V3 = {"format-version": "3"}
ZSTD = {"write.parquet.compression-codec": "zstd"}


def _files(root: Path) -> dict[str, int]:
    """Every file under ``root`` with its size (the warehouse as a client would see it)."""
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def _metadata_file(table: Table) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(Path(urlparse(table.metadata_location).path).read_text())
    return document


def test_v3_create_and_load(
    iceberg_server: Server, catalog: RestCatalog, catalog_name: str
) -> None:
    catalog.create_namespace(("db",))
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "at", TimestampNanoType(), required=False),
    )
    table = catalog.create_table(("db", "t"), schema=schema, properties=V3)
    assert table.format_version == 3
    assert table.metadata.next_row_id == 0
    assert table.properties == ZSTD  # format-version is not a stored property

    document = _metadata_file(table)
    assert document["format-version"] == 3 and document["next-row-id"] == 0
    assert document["schemas"][0]["fields"][1]["type"] == "timestamp_ns"
    files = _files(iceberg_server.warehouse(catalog_name))
    assert [size > 0 for name, size in files.items() if name.endswith(".metadata.json")] == [True]

    loaded = catalog.load_table(("db", "t"))
    assert loaded.format_version == 3 and loaded.metadata.next_row_id == 0
    assert loaded.schema() == table.schema()

    catalog.create_table_transaction(("db", "s"), schema=schema, properties=V3).commit_transaction()
    staged = catalog.load_table(("db", "s"))  # staged, then created by a commit
    assert staged.format_version == 3 and staged.metadata.next_row_id == 0
    assert staged.properties == ZSTD


DEFAULTS: list[tuple[PrimitiveType, Any, Any]] = [
    (BooleanType(), True, False),
    (IntegerType(), 123, 456),
    (LongType(), 123, 456),
    (DoubleType(), 19.25, 22.27),
    (DecimalType(10, 2), Decimal("19.25"), Decimal("22.27")),
    (StringType(), "abc", "def"),
    (DateType(), date(1990, 3, 1), date(1991, 3, 1)),
    (TimeType(), dtime(19, 25, 22), dtime(22, 25, 22)),
    (TimestampType(), datetime(1990, 5, 1, 22, 1, 1), datetime(2000, 5, 1, 22, 1, 1)),
    (
        TimestamptzType(),
        datetime(1990, 5, 1, 22, 1, 1, tzinfo=UTC),
        datetime(2000, 5, 1, 22, 1, 1, tzinfo=UTC),
    ),
    (BinaryType(), b"123", b"456"),
    (FixedType(4), b"1234", b"5678"),
    (UUIDType(), UUID(int=0x1234), UUID(int=0x3214)),
]


def test_v3_column_defaults_round_trip(catalog: RestCatalog) -> None:
    """Initial and write defaults of every primitive type, through schema commits and
    loads (version 3's default values, as PyIceberg's own schema tests send them)."""
    catalog.create_namespace(("db",))
    for number, (kind, initial, write) in enumerate(DEFAULTS):
        table = catalog.create_table(("db", f"t{number}"), schema=Schema(), properties=V3)
        with table.update_schema() as update:
            update.add_column("data", kind, required=True, default_value=initial)
            update.add_column("nested", StructType(), required=False)
        with table.update_schema() as update:
            update.add_column(("nested", "data"), kind, required=True, default_value=initial)
        with table.update_schema() as update:
            update.set_default_value("data", write)
            update.set_default_value(("nested", "data"), write)
        loaded = catalog.load_table(("db", f"t{number}"))
        assert loaded.format_version == 3
        for field_id in (1, 3):
            field = loaded.schema().find_field(field_id)
            assert (field.initial_default, field.write_default) == (initial, write), kind


def test_v3_create_keeps_column_defaults(
    catalog: RestCatalog, catalog_name: str, iceberg_server: Server
) -> None:
    """A create renumbers the client's fields; their defaults survive it (PyIceberg
    drops them before sending, other clients send them: raw HTTP here)."""
    catalog.create_namespace(("db",))
    point = {
        "type": "struct",
        "fields": [
            {"id": 11, "name": "x", "type": "int", "required": True, "initial-default": 7},
        ],
    }
    schema = {
        "type": "struct",
        "schema-id": 0,
        "fields": [
            {
                "id": 5,
                "name": "day",
                "type": "date",
                "required": True,
                "initial-default": "1990-03-01",
                "write-default": "1991-03-01",
            },
            {"id": 6, "name": "point", "type": point, "required": False},
            {
                "id": 7,
                "name": "points",
                "type": {
                    "type": "list",
                    "element-id": 8,
                    "element": point,
                    "element-required": False,
                },
                "required": False,
            },
        ],
    }
    http = Http(iceberg_server.url, catalog_name)
    body = {"name": "t", "schema": schema, "properties": V3}
    reply = http.call("POST", "/namespaces/db/tables", json=body)
    assert reply.status_code == 200, reply.text
    loaded = catalog.load_table(("db", "t")).schema()
    day = loaded.find_field("day")
    assert (day.field_id, day.initial_default, day.write_default) == (
        1,
        date(1990, 3, 1),
        date(1991, 3, 1),
    )
    assert loaded.find_field("point.x").initial_default == 7
    assert loaded.find_field("points.element.x").initial_default == 7


def _snapshot(
    table: Table, snapshot_id: int, parent: int | None, sequence: int, **lineage: int
) -> dict[str, Any]:
    snapshot: dict[str, Any] = {
        "snapshot-id": snapshot_id,
        "sequence-number": sequence,
        "timestamp-ms": int(time.time() * 1000),
        "manifest-list": f"{table.location()}/metadata/snap-{snapshot_id}.avro",
        "summary": {"operation": "append"},
        "schema-id": 0,
        **{k.replace("_", "-"): v for k, v in lineage.items()},
    }
    if parent is not None:
        snapshot["parent-snapshot-id"] = parent
    return snapshot


def _add(
    http: Http, table: Table, snapshot: dict[str, Any], branch: str = "main"
) -> requests.Response:
    body = {
        "requirements": [],
        "updates": [
            {"action": "add-snapshot", "snapshot": snapshot},
            {
                "action": "set-snapshot-ref",
                "ref-name": branch,
                "type": "branch",
                "snapshot-id": snapshot["snapshot-id"],
            },
        ],
    }
    return http.call("POST", http.table_path(("db",), table.name()[-1]), json=body)


def test_v3_row_lineage(catalog: RestCatalog, catalog_name: str, iceberg_server: Server) -> None:
    """The server owns next-row-id: it assigns a missing first-row-id, advances past
    each snapshot's added rows (on any branch), and refuses stale or incomplete
    lineage without changing the table."""
    catalog.create_namespace(("db",))
    table = catalog.create_table(("db", "t"), schema=SCHEMA, properties=V3)
    http = Http(iceberg_server.url, catalog_name)

    reply = _add(http, table, _snapshot(table, 1, None, 1, added_rows=10))  # no first-row-id
    assert reply.status_code == 200, reply.text
    metadata = reply.json()["metadata"]
    assert metadata["snapshots"][0]["first-row-id"] == 0
    assert metadata["next-row-id"] == 10

    reply = _add(http, table, _snapshot(table, 2, 1, 2, first_row_id=10, added_rows=5), "audit")
    assert reply.status_code == 200, reply.text
    assert reply.json()["metadata"]["next-row-id"] == 15  # a branch's rows count too

    before = catalog.load_table(("db", "t")).metadata_location
    stale = _snapshot(table, 3, 1, 3, first_row_id=12, added_rows=1)  # ids 12.. are taken
    assert_error(_add(http, table, stale), 409, "CommitFailedException")
    missing = _snapshot(table, 4, 1, 3)
    reply = _add(http, table, missing)
    assert_error(reply, 400)
    assert "added-rows" in reply.json()["error"]["message"]
    negative = _snapshot(table, 5, 1, 3, added_rows=-1)
    assert_error(_add(http, table, negative), 400)

    loaded = catalog.load_table(("db", "t"))
    assert loaded.metadata_location == before
    assert loaded.metadata.next_row_id == 15
    assert [(s.first_row_id, s.added_rows) for s in loaded.metadata.snapshots] == [
        (0, 10),
        (10, 5),
    ]
    assert _metadata_file(loaded)["next-row-id"] == 15


def test_upgrade_v2_to_v3(catalog: RestCatalog, catalog_name: str, iceberg_server: Server) -> None:
    catalog.create_namespace(("db",))
    table = catalog.create_table(("db", "t"), schema=SCHEMA)
    table.append(rows([1, 2, 3]))
    assert table.format_version == 2
    http = Http(iceberg_server.url, catalog_name)
    path = http.table_path(("db",), "t")

    def upgrade(version: int) -> requests.Response:
        update = {"action": "upgrade-format-version", "format-version": version}
        return http.call("POST", path, json={"requirements": [], "updates": [update]})

    nanos = {
        "type": "struct",
        "schema-id": 1,
        "fields": [{"id": 3, "name": "at", "type": "timestamp_ns", "required": False}],
    }
    add_nanos = {"requirements": [], "updates": [{"action": "add-schema", "schema": nanos}]}
    reply = http.call("POST", path, json=add_nanos)  # a version 3 type on a version 2 table
    assert_error(reply, 400)
    assert "timestamp_ns" in reply.json()["error"]["message"]

    reply = upgrade(4)
    assert_error(reply, 400)
    assert "format version 4" in reply.json()["error"]["message"]

    reply = upgrade(3)
    assert reply.status_code == 200, reply.text
    upgraded = catalog.load_table(("db", "t"))
    assert upgraded.format_version == 3
    assert upgraded.metadata.next_row_id == 0  # rows written before v3 have no ids
    assert _metadata_file(upgraded)["format-version"] == 3
    assert sorted(upgraded.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]

    assert http.call("POST", path, json=add_nanos).status_code == 200  # now it may
    assert upgrade(3).status_code == 200  # already there: nothing to do
    assert_error(upgrade(2), 400)  # no downgrade
    assert catalog.load_table(("db", "t")).format_version == 3


def test_v3_features_not_supported_are_named(
    catalog: RestCatalog, catalog_name: str, iceberg_server: Server
) -> None:
    """A 400 that names what is refused, and the table is unchanged."""
    catalog.create_namespace(("db",))
    table = catalog.create_table(("db", "t"), schema=SCHEMA, properties=V3)
    http = Http(iceberg_server.url, catalog_name)
    path = http.table_path(("db",), "t")
    spec = {
        "spec-id": 1,
        "fields": [{"source-ids": [1, 2], "field-id": 1000, "name": "b", "transform": "bucket[4]"}],
    }
    variant = {
        "type": "struct",
        "schema-id": 1,
        "fields": [{"id": 3, "name": "v", "type": "variant", "required": False}],
    }
    cases = {
        "Multi argument transforms": {"action": "add-spec", "spec": spec},
        "variant": {"action": "add-schema", "schema": variant},
        "add-encryption-key": {
            "action": "add-encryption-key",
            "encryption-key": {"key-id": "k", "encrypted-key-metadata": "AA=="},
        },
    }
    for named, update in cases.items():
        reply = http.call("POST", path, json={"requirements": [], "updates": [update]})
        assert_error(reply, 400)
        assert named in reply.json()["error"]["message"], reply.text
    assert catalog.load_table(("db", "t")).metadata_location == table.metadata_location


def test_failed_creates_leave_the_warehouse_unchanged(
    iceberg_server: Server, catalog: RestCatalog, catalog_name: str
) -> None:
    catalog.create_namespace(("db",))
    catalog.create_table(("db", "t"), schema=SCHEMA, properties=V3)
    warehouse = iceberg_server.warehouse(catalog_name)
    blocked = warehouse / "db" / "blocked"
    blocked.mkdir(parents=True)
    (blocked / "metadata").write_text("a file where the metadata folder would go")
    before = _files(warehouse)
    http = Http(iceberg_server.url, catalog_name)
    schema = json.loads(SCHEMA.model_dump_json())

    def create(name: str, **extra: Any) -> requests.Response:
        body = {"name": name, "schema": schema, **extra}
        return http.call("POST", "/namespaces/db/tables", json=body)

    assert_error(create("t"), 409)  # its metadata file was written, then the commit failed
    assert_error(create("t", properties=V3), 409)
    assert_error(create("u", properties={"format-version": "4"}), 400)
    reply = create("u", properties=V3, location=blocked.as_uri())
    assert reply.status_code == 503, reply.text  # the storage refuses the write
    assert _files(warehouse) == before


def test_new_tables_default_to_zstd_unless_told(catalog: RestCatalog) -> None:
    """As PyIceberg's own property tests expect of a REST catalog."""
    catalog.create_namespace(("db",))
    table = catalog.create_table(("db", "t"), schema=SCHEMA)
    assert table.properties == ZSTD
    with table.transaction() as transaction:
        transaction.set_properties(abc="🤪")
    assert table.properties == {"abc": "🤪", **ZSTD}
    with table.transaction() as transaction:
        transaction.remove_properties("abc")
    assert table.properties == ZSTD

    snappy = {"write.parquet.compression-codec": "snappy"}
    other = catalog.create_table(("db", "u"), schema=SCHEMA, properties=snappy)
    assert catalog.load_table(("db", "u")).properties == snappy == other.properties
    staged = catalog.create_table_transaction(("db", "v"), schema=SCHEMA)
    staged.commit_transaction()
    assert catalog.load_table(("db", "v")).properties == ZSTD


def test_staged_create_prepares_local_folders(catalog: RestCatalog) -> None:
    """An engine that stages a create writes data and manifests before the commit,
    through the plain local file system: the folders must be there already."""
    catalog.create_namespace(("db",))
    staged = catalog.create_table_transaction(("db", "t"), schema=SCHEMA)
    location = Path(urlparse(staged.table_metadata.location).path)
    assert (location / "metadata").is_dir() and (location / "data").is_dir()
    with open(location / "metadata" / "engine.probe", "xb") as probe:  # no parents made
        probe.write(b"written before the commit")
    (location / "metadata" / "engine.probe").unlink()
    staged.append(rows([1, 2]))
    staged.commit_transaction()
    table = catalog.load_table(("db", "t"))
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [1, 2]
    assert table.properties == ZSTD


def test_staged_create_makes_no_folder_outside_the_catalog(
    iceberg_server: Server, catalog: RestCatalog, catalog_name: str, tmp_path: Path
) -> None:
    catalog.create_namespace(("db",))
    outside = tmp_path / "outside"
    outside.mkdir()
    link = iceberg_server.warehouse(catalog_name) / "db" / "link"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside)
    http = Http(iceberg_server.url, catalog_name)
    schema = json.loads(SCHEMA.model_dump_json())
    inside = iceberg_server.warehouse(catalog_name) / "db" / "t"
    hostile: list[dict[str, Any]] = [
        {"location": (outside / "t").as_uri()},
        {"location": (link / "t").as_uri()},  # inside by name, outside by its real path
        {"location": inside.as_uri(), "properties": {"write.data.path": outside.as_uri()}},
        {"location": inside.as_uri(), "properties": {"write.metadata.path": (link / "m").as_uri()}},
    ]
    for extra in hostile:
        body = {"name": "t", "schema": schema, "stage-create": True, **extra}
        assert_error(http.call("POST", "/namespaces/db/tables", json=body), 400)
    assert list(outside.iterdir()) == []
    assert not inside.exists()
