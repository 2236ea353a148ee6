"""The cluster source: ``--kafka`` (the changelog topics, read one Spark task per
partition with the view's own apply rules) gives the same export and the same audit
as ``--url`` against a node of that cluster (a checkpoint of the node's view).

One small cluster for the module: two ``metastore serve --kafka`` nodes on the test
broker, loaded through the node's APIs (native and Iceberg REST with appends),
principals and grants included; nothing writes while the jobs run, so both sources
hold the same state.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField
from pyspark.sql import SparkSession

from harness.cluster import Cluster
from metastore.pipeline.export.export_rows import TABLES
from tests.pipeline.conftest import run_job
from tests.pipeline.support import Http

pytestmark = pytest.mark.slow
TENANT = "kshop"
CATALOGS = ("a", "b", "c")
PARTITIONS = 3
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


def load(url: str) -> None:
    http = Http(url)
    http.ok("POST", "/api/v1/tenants", {"name": TENANT})
    for catalog in CATALOGS:
        http.ok("POST", f"/api/v1/tenants/{TENANT}/catalogs", {"name": catalog})
        base = f"/api/v1/tenants/{TENANT}/catalogs/{catalog}"
        http.ok("POST", f"{base}/namespaces", {"namespace": ["ns"], "properties": {"o": catalog}})
        http.ok("POST", f"{base}/namespaces/ns/tables", {"name": "native"})
        client = RestCatalog("t", uri=url, warehouse=f"{TENANT}/{catalog}")
        table = client.create_table(("ns", "ice"), SCHEMA)
        for start in (0, 2):
            table.append(pa.table({"id": pa.array(range(start, start + 2), pa.int64())}))
    tenant = f"/api/v1/tenants/{TENANT}"
    http.ok("POST", f"{tenant}/principals", {"name": "etl", "secret": "etl-secret-0123456789"})
    http.ok("POST", f"{tenant}/principal-roles", {"name": "loaders"})
    http.ok("POST", f"{tenant}/principal-roles/loaders/principals", {"principal": "etl"})
    http.ok("POST", f"{tenant}/catalogs/a/catalog-roles", {"name": "writers"})
    http.ok(
        "POST",
        f"{tenant}/catalogs/a/catalog-roles/writers/grants",
        {"privilege": "TABLE_WRITE_DATA", "securable": {"kind": "table", "path": ["ns", "ice"]}},
    )
    http.ok(
        "POST",
        f"{tenant}/principal-roles/loaders/catalog-roles",
        {"catalog": "a", "catalog-role": "writers"},
    )


@pytest.fixture(scope="module")
def cluster(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("source-cluster")
    nodes = Cluster(
        kafka_bootstrap, f"cs{os.urandom(5).hex()}", root, 2, PARTITIONS, shared_warehouse=True
    ).start()
    try:
        nodes.wait_balanced()
        load(nodes.nodes[0].url)
        yield nodes
    finally:
        nodes.close()


def kafka_args(cluster: Cluster) -> list[str]:
    config = cluster.config
    return [
        "--kafka", config.bootstrap, "--topic-prefix", config.prefix,
        "--partitions", str(config.partitions),
    ]  # fmt: skip


def contents(out: Path) -> dict[str, list[str]]:
    """Every exported table's rows, in a comparable order."""
    found = {}
    for name in TABLES:
        rows = pq.read_table(out / name).to_pylist()
        found[name] = sorted(json.dumps(row, sort_keys=True, default=str) for row in rows)
    return found


def synced(cluster: Cluster) -> str:
    """The URL of a node whose view has applied every write: the other node than the one
    ``load`` wrote through, once it reads back the last write of each catalog and of
    the tenant's roles (the reads carry no consistency token, so it may trail the
    writes by a moment)."""
    url = cluster.nodes[1].url
    http, roles = Http(url), f"/api/v1/tenants/{TENANT}"
    deadline = time.monotonic() + 30
    while True:
        seen = {
            "snapshots": [
                len(
                    RestCatalog("t", uri=url, warehouse=f"{TENANT}/{c}")
                    .load_table(("ns", "ice"))
                    .metadata.snapshots
                )
                for c in CATALOGS
            ],
            "roles": http.ok("GET", f"{roles}/principal-roles/loaders/catalog-roles")[
                "catalog-roles"
            ],
            "grants": len(
                http.ok("GET", f"{roles}/catalogs/a/catalog-roles/writers/grants")["grants"]
            ),
        }
        if seen == {
            "snapshots": [2] * len(CATALOGS),
            "roles": [{"catalog": "a", "name": "writers"}],
            "grants": 1,
        }:
            return url
        assert time.monotonic() < deadline, seen
        time.sleep(0.1)


@pytest.mark.parametrize("scope", [[], ["--tenant", TENANT, "--catalog", "a"]])
def test_export_from_the_changelog_equals_export_from_a_node(
    spark: SparkSession, cluster: Cluster, tmp_path: Path, scope: list[str]
) -> None:
    url = synced(cluster)
    by_url = run_job(spark, "export", "--url", url, *scope, "--out", str(tmp_path / "u"), "--json")
    assert by_url.status == 0, by_url.stdout
    args = kafka_args(cluster)
    by_kafka = run_job(spark, "export", *args, *scope, "--out", str(tmp_path / "k"), "--json")
    assert by_kafka.status == 0, by_kafka.stdout
    assert by_kafka.summary["tables"] == by_url.summary["tables"]
    from_url = contents(tmp_path / "u")
    assert contents(tmp_path / "k") == from_url
    tables = [json.loads(r) for r in from_url["tables"]]
    assert {t["catalog"] for t in tables} == (set(CATALOGS) if not scope else {"a"})
    assert all(t["snapshots"] == 2 for t in tables if t["name"] == "ice")
    assert len(from_url["grants"]) == 5  # role, member, catalog role, role grant, grant


def test_audit_from_the_changelog_equals_audit_from_a_node(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    url = synced(cluster)
    reports: list[dict[str, Any]] = []
    for name, source in (("u", ["--url", url]), ("k", kafka_args(cluster))):
        ran = run_job(spark, "audit", *source, "--out", str(tmp_path / name), "--json")
        assert ran.status == 0, ran.stdout
        assert ran.summary["dangling"] == 0
        reports.append(json.loads(Path(ran.summary["report"]).read_text()))
    by_url, by_kafka = reports
    assert by_kafka["findings"] == by_url["findings"] == []
    assert by_kafka["catalogs"] == by_url["catalogs"] >= len(CATALOGS)
