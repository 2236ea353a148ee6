"""Catalogs from before storage was recorded keep the storage they were created with.

The earlier version kept no storage record: a catalog's files went to the node's
``<warehouse>/<tenant>/<catalog>``. Its records are made here by the real engine
on a stopped node's RocksDB: a catalog with a table and rows, whose storage record
is then deleted, and a catalog created as the earlier version created it. The new
node records each one's storage on its first start (the node's warehouse then),
PyIceberg appends to the old table, and a later start with another warehouse
setting changes nothing for them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import requests
from pyiceberg.catalog.rest import RestCatalog

from harness.engine import build_engine
from harness.node import NodeProcess
from harness.process import free_port
from metastore.catalog.service import Metastore
from metastore.engine.commits import CommitRequest
from metastore.engine.lanes import CommitLanes
from metastore.model.changes import DeleteEntity
from metastore.persistence.rocksdb import RocksDBPersistence
from metastore.storage.settings import STORAGE_RECORD
from tests.iceberg.support import SCHEMA, rows

CATALOGS = "/api/v1/tenants/default/catalogs"


@contextmanager
def engine(data_dir: Path) -> Iterator[tuple[Metastore, CommitLanes]]:
    """The real commit engine on a stopped node's RocksDB."""
    persistence = RocksDBPersistence(data_dir / "rocksdb")
    with ThreadPoolExecutor(max_workers=1) as executor:
        try:
            yield build_engine(persistence, executor, node_id=1022)
        finally:
            persistence.close()


def write_earlier_records(data_dir: Path) -> None:
    """Catalog ``old`` loses its storage record; catalog ``bare`` is created without one."""

    async def write() -> None:
        with engine(data_dir) as (metastore, lanes):
            request = CommitRequest(
                changes=(DeleteEntity(STORAGE_RECORD),), principal="system", operation="old"
            )
            await metastore.commit("default", "old", request)
            await metastore.create_catalog("default", "bare", {}, "system")
            for catalog in ("old", "bare"):
                page = metastore.list_entities("default", catalog, (), STORAGE_RECORD.kind)
                assert "storage" not in [e.path[-1] for e in page.items], page.items
            await lanes.close()

    asyncio.run(write())


@contextmanager
def node(tmp_path: Path, warehouse: Path, port: int) -> Iterator[NodeProcess]:
    env = {"METASTORE_WAREHOUSE": warehouse.as_uri()}
    process = NodeProcess(tmp_path / "data", port=port, env=env, log_path=tmp_path / "node.log")
    with process:
        yield process
    log = process.log_path.read_text(errors="replace")
    assert "Traceback" not in log, process.log_tail(60)


def storage_root(url: str, catalog: str) -> str:
    reply = requests.get(f"{url}{CATALOGS}/{catalog}", timeout=30)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["storage"]["root"])


def ids(client: RestCatalog, name: tuple[str, str]) -> list[int]:
    return sorted(client.load_table(name).scan().to_arrow()["id"].to_pylist())


def test_an_earlier_catalog_keeps_its_warehouse_across_setting_changes(tmp_path: Path) -> None:
    then, now = (tmp_path / "warehouse-then").resolve(), (tmp_path / "warehouse-now").resolve()
    port = free_port()
    with node(tmp_path, then, port) as process:
        reply = requests.post(f"{process.url}{CATALOGS}", json={"name": "old"}, timeout=30)
        assert reply.status_code == 201, reply.text
        client = RestCatalog("c", uri=process.url, warehouse="old")
        client.create_namespace(("db",))
        client.create_table(("db", "t"), SCHEMA).append(rows([1, 2]))

    write_earlier_records(tmp_path / "data")

    with node(tmp_path, then, port) as process:  # first start of this version: recorded
        assert storage_root(process.url, "old") == f"{then.as_uri()}/default/old"
        assert storage_root(process.url, "bare") == f"{then.as_uri()}/default/bare"
        assert "recorded the storage of catalog default/old" in process.log_path.read_text()
        client = RestCatalog("c", uri=process.url, warehouse="old")
        client.load_table(("db", "t")).append(rows([3]))
        assert ids(client, ("db", "t")) == [1, 2, 3]

    with node(tmp_path, now, port) as process:  # the node's setting moved: the catalogs stay
        for catalog in ("old", "bare"):
            assert storage_root(process.url, catalog) == f"{then.as_uri()}/default/{catalog}"
        assert storage_root(process.url, "default").startswith(then.as_uri())
        client = RestCatalog("c", uri=process.url, warehouse="old")
        client.load_table(("db", "t")).append(rows([4]))
        assert ids(client, ("db", "t")) == [1, 2, 3, 4]
        bare = RestCatalog("b", uri=process.url, warehouse="bare")
        bare.create_namespace(("db",))
        table = bare.create_table(("db", "u"), SCHEMA)
        table.append(rows([5]))
        assert table.location() == f"{then.as_uri()}/default/bare/db/u"
        fresh = requests.post(f"{process.url}{CATALOGS}", json={"name": "fresh"}, timeout=30)
        assert fresh.json()["storage"]["root"] == f"{now.as_uri()}/default/fresh", fresh.text
    assert not (now / "default" / "old").exists() and not (now / "default" / "bare").exists()
