"""Files clients wrote into a catalog's storage, read by the node only within a bound.

A register names a metadata file the client put under its table's location; before the
bound, a 3 GiB file there grew the node until the kernel killed it. Each refusal is a
400 naming the file (and the setting, when it is the size), nothing is registered, and
the node goes on; the same file within the bound registers. A purge reads the dropped
table's manifests the same way. On the local file system and in an S3 bucket (moto's
server), with ``METASTORE_MAX_METADATA_FILE_BYTES`` at 256 KiB so the files stay small.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog

from harness.node import NodeProcess
from harness.s3 import KEYS, S3Process
from tests.iceberg.support import SCHEMA, SECRETS_ENV, Http, S3Lake, assert_error, rows

LIMIT = 256 * 1024
SETTING = "METASTORE_MAX_METADATA_FILE_BYTES"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    root = tmp_path_factory.mktemp("bounded")
    env = {SETTING: str(LIMIT), SECRETS_ENV: json.dumps(KEYS.io_properties())}
    with NodeProcess(root / "data", log_path=root / "node.log", env=env) as process:
        yield process
    assert "Traceback" not in process.log_path.read_text(errors="replace"), process.log_tail(60)


def padded(metadata: dict[str, Any], size: int) -> bytes:
    """``metadata`` as JSON of exactly ``size`` bytes, padded in a property."""
    metadata = {**metadata, "properties": {**metadata.get("properties", {}), "pad": ""}}
    short = len(json.dumps(metadata).encode())
    metadata["properties"]["pad"] = "x" * (size - short)
    data = json.dumps(metadata).encode()
    assert len(data) == size
    return data


class Lake:
    """One catalog of the node, its client, and raw HTTP beside it."""

    def __init__(self, node: NodeProcess, name: str, client: RestCatalog) -> None:
        self.http = Http(node.url, name)
        self.client = client
        client.create_namespace(("db",))
        self.table = client.create_table(("db", "orig"), SCHEMA)
        self.location = self.table.metadata.location
        with self.table.io.new_input(self.table.metadata_location).open() as stream:
            self.metadata = json.loads(stream.read())
        client.drop_table(("db", "orig"))  # its files stay: its name may register them again

    def register(self, name: str, metadata_location: str) -> requests.Response:
        body = {"name": name, "metadata-location": metadata_location}
        return self.http.call("POST", "/namespaces/db/register", json=body)

    def assert_refused(self, name: str, metadata_location: str, words: str) -> None:
        reply = self.register(name, metadata_location)
        assert_error(reply, 400, "BadRequestException")
        message = reply.json()["error"]["message"]
        assert metadata_location in message and words in message, message
        assert_error(self.http.call("GET", f"/namespaces/db/tables/{name}"), 404)


def local_lake(node: NodeProcess) -> Lake:
    name = f"c{uuid.uuid4().hex[:10]}"
    reply = requests.post(f"{node.url}/api/v1/tenants/default/catalogs", json={"name": name})
    assert reply.status_code == 201, reply.text
    return Lake(node, name, RestCatalog("local", uri=node.url, warehouse=name))


def test_a_local_file_past_the_bound_is_refused_and_within_it_registers(
    node: NodeProcess,
) -> None:
    lake = local_lake(node)
    folder = Path(lake.location.removeprefix("file://")) / "metadata"
    over = folder / "00009-over.metadata.json"
    over.write_bytes(padded(lake.metadata, LIMIT + 1))
    lake.assert_refused("over", over.as_uri(), f"is larger than {LIMIT:,} bytes ({SETTING})")

    sparse = folder / "00010-sparse.metadata.json"  # 3 GiB that take no disk
    with sparse.open("wb") as file:
        file.truncate(3 << 30)
    lake.assert_refused("sparse", sparse.as_uri(), "is larger than")

    at = folder / "00011-at.metadata.json"
    at.write_bytes(padded(lake.metadata, LIMIT))
    registered = lake.register("orig", at.as_uri())
    assert registered.status_code == 200, registered.text
    assert set(lake.client.load_table(("db", "orig")).properties["pad"]) == {"x"}


def test_a_local_fifo_or_a_link_to_a_device_is_refused_without_waiting(node: NodeProcess) -> None:
    lake = local_lake(node)
    folder = Path(lake.location.removeprefix("file://")) / "metadata"
    fifo = folder / "00009-fifo.metadata.json"
    os.mkfifo(fifo)  # opening it to read would wait for a writer forever
    lake.assert_refused("fifo", fifo.as_uri(), "is not a regular file")
    zero = folder / "00010-zero.metadata.json"
    zero.symlink_to("/dev/zero")  # never ends; resolved, it is outside the catalog
    lake.assert_refused("zero", zero.as_uri(), "is outside")
    assert requests.get(f"{node.url}/health", timeout=30).status_code == 200


def test_an_s3_object_past_the_bound_is_refused_by_its_size(
    node: NodeProcess, s3_server: S3Process
) -> None:
    bucket = s3_server.make_bucket(f"bounded-{uuid.uuid4().hex[:12]}")
    s3_lake = S3Lake(node, s3_server, bucket)
    name, _ = s3_lake.new_catalog()
    client = s3_lake.client(name)
    lake = Lake(node, name, client)
    s3 = s3_server.client()
    prefix = lake.location.removeprefix(f"s3://{bucket}/")
    for key, size in (("over", LIMIT + 1), ("at", LIMIT)):
        body = padded(lake.metadata, size)
        s3.put_object(Bucket=bucket, Key=f"{prefix}/metadata/00009-{key}.metadata.json", Body=body)
    over = f"{lake.location}/metadata/00009-over.metadata.json"
    lake.assert_refused("over", over, f"is larger than {LIMIT:,} bytes ({SETTING})")
    registered = lake.register("orig", f"{lake.location}/metadata/00009-at.metadata.json")
    assert registered.status_code == 200, registered.text


def test_a_purge_reads_no_manifest_past_the_bound_and_deletes_the_rest(
    node: NodeProcess,
) -> None:
    """The purge logs the manifest it would not read and goes on with the table's other
    files; a FIFO in its place does not hold the purge either."""
    lake = local_lake(node)
    table = lake.client.create_table(("db", "t"), SCHEMA)
    table.append(rows([1, 2]))
    table.append(rows([3]))
    table = lake.client.load_table(("db", "t"))
    snapshot = table.current_snapshot()
    assert snapshot is not None
    big, fifo = (
        Path(m.manifest_path.removeprefix("file://")) for m in snapshot.manifests(table.io)
    )
    big.write_bytes(b"\0" * (LIMIT + 1))
    big_list = Path(snapshot.manifest_list.removeprefix("file://"))
    fifo.unlink()
    os.mkfifo(fifo)
    metadata_file = Path(table.metadata_location.removeprefix("file://"))
    assert lake.client.purge_table(("db", "t")) is None
    log = node.log_path.read_text(errors="replace")
    assert f"purge: cannot read manifest {big.as_uri()}: BadRequest: manifest " in log
    assert f"is larger than {LIMIT:,} bytes ({SETTING})" in log
    assert f"purge: cannot read manifest {fifo.as_uri()}: BadRequest: " in log
    assert not metadata_file.exists() and not big_list.exists()  # the rest went


def test_a_commit_whose_metadata_file_the_node_would_not_read_back_is_refused(
    node: NodeProcess,
) -> None:
    """The node writes no metadata file past the bound it reads files by: a retry of the
    commit, a load after a restart or a register would refuse to read it, and each commit
    of a table whose metadata grows without bound costs the node more."""
    lake = local_lake(node)
    table = lake.client.create_table(("db", "grows"), SCHEMA)
    folder = Path(table.metadata.location.removeprefix("file://")) / "metadata"
    before = sorted(folder.iterdir())
    path = "/namespaces/db/tables/grows"
    big = {f"p{i}": "x" * 60_000 for i in range(5)}  # 300 KB of properties, 5 bodies' worth
    body = {"updates": [{"action": "set-properties", "updates": big}]}
    reply = lake.http.call("POST", path, json=body)
    assert_error(reply, 400, "BadRequestException")
    message = reply.json()["error"]["message"]
    assert f"more than the {LIMIT:,} this node reads ({SETTING})" in message, message
    assert sorted(folder.iterdir()) == before  # nothing written
    loaded = lake.http.call("GET", path).json()
    assert loaded["metadata-location"] == table.metadata_location
    smaller = {f"p{i}": "x" * 60_000 for i in range(3)}
    body = {"updates": [{"action": "set-properties", "updates": smaller}]}
    assert lake.http.call("POST", path, json=body).status_code == 200
    assert lake.client.load_table(("db", "grows")).properties["p2"] == "x" * 60_000
