"""A sweep in cluster mode, on the test broker: sent to a node that does not own the
catalog's partition (so forwarded), written by the owner as tombstones in the objects
topic; afterwards every node's view and a replay of the log agree, and the deleted
objects are gone everywhere while the piece a newer table reuses is kept."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog

from harness.cluster import QUIET_LEASES, Cluster, view_state
from harness.node import NodeProcess
from metastore.cluster.replay import replay
from metastore.cluster.view import ViewStore
from metastore.model.codec import default_codec
from metastore.pipeline.audit.integrity import audit_catalog
from metastore.pipeline.catalog_reader import CatalogRows
from tests.native.test_gc import (
    SCHEMA,
    T,
    catalog_rows_live_pieces,
    drop_and_age,
    mark,
    pieces,
    rows,
    stored,
    sweep,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("gc-cluster")
    nodes = Cluster(
        kafka_bootstrap, f"g{os.urandom(5).hex()}", root, size=2, env=QUIET_LEASES
    ).start()  # its views are compared with a replay
    yield nodes
    nodes.close()
    nodes.logs_without_tracebacks()


def _catalog_owned_by_other(cluster: Cluster, asked: NodeProcess) -> str:
    cluster.wait_balanced()
    for _ in range(1000):
        name = f"c{uuid.uuid4().hex[:10]}"
        owner = cluster.wait_owner(cluster.partition(T, name))
        if owner is not asked:
            return name
    raise AssertionError("no catalog name maps to the other node's partitions")


def _converged(nodes: list[NodeProcess], timeout: float = 60.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = [view_state(n) for n in nodes]
        if all(s["offsets"] == states[0]["offsets"] for s in states):
            return states
        time.sleep(0.2)
    raise TimeoutError("the nodes' views did not converge")


def test_a_forwarded_sweep_deletes_on_every_view_and_in_replay(
    cluster: Cluster, tmp_path: Path
) -> None:
    asked = cluster.nodes[0]
    name = _catalog_owned_by_other(cluster, asked)
    storage = (tmp_path / "warehouse").resolve()
    reply = requests.post(
        f"{asked.url}/api/v1/tenants/{T}/catalogs",
        json={"name": name, "storage": {"root": storage.as_uri()}},
        timeout=30,
    )
    assert reply.status_code == 201, reply.text
    client = RestCatalog("gc", uri=asked.url, warehouse=name)
    client.create_namespace("ns")
    client.create_table(("ns", "a"), SCHEMA)
    drop_and_age(client, "a")
    head, candidates = mark(CatalogRows(T, name, rows(asked), default_codec()))
    client.create_table(("ns", "b"), SCHEMA)  # reuses a piece the mark found unreachable
    shared = pieces(candidates) & set(catalog_rows_live_pieces(asked, name, "b"))
    assert shared

    result = sweep(asked, name, head, candidates)  # forwarded to the owner
    assert result["deleted"] > 0 and result["spared"] >= len(shared)

    states = _converged(cluster.nodes)
    summary = replay(cluster.config, tmp_path / "replayed", progress=False, idle_s=1.0)
    assert {s["digest"] for s in states} == {summary.digest}, (states, summary)
    gone = candidates - shared
    for node in cluster.nodes:
        found = CatalogRows(T, name, rows(node), default_codec())
        assert not gone & stored(found), node.url
        assert shared <= stored(found), node.url
        audit = audit_catalog(found, lambda path, storage: True)
        assert audit.findings == [], [f.to_json() for f in audit.findings]
    replayed = ViewStore(tmp_path / "replayed", cluster.config)
    try:
        listed = sorted(gone, key=str)
        assert replayed.get_objects(listed) == [None] * len(listed)
        assert None not in replayed.get_objects(sorted(shared, key=str))
    finally:
        replayed.close()
    assert client.load_table(("ns", "b")).schema().as_struct() == SCHEMA.as_struct()
    client.close()
