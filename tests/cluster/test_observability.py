"""Metrics and logs of real cluster nodes: a write sent to a node that does not own its
catalog is forwarded to the owner, and both nodes' JSON log lines name the same request
and trace; the forward, the owner's transaction and the view's lag are in ``/metrics``."""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest

from harness.cluster import Cluster
from tests.native.support import TIMEOUT, Api, Catalog, assert_status
from tests.node.test_observability import NAMESPACES_ROUTE, access_line, count, log_lines, scrape

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root: Path = tmp_path_factory.mktemp("observed-cluster")
    env = {"METASTORE_LOG_FORMAT": "json"}
    nodes = Cluster(kafka_bootstrap, f"o{os.urandom(5).hex()}", root, size=2, env=env).start()
    try:
        nodes.wait_balanced()
        yield nodes
    finally:
        nodes.close()
    nodes.logs_without_tracebacks()


@pytest.fixture
async def apis(cluster: Cluster) -> AsyncIterator[list[Api]]:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        yield [Api(session, node.url) for node in cluster.nodes]


async def catalog_owned_by(cluster: Cluster, api: Api, owner: int) -> Catalog:
    """A fresh catalog whose partition node ``owner`` owns."""
    tenant = f"t{secrets.token_hex(4)}"
    await api.create_tenant(tenant)
    for i in range(200):
        name = f"c{i}"
        found = cluster.owner_of(cluster.partition(tenant, name))
        if found is cluster.nodes[owner]:
            return await api.create_catalog(tenant, name)
    raise AssertionError(f"node {owner} owns none of 200 catalogs' partitions")


async def test_a_forwarded_write_keeps_its_request_id_and_trace_on_the_owner(
    cluster: Cluster, apis: list[Api]
) -> None:
    entry, owner = apis
    catalog = await catalog_owned_by(cluster, entry, owner=1)
    entry_before, owner_before = await scrape(entry), await scrape(owner)

    request_id = f"fwd-{secrets.token_hex(6)}"
    trace = secrets.token_hex(16)
    headers = {"X-Request-Id": request_id, "traceparent": f"00-{trace}-{'cd' * 8}-01"}
    body = {"namespace": ["traced"], "properties": {}}
    reply = await entry.call("POST", catalog.path + "/namespaces", json_body=body, headers=headers)
    assert_status(reply, 201)

    at_entry = await access_line(cluster.nodes[0], request_id)
    at_owner = await access_line(cluster.nodes[1], request_id)
    for line in (at_entry, at_owner):
        assert line["trace_id"] == trace and line["route"] == NAMESPACES_ROUTE, line
        assert line["status"] == 201 and line["tenant"] == catalog.tenant, line
    # each node is its own span of the trace
    assert len({at_entry["span_id"], at_owner["span_id"], "cd" * 8}) == 3
    for node in cluster.nodes:
        log_lines(node)  # every line of both nodes is one JSON object

    entry_after, owner_after = await scrape(entry), await scrape(owner)
    forwards = "metastore_forward_duration_seconds"
    answered = count(entry_after, forwards, outcome="answered")
    assert answered == count(entry_before, forwards, outcome="answered") + 1
    transactions = "metastore_owner_transaction_duration_seconds"
    committed = count(owner_after, transactions, outcome="committed")
    assert committed >= count(owner_before, transactions, outcome="committed") + 1
    writes = "metastore_durable_write_duration_seconds"
    assert count(owner_after, writes) >= count(owner_before, writes) + 1
    for families in (entry_after, owner_after):
        for name in ("metastore_view_lag_records", "metastore_view_lag_seconds"):
            assert families[name].type == "gauge", name
            (sample,) = families[name].samples
            assert sample.value >= 0, sample


async def test_a_write_without_ids_is_forwarded_with_the_entry_nodes_ids(
    cluster: Cluster, apis: list[Api]
) -> None:
    """The entry node makes the request id and starts the trace; the owner's line names both."""
    entry, _ = apis
    catalog = await catalog_owned_by(cluster, entry, owner=1)
    body = {"namespace": ["untraced"], "properties": {}}
    reply = await entry.call("POST", catalog.path + "/namespaces", json_body=body)
    assert_status(reply, 201)
    request_id = {k.lower(): v for k, v in reply.headers.items()}["x-request-id"]
    at_entry = await access_line(cluster.nodes[0], request_id)
    at_owner = await access_line(cluster.nodes[1], request_id)
    assert at_owner["trace_id"] == at_entry["trace_id"], (at_entry, at_owner)
    assert at_owner["span_id"] != at_entry["span_id"]
