"""Storage belongs to the catalog: three nodes that agree on nothing but the broker.

Each node has its own data directory and its own warehouse setting (cluster mode
refuses the node-local default, so each is set explicitly, to a different
place). A catalog created with a storage root in a directory all of them reach
is the same catalog on every node: PyIceberg creates one table through each
node and appends to every table through every node, and every node reads every
row back. Before storage was the catalog's, each node checked locations against
its own warehouse, and most of these appends failed with "outside this catalog's
warehouse".
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from harness.cluster import Cluster

pytestmark = pytest.mark.slow

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "via", StringType(), required=False),
)
CATALOG = "shared"
REF = f"/api/v1/tenants/default/catalogs/{CATALOG}/ref"
SYNC_TIMEOUT_S = 60.0


def rows(ids: list[int], via: str) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "via": pa.array([via] * len(ids))})


def head(url: str) -> str | None:
    """The catalog's HEAD on a node, or None while its view does not hold the catalog
    yet (a view applies the log a moment after the writer's node answered)."""
    reply = requests.get(url + REF, timeout=30)
    if reply.status_code == 404 and "NoSuchWarehouseException" in reply.text:
        return None
    assert reply.status_code == 200, reply.text
    return str(reply.json()["head"])


def in_sync(cluster: Cluster, writer: str) -> None:
    """Wait until every node's view has the catalog's HEAD the writer answered from."""
    wanted = head(writer)
    assert wanted is not None, "the writer's own node answered without the catalog"
    deadline = time.monotonic() + SYNC_TIMEOUT_S
    for node in cluster.nodes:
        while head(node.url) != wanted:
            assert time.monotonic() < deadline, f"{node.url} never reached HEAD {wanted}"
            time.sleep(0.05)


def files_under(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if p.is_file()] if path.exists() else []


def test_every_node_appends_to_every_table_of_a_shared_catalog(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    cluster = Cluster(kafka_bootstrap, f"w{os.urandom(5).hex()}", tmp_path / "nodes", size=3)
    shared = (tmp_path / "shared" / "warehouse").resolve()
    warehouses = [cluster.warehouse(i) for i in range(3)]
    assert len(set(warehouses)) == 3  # no shared node setting
    try:
        cluster.start()
        urls = [node.url for node in cluster.nodes]
        body = {"name": CATALOG, "storage": {"root": shared.as_uri()}}
        created = requests.post(f"{urls[1]}/api/v1/tenants/default/catalogs", json=body, timeout=60)
        assert created.status_code == 201, created.text
        in_sync(cluster, urls[1])
        for url in urls:  # every node shows the same storage, from the changelog
            shown = requests.get(f"{url}/api/v1/tenants/default/catalogs/{CATALOG}", timeout=30)
            assert shown.json()["storage"]["root"] == shared.as_uri(), shown.text
        clients = [RestCatalog(f"n{i}", uri=url, warehouse=CATALOG) for i, url in enumerate(urls)]
        clients[2].create_namespace(("db",))
        in_sync(cluster, urls[2])
        names = [f"t{i}" for i in range(3)]
        for i, name in enumerate(names):  # one table created through each node
            clients[i].create_table(("db", name), SCHEMA)
            in_sync(cluster, urls[i])

        expected: dict[str, list[int]] = {name: [] for name in names}
        failures: list[str] = []
        next_id = 0
        for _ in range(2):
            for name in names:
                for j, client in enumerate(clients):  # every node, the creator's too
                    next_id += 1
                    try:
                        client.load_table(("db", name)).append(rows([next_id], f"n{j}"))
                    except Exception as exc:
                        failures.append(f"append to {name} through node {j}: {exc!r}")
                        continue
                    expected[name].append(next_id)
                    in_sync(cluster, urls[j])
        assert failures == [], failures

        for j, client in enumerate(clients):  # every row, read back through every node
            for name in names:
                table = client.load_table(("db", name))
                data = table.scan().to_arrow().to_pydict()
                assert sorted(data["id"]) == expected[name], (j, name, data)
                assert set(data["via"]) == {"n0", "n1", "n2"}, (j, name, data)
                assert table.location() == f"{shared.as_uri()}/db/{name}", table.location()
        for client in clients:
            client.close()
        assert files_under(shared), "the tables' files are in the catalog's storage"
        for warehouse in warehouses:  # and in no node's own warehouse
            assert files_under(warehouse / "default" / CATALOG) == []
    finally:
        cluster.close()
    cluster.logs_without_tracebacks()
