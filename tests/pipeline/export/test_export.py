"""``metastore export`` against one real running node: what it writes equals what the
node's own APIs answer (the native API's listings and the Iceberg REST loads through
PyIceberg), no secret reaches the Parquet files, the ``--json`` summary is
``tables`` (row count by exported table) and ``out``, a ``--catalog`` scope keeps
only the access records on that catalog, and ``--register`` makes the export
readable as Iceberg tables through the node itself."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType
from pyspark.sql import SparkSession

from harness.node import NodeProcess
from metastore.pipeline.export.export_rows import TABLES
from metastore.storage.credentials import is_secret_key
from tests.pipeline.conftest import run_job
from tests.pipeline.support import Http

TENANT = "acme"
CATALOGS = ("sales", "ops")
SECRETS = {"etl": "etl-secret-0123456789abcdef", "bi": "bi-secret-fedcba9876543210"}
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "name", StringType(), required=False),
)
SECRET_WORDS = (b"salt", b"hash", b"generation", b"client-secret")


def tenant_path(*parts: str) -> str:
    return "/".join(("/api/v1/tenants", TENANT, *parts))


def iceberg(node: NodeProcess, catalog: str) -> RestCatalog:
    return RestCatalog(catalog, uri=node.url, warehouse=f"{TENANT}/{catalog}")


def create_view(http: Http, catalog: str, namespace: str, name: str, sql: str) -> None:
    """A view through the Iceberg REST API (the request any engine sends)."""
    prefix = http.ok("GET", f"/v1/config?warehouse={TENANT}/{catalog}")["overrides"]["prefix"]
    body = {
        "name": name,
        "schema": {
            "type": "struct",
            "schema-id": 0,
            "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
        },
        "view-version": {
            "version-id": 1,
            "timestamp-ms": 1_700_000_000_000,
            "schema-id": 0,
            "summary": {"engine-name": "spark"},
            "representations": [{"type": "sql", "sql": sql, "dialect": "spark"}],
            "default-namespace": [namespace],
        },
        "properties": {"comment": f"view {name}"},
    }
    http.ok("POST", f"/v1/{prefix}/namespaces/{namespace}/views", body)


def populate(node: NodeProcess) -> None:
    """Two catalogs with namespaces (nested, with properties), Iceberg tables with
    appends (so snapshots exist), a native table, views, principals and grants."""
    http = Http(node.url)
    http.ok("POST", "/api/v1/tenants", {"name": TENANT})
    for catalog in CATALOGS:
        http.ok("POST", tenant_path("catalogs"), {"name": catalog})
        client = iceberg(node, catalog)
        client.create_namespace("ns", {"owner": f"{catalog}-team"})
        client.create_namespace(("ns", "sub"))
        client.create_namespace("other", {"comment": "second"})
        orders = client.create_table(("ns", "orders"), SCHEMA, properties={"k": catalog})
        for start in (0, 3):
            rows = pa.table(
                {
                    "id": pa.array(range(start, start + 3), pa.int64()),
                    "name": pa.array([f"n{i}" for i in range(start, start + 3)]),
                }
            )
            orders.append(rows)
        client.create_table(("ns", "sub", "empty"), SCHEMA)
        create_view(http, catalog, "ns", "recent", "SELECT id FROM ns.orders WHERE id > 2")
        http.ok("POST", tenant_path("catalogs", catalog, "namespaces/other/tables"), {"name": "n"})
    for name, secret in SECRETS.items():
        http.ok("POST", tenant_path("principals"), {"name": name, "secret": secret})
    # analysts (bi) hold sales' readers; operators (etl) hold ops' writers
    for role, member, catalog, catalog_role, privilege in (
        ("analysts", "bi", "sales", "readers", "TABLE_READ_DATA"),
        ("operators", "etl", "ops", "writers", "TABLE_WRITE_DATA"),
    ):
        http.ok("POST", tenant_path("principal-roles"), {"name": role})
        http.ok("POST", tenant_path("principal-roles", role, "principals"), {"principal": member})
        http.ok("POST", tenant_path("catalogs", catalog, "catalog-roles"), {"name": catalog_role})
        grant = {"privilege": privilege, "securable": {"kind": "table", "path": ["ns", "orders"]}}
        http.ok(
            "POST",
            tenant_path("catalogs", catalog, "catalog-roles", catalog_role, "grants"),
            grant,
        )
        http.ok(
            "POST",
            tenant_path("principal-roles", role, "catalog-roles"),
            {"catalog": catalog, "catalog-role": catalog_role},
        )
    http.ok(
        "POST", tenant_path("principal-roles", "analysts", "grants"), {"privilege": "CATALOG_LIST"}
    )


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    root = tmp_path_factory.mktemp("export")
    with NodeProcess(root / "data", log_path=root / "node.log") as running:
        populate(running)
        yield running


@pytest.fixture(scope="module")
def exported(
    spark: SparkSession, node: NodeProcess, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """The tenant exported once (shared by the comparisons), with its ``--json`` summary."""
    out = tmp_path_factory.mktemp("export-out")
    ran = run_job(
        spark, "export", "--url", node.url, "--tenant", TENANT, "--out", str(out), "--json"
    )
    assert ran.status == 0, ran.stdout
    return {"summary": ran.summary, "out": out, "stdout": ran.stdout}


def read(out: Path, name: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pq.read_table(out / name).to_pylist()
    return rows


def as_map(properties: Any) -> dict[str, str]:
    return dict(properties or [])


# --- the summary -------------------------------------------------------------------


def test_the_summary_is_tables_and_out(exported: dict[str, Any]) -> None:
    summary, out = exported["summary"], exported["out"]
    assert summary["out"] == str(out.resolve())
    assert set(summary["tables"]) == set(TABLES)
    for name, count in summary["tables"].items():
        assert isinstance(count, int)
        assert pq.read_table(out / name).num_rows == count, name
        assert pq.read_table(out / name).schema.equals(TABLES[name]), name
    assert summary["tables"]["tables"] > 0 and summary["tables"]["commits"] > 0
    assert "written to" in exported["stdout"]


# --- current state equals the APIs' answers ----------------------------------------


def walk(client: RestCatalog, parent: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found: list[tuple[str, ...]] = []
    for namespace in client.list_namespaces(parent):
        found.append(tuple(namespace))
        found.extend(walk(client, tuple(namespace)))
    return found


def test_tenants_and_catalogs_equal_the_native_api(
    node: NodeProcess, exported: dict[str, Any]
) -> None:
    http, out = Http(node.url), exported["out"]
    (tenant,) = read(out, "tenants")
    api = http.ok("GET", tenant_path())
    assert tenant["tenant"] == TENANT and str(tenant["entity_id"]) == api["entity-id"]
    catalogs = {row["catalog"]: row for row in read(out, "catalogs")}
    listed = http.pages(tenant_path("catalogs"), "catalogs")
    assert set(catalogs) == {c["name"] for c in listed} >= set(CATALOGS)
    for entry in listed:
        row = catalogs[entry["name"]]
        assert str(row["entity_id"]) == entry["entity-id"] and row["version"] == entry["version"]


def test_namespaces_equal_the_iceberg_api(node: NodeProcess, exported: dict[str, Any]) -> None:
    rows = read(exported["out"], "namespaces")
    for catalog in CATALOGS:
        client = iceberg(node, catalog)
        mine = {tuple(r["namespace"]): r for r in rows if r["catalog"] == catalog}
        assert set(mine) == set(walk(client))
        for namespace, row in mine.items():
            loaded = client.load_namespace_properties(namespace)
            assert as_map(row["properties"]) == loaded, (namespace, row, loaded)


def test_tables_equal_the_iceberg_loads(node: NodeProcess, exported: dict[str, Any]) -> None:
    http, rows = Http(node.url), read(exported["out"], "tables")
    for catalog in CATALOGS:
        client = iceberg(node, catalog)
        mine = {(*r["namespace"], r["name"]): r for r in rows if r["catalog"] == catalog}
        expected = {tuple(t) for ns in walk(client) for t in client.list_tables(ns)} | {
            ("other", "n")
        }
        assert set(mine) == expected
        for identifier, row in mine.items():
            if identifier == ("other", "n"):  # native: no Iceberg metadata
                (native,) = http.ok(
                    "GET", tenant_path("catalogs", catalog, "namespaces/other/tables")
                )["tables"]
                assert str(row["entity_id"]) == native["entity-id"]
                assert row["metadata_location"] is None and row["snapshots"] is None
                continue
            table = client.load_table(identifier)
            metadata = table.metadata
            assert row["metadata_location"] == table.metadata_location
            assert row["location"] == metadata.location
            assert row["table_uuid"] == str(metadata.table_uuid)
            assert row["format_version"] == metadata.format_version
            assert row["current_schema_id"] == metadata.current_schema_id
            schema = json.loads(row["current_schema"])
            assert schema["schema-id"] == table.schema().schema_id
            assert [f["name"] for f in schema["fields"]] == [f.name for f in table.schema().fields]
            current = metadata.current_snapshot_id
            assert row["current_snapshot_id"] == current
            assert row["snapshots"] == len(metadata.snapshots)
            assert row["last_updated_ms"] == metadata.last_updated_ms
            assert as_map(row["properties"]) == dict(metadata.properties)
        orders = mine[("ns", "orders")]
        assert orders["snapshots"] == 2 and orders["current_snapshot_id"] is not None
        assert mine[("ns", "sub", "empty")]["current_snapshot_id"] is None


def test_views_equal_the_iceberg_loads(node: NodeProcess, exported: dict[str, Any]) -> None:
    rows = read(exported["out"], "views")
    for catalog in CATALOGS:
        client = iceberg(node, catalog)
        mine = {(*r["namespace"], r["name"]): r for r in rows if r["catalog"] == catalog}
        assert set(mine) == {tuple(v) for ns in walk(client) for v in client.list_views(ns)}
        for identifier, row in mine.items():
            view = client.load_view(identifier)
            metadata = view.metadata
            assert row["view_uuid"] == str(metadata.view_uuid)
            assert row["current_version_id"] == metadata.current_version_id
            version = next(
                v for v in metadata.versions if v.version_id == row["current_version_id"]
            )
            assert row["sql"] == version.representations[0].root.sql
            assert row["location"] == metadata.location
            assert json.loads(row["current_schema"])["schema-id"] == version.schema_id


def test_commit_history_equals_the_native_api(node: NodeProcess, exported: dict[str, Any]) -> None:
    http, rows = Http(node.url), read(exported["out"], "commits")
    for catalog, path in [("", tenant_path("commits"))] + [
        (c, tenant_path("catalogs", c, "commits")) for c in CATALOGS
    ]:
        api = http.pages(path, "commits")
        mine = [r for r in rows if r["catalog"] == catalog]
        assert len(mine) == len(api) > 1, catalog
        by_id = {str(r["commit_id"]): r for r in mine}
        for commit in api:
            row = by_id[commit["id"]]
            assert (str(row["parent_id"]) if row["parent_id"] else None) == commit["parent"]
            assert row["seq"] == commit["seq"]
            assert row["committed_at_ms"] == commit["timestamp-ms"]
            assert row["principal"] == commit["principal"]
            assert row["operation"] == commit["operation"]
            assert row["changes"] == commit["changes"]
        # one chain down to a single root: every parent is itself exported
        assert [r["parent_id"] for r in mine].count(None) == 1
        ids = {r["commit_id"] for r in mine}
        assert all(r["parent_id"] in ids for r in mine if r["parent_id"] is not None)


def test_principals_and_grants_equal_the_native_api(
    node: NodeProcess, exported: dict[str, Any]
) -> None:
    http, out = Http(node.url), exported["out"]
    principals = {r["name"]: r for r in read(out, "principals")}
    listed = http.pages(tenant_path("principals"), "principals")
    assert set(principals) == {p["name"] for p in listed} >= set(SECRETS)
    for entry in listed:
        row = principals[entry["name"]]
        assert row["type"] == entry["type"] and row["disabled"] == entry["disabled"]
        assert row["created_by"] == entry["created-by"]
        assert str(row["entity_id"]) == entry["entity-id"] and row["version"] == entry["version"]
    grants = read(out, "grants")
    by_kind: dict[str, list[str]] = {}
    for row in grants:
        by_kind.setdefault(row["kind"], []).append(row["record"])
    roles = [r for r in http.pages(tenant_path("principal-roles"), "principal-roles")]
    user_roles = sorted(r["name"] for r in roles if not r["built-in"])
    assert sorted(r.split(":", 1)[1] for r in by_kind["principal-role"]) == user_roles
    members = sorted(
        f"member:{role}:{p}"
        for role in user_roles
        for p in http.ok("GET", tenant_path("principal-roles", role, "principals"))["principals"]
    )
    assert sorted(by_kind["member"]) == members
    catalog_roles, role_grants, privileges = [], [], 0
    for catalog in CATALOGS:
        for role in http.pages(tenant_path("catalogs", catalog, "catalog-roles"), "catalog-roles"):
            catalog_roles.append(f"catalog-role:{catalog}:{role['name']}")
            path = tenant_path("catalogs", catalog, "catalog-roles", role["name"], "grants")
            privileges += len(http.ok("GET", path)["grants"])
    for role in user_roles:
        for held in http.ok("GET", tenant_path("principal-roles", role, "catalog-roles"))[
            "catalog-roles"
        ]:
            role_grants.append(f"role-grant:{role}:{held['catalog']}:{held['name']}")
        privileges += len(http.ok("GET", tenant_path("principal-roles", role, "grants"))["grants"])
    assert sorted(by_kind["catalog-role"]) == sorted(catalog_roles)
    assert sorted(by_kind["role-grant"]) == sorted(role_grants)
    assert len(by_kind["grant"]) == privileges == 3


def test_no_secret_reaches_the_parquet_files(exported: dict[str, Any]) -> None:
    files = sorted(exported["out"].rglob("*.parquet"))
    assert files
    for file in files:
        table = pq.read_table(file)
        assert not any(is_secret_key(name) for name in table.schema.names), file
        raw = file.read_bytes()
        for secret in SECRETS.values():
            assert secret.encode() not in raw, file
        for word in SECRET_WORDS:
            assert word not in raw, (file, word)
        for column in table.schema.names:
            if pa.types.is_map(table.schema.field(column).type):
                for entries in table.column(column).to_pylist():
                    assert not any(is_secret_key(k) for k, _ in entries or []), (file, column)


# --- a catalog's scope -------------------------------------------------------------


def test_a_catalog_scope_keeps_only_the_access_records_on_that_catalog(
    spark: SparkSession, node: NodeProcess, tmp_path: Path
) -> None:
    ran = run_job(
        spark, "export", "--url", node.url, "--tenant", TENANT, "--catalog", "sales",
        "--out", str(tmp_path), "--json",
    )  # fmt: skip
    assert ran.status == 0, ran.stdout
    records = sorted(r["record"] for r in read(tmp_path, "grants"))
    grants = [r for r in records if r.startswith("grant:")]
    assert [r for r in records if not r.startswith("grant:")] == [
        "catalog-role:sales:readers",
        "member:analysts:bi",
        "principal-role:analysts",
        "role-grant:analysts:sales:readers",
    ]
    assert len(grants) == 1 and grants[0].startswith("grant:c:sales:readers:")
    assert [r["name"] for r in read(tmp_path, "principals")] == ["bi"]
    assert {r["catalog"] for r in read(tmp_path, "tables")} == {"sales"}
    assert {r["catalog"] for r in read(tmp_path, "commits")} == {"", "sales"}


# --- registered as Iceberg tables ----------------------------------------------------


def test_registered_export_tables_are_readable_by_pyiceberg(
    spark: SparkSession, node: NodeProcess, tmp_path: Path
) -> None:
    warehouse = f"{TENANT}/ops"
    ran = run_job(
        spark, "export", "--url", node.url, "--tenant", TENANT, "--catalog", "sales",
        "--out", str(tmp_path), "--register", warehouse, "--register-namespace", "history",
        "--json",
    )  # fmt: skip
    assert ran.status == 0, ran.stdout
    summary = ran.summary
    assert summary["registered"] == {name: f"history.{name}" for name in TABLES}
    client = RestCatalog("reader", uri=node.url, warehouse=warehouse)
    for name, count in summary["tables"].items():
        scanned = client.load_table(("history", name)).scan().to_arrow()
        assert scanned.num_rows == count == pq.read_table(tmp_path / name).num_rows, name
        assert scanned.schema.names == TABLES[name].names
    commits = client.load_table(("history", "commits")).scan().to_arrow().to_pylist()
    assert sorted(r["commit_id"] for r in commits) == sorted(
        r["commit_id"] for r in read(tmp_path, "commits")
    )


def test_register_refuses_a_namespace_holding_tables_no_export_registered(
    spark: SparkSession, node: NodeProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A --register-namespace of the user's own, with a `commits` table: refused before
    the export runs, the table left as it was. Tables an export registered are replaced."""
    warehouse = f"{TENANT}/ops"
    client = RestCatalog("owner", uri=node.url, warehouse=warehouse)
    client.create_namespace_if_not_exists("mine")
    schema = Schema(NestedField(1, "id", LongType(), required=False))
    theirs = client.create_table(("mine", "commits"), schema)
    theirs.append(pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
    before = client.load_table(("mine", "commits")).metadata
    out = tmp_path / "out"
    argv = ["export", "--url", node.url, "--tenant", TENANT, "--catalog", "sales"]
    argv += ["--out", str(out), "--register", warehouse]
    capsys.readouterr()
    ran = run_job(spark, *argv, "--register-namespace", "mine")
    assert ran.status == 2, ran.stdout
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "metastore export: mine.commits exists and no export registered it: refusing to"
        " replace it; name another --register-namespace"
    ]
    assert client.load_table(("mine", "commits")).metadata == before
    assert not out.exists()  # refused before the export wrote anything
    for flags, message in (  # the catalog's refusals: one line each, nothing exported
        (["--register", "nosuch/cat"], "--register nosuch/cat: NoSuchTenantException"),
        (["--register-namespace", ""], f"--register {warehouse}: BadRequestException"),
    ):
        ran = run_job(spark, *argv, "--register-namespace", "n2", *flags)
        assert ran.status == 2, ran.stdout
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"metastore export: {message}"), err
        assert not out.exists()
    first = run_job(spark, *argv, "--register-namespace", "exported")
    again = run_job(spark, *argv, "--register-namespace", "exported")
    assert first.status == again.status == 0, again.stdout
    table = client.load_table(("exported", "commits"))
    assert table.properties["metastore.export"] == "true"
