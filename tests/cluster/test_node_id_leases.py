"""A node whose node-id lease was lost leases a node id again and writes again, with no
restart (``metastore.engine.lease_keeper``).

Two real nodes on one broker, with 3-second leases. The node that does not own the
leases' partition stops (SIGSTOP: a long pause, as a frozen VM or a debugger would
make) past its lease's end; meanwhile an operator's lease collection through the
other node removes the expired lease, as
``POST /api/v1/admin/gc/leases`` does for any node gone that long. When the stopped
node resumes, its renewal finds its lease gone: it has lost it, must never mint with
that node id again, and leases one anew. It then writes with the new one: a table it
creates in a partition it owns carries an entity id minted with the node id its
health names.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from harness.cluster import Cluster, get_reply, health
from harness.node import NodeProcess
from metastore.catalog.consistency import HEADER
from metastore.model.ids import decompose
from tests.native.support import TIMEOUT, Api, assert_status, unique

pytestmark = pytest.mark.slow

LEASE_S = 3


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as s:
        yield s


def _until(condition: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.1)
    return found


def urllib_post(url: str, body: dict[str, Any]) -> urllib.request.Request:
    data = json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    return urllib.request.Request(url, data=data, headers=headers, method="POST")


def _leased_again(node: NodeProcess) -> dict[str, Any] | None:
    """The node's health once it writes with a node id it leased after a loss."""
    status, body = get_reply(node.url + "/health")
    if status != 200 or not body["writable"] or body["node-id"] is None:
        return None
    log = node.log_path.read_text(errors="replace")
    return body if f"leased node id {body['node-id']} after a loss" in log else None


def metric(text: str, name: str) -> float:
    (value,) = [line.split()[1] for line in text.splitlines() if line.startswith(name + " ")]
    return float(value)


async def test_a_node_that_lost_its_lease_leases_another_and_writes_again(
    kafka_bootstrap: str, tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    # a session far longer than the pause: the group does not move partitions meanwhile,
    # so the leases' partition keeps its owner, the node that is not paused
    env = {"METASTORE_LEASE_SECONDS": str(LEASE_S), "METASTORE_SESSION_TIMEOUT_MS": "20000"}
    cluster = Cluster(kafka_bootstrap, f"n{os.urandom(5).hex()}", tmp_path, size=2, env=env)
    cluster.start()
    paused = cluster.nodes[0]
    try:
        await asyncio.to_thread(cluster.wait_balanced)
        other = await asyncio.to_thread(cluster.wait_owner, cluster.partition("", ""))
        paused = next(n for n in cluster.nodes if n is not other)
        assert paused.proc is not None
        before = health(paused)["node-id"]
        paused.proc.send_signal(signal.SIGSTOP)
        try:
            await asyncio.sleep(LEASE_S + 2.5)  # its lease (renewed <= 1 s before) ended 1.5 s ago
            collect = urllib_post(other.url + "/api/v1/admin/gc/leases", {"expired-for-seconds": 1})
            status, removed = await asyncio.to_thread(get_reply, collect, 120)
            assert status == 200 and removed["removed"] >= 1, (status, removed)
        finally:
            paused.proc.send_signal(signal.SIGCONT)
        after = await asyncio.to_thread(
            _until, lambda: _leased_again(paused), 60, "the resumed node to write again"
        )
        node_id = after["node-id"]
        log = paused.log_path.read_text(errors="replace")
        assert f"lost the lease on node id {before}" in log, paused.log_tail(40)

        # It mints with the new node id: a create in a partition it owns carries it.
        owned = (await asyncio.to_thread(cluster.wait_balanced))[cluster.nodes.index(paused)]
        api, token = Api(session, paused.url), ""

        async def write(path: str, body: dict[str, Any]) -> Any:  # each after the one before
            nonlocal token
            headers = {HEADER: token} if token else None
            reply = await api.call("POST", path, json_body=body, headers=headers)
            token = reply.headers.get(HEADER, "")
            return assert_status(reply, 201)

        tenant = unique("t")
        await write("/api/v1/tenants", {"name": tenant})
        catalog = next(f"c{i}" for i in range(1000) if cluster.partition(tenant, f"c{i}") in owned)
        base = f"/api/v1/tenants/{tenant}/catalogs"
        await write(base, {"name": catalog})
        created = await write(f"{base}/{catalog}/namespaces", {"namespace": ["after"]})
        assert decompose(int(created["entity-id"]))[1] == node_id, created
        assert health(paused)["node-id"] == node_id
        metrics = await api.call("GET", "/metrics")
        assert metric(metrics.text, "metastore_node_id_leases_lost_total") == 1
        assert 0 < metric(metrics.text, "metastore_node_id_lease_seconds") <= LEASE_S
    finally:
        if paused.proc is not None and paused.proc.poll() is None:
            paused.proc.send_signal(signal.SIGCONT)
        cluster.close()
    cluster.logs_without_tracebacks()
