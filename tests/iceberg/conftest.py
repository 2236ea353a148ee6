"""Real PyIceberg (``RestCatalog``) against a real node (a child process).

``iceberg_server`` is module-scoped and parametrized by deployment mode, so the
cluster mode joins as one more parameter; each test gets its own catalog (its
own prefix and warehouse directory) on the shared node. Embedded, catalogs take
the storage the node seeds (``<data dir>/warehouse/<tenant>/<catalog>``); in a
cluster each node has its own warehouse setting, so catalogs are created with a
storage root every node reaches.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog

from harness.cluster import Cluster
from harness.node import NodeProcess

TENANT = "default"


@dataclass(frozen=True)
class Server:
    url: str
    data_dir: Path
    node_urls: tuple[str, ...] = ()  # every node of a cluster (each has its own /metrics)
    storage: Path | None = None  # create catalogs with storage roots under it (else seeded)

    def new_catalog(self) -> str:
        name = f"c{uuid.uuid4().hex[:10]}"
        body: dict[str, object] = {"name": name}
        if self.storage is not None:
            body["storage"] = {"root": self.warehouse(name).as_uri()}
        reply = requests.post(f"{self.url}/api/v1/tenants/{TENANT}/catalogs", json=body, timeout=30)
        assert reply.status_code == 201, reply.text
        assert reply.json()["storage"]["root"] == self.warehouse(name).as_uri(), reply.text
        return name

    def client(self, catalog: str, **properties: str) -> RestCatalog:
        return RestCatalog("test", uri=self.url, warehouse=catalog, **properties)

    def warehouse(self, catalog: str) -> Path:
        """Where the catalog's tables go by default (its storage root)."""
        base = self.storage if self.storage is not None else self.data_dir / "warehouse"
        return base / TENANT / catalog


def _node(root: Path, env: dict[str, str] | None = None) -> NodeProcess:
    return NodeProcess(root / "data", log_path=root / "node.log", env=env)


def _check_log(process: NodeProcess) -> None:
    log = process.log_path.read_text(errors="replace")
    assert "Traceback" not in log, f"the node logged an unhandled error:\n{process.log_tail(80)}"


@pytest.fixture(scope="module", params=["embedded", "cluster"])
def iceberg_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    root = tmp_path_factory.mktemp(f"iceberg-{request.param}")
    if request.param == "cluster":
        yield from _cluster_server(request, root)
        return
    process = _node(root)
    with process:
        yield Server(process.url, (root / "data").resolve())
        assert process.proc is not None and process.proc.poll() is None, process.log_tail()
    _check_log(process)


def _cluster_server(request: pytest.FixtureRequest, root: Path) -> Iterator[Server]:
    """Two cluster nodes, each with its own warehouse setting; every catalog is created
    with a storage root in one shared directory. The client talks to the first node,
    so the writes of every catalog whose partition the second owns are forwarded."""
    bootstrap = request.getfixturevalue("kafka_bootstrap")
    shared = (root / "shared" / "warehouse").resolve()
    shared.mkdir(parents=True)
    nodes = Cluster(bootstrap, f"i{uuid.uuid4().hex[:10]}", root / "nodes", size=2)
    try:
        nodes.start()
        urls = tuple(n.url for n in nodes.nodes)
        yield Server(nodes.nodes[0].url, shared.parent, urls, storage=shared)
        assert len(nodes.alive()) == 2, nodes.nodes[0].log_tail()
    finally:
        nodes.close()
    for node in nodes.nodes:
        _check_log(node)


@pytest.fixture
def catalog_name(iceberg_server: Server) -> str:
    return iceberg_server.new_catalog()


@pytest.fixture
def catalog(iceberg_server: Server, catalog_name: str) -> Iterator[RestCatalog]:
    client = iceberg_server.client(catalog_name)
    yield client
    client.close()


@pytest.fixture(scope="module")
def secured_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A node with authentication on and one client ``alice:s3cret-alice``, a service
    admin (grants have tests of their own)."""
    root = tmp_path_factory.mktemp("iceberg-auth")
    env = {
        "METASTORE_AUTH": "on",
        "METASTORE_AUTH_CLIENTS": "alice:s3cret-alice",
        "METASTORE_AUTH_ADMINS": "alice",
    }
    process = _node(root, env)
    with process:
        yield Server(process.url, (root / "data").resolve())
    _check_log(process)
