"""A catalog whose storage is an S3 bucket (moto's S3 server on loopback), used by real
PyIceberg: create, append, scan, rename, and purge (the purged table's objects are
really gone from the bucket; another table's objects stay). The node reaches the
bucket with the catalog's storage settings: ``io-properties`` (endpoint, path-style
addressing) and its secret keys by reference (``credentials``)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table

from harness.cluster import Cluster
from harness.node import NodeProcess
from harness.s3 import KEYS, S3Process
from tests.iceberg.support import BY_REGION, SCHEMA, SECRETS_ENV, TENANT, S3Lake, rows


@pytest.fixture(scope="module")
def lake(s3_server: S3Process, tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Lake]:
    root = tmp_path_factory.mktemp("s3-warehouse")
    bucket = s3_server.make_bucket(f"lake-{uuid.uuid4().hex[:12]}")
    env = {SECRETS_ENV: json.dumps(KEYS.io_properties())}
    node = NodeProcess(root / "data", log_path=root / "node.log", env=env)
    with node:
        yield S3Lake(node, s3_server, bucket)
    log = Path(node.log_path).read_text(errors="replace")
    assert "Traceback" not in log, node.log_tail(80)


def key_of(uri: str, bucket: str) -> str:
    assert uri.startswith(f"s3://{bucket}/"), uri
    return uri.removeprefix(f"s3://{bucket}/")


def test_create_append_scan_on_s3(lake: S3Lake) -> None:
    name, prefix = lake.new_catalog()
    catalog = lake.client(name)
    catalog.create_namespace(("db",))
    table = catalog.create_table(("db", "events"), SCHEMA, partition_spec=BY_REGION)
    assert table.location() == f"s3://{lake.bucket}/{prefix}/db/events"
    table.append(rows([1, 2, 3], "eu"))
    table.append(rows([4], "us"))
    again = lake.client(name).load_table(("db", "events"))
    assert sorted(again.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3, 4]
    eu = again.scan(row_filter="region == 'eu'").to_arrow()
    assert sorted(eu["id"].to_pylist()) == [1, 2, 3]
    stored = lake.keys(f"{prefix}/db/events/")
    assert key_of(again.metadata_location, lake.bucket) in stored
    assert sum(k.endswith(".parquet") for k in stored) == 2
    assert sum(k.endswith(".metadata.json") for k in stored) == 3  # create + 2 appends


def test_rename_keeps_the_files_and_the_rows(lake: S3Lake) -> None:
    name, _ = lake.new_catalog()
    catalog = lake.client(name)
    catalog.create_namespace(("a",))
    catalog.create_namespace(("b",))
    table = catalog.create_table(("a", "t"), SCHEMA)
    table.append(rows([7, 8]))
    catalog.rename_table(("a", "t"), ("b", "u"))
    with pytest.raises(NoSuchTableError):
        catalog.load_table(("a", "t"))
    moved = catalog.load_table(("b", "u"))
    assert moved.location() == table.location()  # a rename moves no file
    assert sorted(moved.scan().to_arrow()["id"].to_pylist()) == [7, 8]
    moved.append(rows([9]))
    again = catalog.load_table(("b", "u"))
    assert sorted(again.scan().to_arrow()["id"].to_pylist()) == [7, 8, 9]


def test_purge_deletes_the_tables_objects_and_nothing_else(lake: S3Lake) -> None:
    name, prefix = lake.new_catalog()
    catalog = lake.client(name)
    catalog.create_namespace(("db",))
    purged = catalog.create_table(("db", "purged"), SCHEMA)
    purged.append(rows([1]))
    purged.append(rows([2]))
    # a table whose location starts with the purged one's name: prefixes, not folders
    neighbour = catalog.create_table(("db", "purged_too"), SCHEMA)
    neighbour.append(rows([3]))
    dropped = catalog.create_table(("db", "dropped"), SCHEMA)
    dropped.append(rows([4]))
    mine = lake.keys(f"{prefix}/db/purged/")
    theirs = lake.keys(f"{prefix}/db/purged_too/")
    kept = lake.keys(f"{prefix}/db/dropped/")
    assert any(k.endswith(".parquet") for k in mine) and theirs and kept

    catalog.purge_table(("db", "purged"))
    catalog.drop_table(("db", "dropped"))  # without purge: its files stay

    # what stays is what a purge leaves on a file system too: empty folders (the
    # markers pyarrow's S3 filesystem writes when a folder's last object goes)
    left = lake.keys(f"{prefix}/db/purged/")
    assert all(k.endswith("/") for k in left), left
    sizes = {lake.s3.client().head_object(Bucket=lake.bucket, Key=k)["ContentLength"] for k in left}
    assert sizes <= {0}, sizes
    assert lake.keys(f"{prefix}/db/purged_too/") == theirs
    assert lake.keys(f"{prefix}/db/dropped/") == kept
    neighbour = catalog.load_table(("db", "purged_too"))
    assert neighbour.scan().to_arrow()["id"].to_pylist() == [3]


@pytest.mark.slow
def applied(reader: RestCatalog, snapshot_id: int | None, timeout: float = 30.0) -> Table:
    """``db.t`` as ``reader``'s node serves it once that node's view holds ``snapshot_id``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            table = reader.load_table(("db", "t"))
        except NoSuchTableError:  # not even the create has reached it yet
            served = None
        else:
            served = table.metadata.current_snapshot_id
            if served == snapshot_id:
                return table
        assert time.monotonic() < deadline, (served, snapshot_id)
        time.sleep(0.1)


def test_a_cluster_shares_one_s3_warehouse(
    s3_server: S3Process, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Two cluster nodes seeded with one S3 warehouse: a table written through one node
    is read and purged through the other (catalogs of both owners, so writes are
    forwarded both ways)."""
    bucket = s3_server.make_bucket(f"cluster-{uuid.uuid4().hex[:12]}")
    env = {
        "METASTORE_WAREHOUSE": f"s3://{bucket}/wh",
        "METASTORE_WAREHOUSE_IO": json.dumps(s3_server.io_properties()),
        "METASTORE_WAREHOUSE_CREDENTIALS": json.dumps({"env": SECRETS_ENV}),
        SECRETS_ENV: json.dumps(KEYS.io_properties()),
    }
    nodes = Cluster(kafka_bootstrap, f"s{uuid.uuid4().hex[:10]}", tmp_path, size=2, env=env)
    try:
        nodes.start()
        first, second = nodes.nodes
        names = [f"c{i}{uuid.uuid4().hex[:8]}" for i in range(4)]
        for name in names:
            reply = requests.post(
                f"{first.url}/api/v1/tenants/{TENANT}/catalogs", json={"name": name}, timeout=60
            )
            assert reply.status_code == 201, reply.text
        properties = {**s3_server.io_properties(), **KEYS.io_properties()}
        for name in names:
            writer = RestCatalog("w", uri=first.url, warehouse=name, **properties)
            writer.create_namespace(("db",))
            written = writer.create_table(("db", "t"), SCHEMA)
            written.append(rows([1, 2]))
            reader = RestCatalog("r", uri=second.url, warehouse=name, **properties)
            # PyIceberg sends no consistency token: the other node serves the append
            # once its view has applied it
            table = applied(reader, written.metadata.current_snapshot_id)
            assert table.location() == f"s3://{bucket}/wh/{TENANT}/{name}/db/t"
            assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [1, 2]
            reader.purge_table(("db", "t"))
            left = s3_server.keys_in(bucket, f"wh/{TENANT}/{name}/db/t/")
            assert all(k.endswith("/") for k in left), left
        assert len(nodes.alive()) == 2
    finally:
        nodes.close()
