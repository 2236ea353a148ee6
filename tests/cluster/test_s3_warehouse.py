"""docker-compose's storage, run: cluster nodes that seed every catalog created without
storage from one S3 warehouse (``METASTORE_WAREHOUSE=s3://<bucket>``, its FileIO
settings, the keys by reference, remote signing) on the test broker and the S3 test
server enforcing IAM. A table PyIceberg writes through one node, holding no S3 key of
its own (the node signs its requests), is read through the other, which signs too."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog

from harness.cluster import Cluster
from harness.s3 import S3Process
from tests.iceberg.support import SCHEMA, one_pyiceberg_worker, rows

pytestmark = pytest.mark.slow

SECRETS_ENV = "METASTORE_STORAGE_CREDENTIALS_WAREHOUSE"
REF = "/api/v1/tenants/default/catalogs/default/ref"
SYNC_TIMEOUT_S = 60.0
FSSPEC = {"py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO"}  # the FileIO that signs remotely


def head(url: str) -> str:
    reply = requests.get(url + REF, timeout=30)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["head"])


def in_sync(urls: tuple[str, ...]) -> None:
    """Wait until every node's view has the HEAD the first of ``urls`` answers."""
    wanted = head(urls[0])
    deadline = time.monotonic() + SYNC_TIMEOUT_S
    for url in urls[1:]:
        while head(url) != wanted:
            assert time.monotonic() < deadline, f"{url} never reached HEAD {wanted}"
            time.sleep(0.05)


def test_a_table_written_through_one_node_is_read_through_another(
    kafka_bootstrap: str, s3_iam_server: S3Process, tmp_path: Path
) -> None:
    s3 = s3_iam_server
    bucket = s3.make_bucket(f"wh-{uuid.uuid4().hex[:12]}")
    env = {  # docker-compose's node settings, on this bucket
        "METASTORE_WAREHOUSE": f"s3://{bucket}",
        "METASTORE_WAREHOUSE_IO": json.dumps(s3.io_properties()),
        "METASTORE_WAREHOUSE_CREDENTIALS": json.dumps({"env": SECRETS_ENV}),
        SECRETS_ENV: json.dumps(s3.admin.io_properties()),
        "METASTORE_STORAGE_ROOTS": f"s3://{bucket}",
        "METASTORE_WAREHOUSE_REMOTE_SIGNING": json.dumps({"enabled": True}),
    }
    cluster = Cluster(kafka_bootstrap, f"s{os.urandom(5).hex()}", tmp_path, size=2, env=env)
    try:
        cluster.start()
        first, second = (node.url for node in cluster.nodes)
        with one_pyiceberg_worker():
            writer = RestCatalog("first", uri=first, **FSSPEC)
            writer.create_namespace(("db",))
            table = writer.create_table(("db", "t"), SCHEMA)
            assert table.location() == f"s3://{bucket}/default/default/db/t"
            table.append(rows([1, 2, 3]))
            in_sync((first, second))  # the second node's view reaches the append
            read = RestCatalog("second", uri=second, **FSSPEC).load_table(("db", "t"))
            assert read.io.properties["s3.signer.endpoint"].startswith("v1/default/")
            assert sorted(read.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]
            read.append(rows([4]))  # and writes through the second node
            in_sync((second, first))
            again = writer.load_table(("db", "t"))
            assert sorted(again.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3, 4]
        stored = s3.keys_in(bucket, "default/default/db/t/")
        assert sum(k.endswith(".parquet") for k in stored) == 2, stored
        assert len(cluster.alive()) == 2
    finally:
        cluster.close()
    for node in cluster.nodes:
        log = Path(node.log_path).read_text(errors="replace")
        assert "Traceback" not in log, node.log_tail(80)
