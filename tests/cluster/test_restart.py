"""A whole cluster stopped, then restarted one node at a time on its data directories.

The first node back finds an empty owners' group and barriers in the log that name
nodes which are down; it must own every partition itself, lease its node id and
become healthy, with the data written before the stop still there.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest
import requests

from harness.cluster import Cluster, health
from metastore.catalog.consistency import HEADER

pytestmark = pytest.mark.slow

TIMEOUT = 60


def _write_catalog(cluster: Cluster, via: int) -> tuple[str, str]:
    tenant = f"t{secrets.token_hex(4)}"
    url = cluster.nodes[via].url
    made = requests.post(f"{url}/api/v1/tenants", json={"name": tenant}, timeout=TIMEOUT)
    assert made.status_code == 201, made.text
    made = requests.post(
        f"{url}/api/v1/tenants/{tenant}/catalogs",
        json={"name": "c"},
        headers={HEADER: made.headers[HEADER]},
        timeout=TIMEOUT,
    )
    assert made.status_code == 201, made.text
    return tenant, made.headers[HEADER]


def _catalog_seen(cluster: Cluster, i: int, tenant: str, token: str) -> None:
    url = cluster.nodes[i].url
    reply = requests.get(
        f"{url}/api/v1/tenants/{tenant}/catalogs/c", headers={HEADER: token}, timeout=TIMEOUT
    )
    assert reply.status_code == 200, f"{url}: {reply.text}"


@pytest.mark.parametrize(
    ("how", "broker"),
    # on Tansu a stopping node never leaves the owners' group (``membership``): every
    # node stopped one after another must still leave a group the first one back owns
    [("stop", "kafka"), ("kill", "kafka"), ("stop", "tansu")],
)
def test_a_stopped_cluster_restarts_one_node_at_a_time(
    request: pytest.FixtureRequest, tmp_path: Path, how: str, broker: str
) -> None:
    bootstrap = str(request.getfixturevalue(f"{broker}_bootstrap"))
    env = {"METASTORE_BROKER_PROFILE": broker}
    cluster = Cluster(bootstrap, f"r{os.urandom(5).hex()}", tmp_path, size=2, env=env)
    try:
        cluster.start()
        before = [_write_catalog(cluster, i) for i in range(2)]
        for node in cluster.nodes:
            if how == "stop":
                assert node.stop() == 0, node.log_tail()
            else:
                node.kill()
        for i in range(2):
            cluster.restart(i)  # waits until /health answers 200
            assert health(cluster.nodes[i])["status"] == "ok"
        for tenant, token in before:
            cluster.wait_owner(cluster.partition(tenant, "c"))
            for i in range(2):
                _catalog_seen(cluster, i, tenant, token)
        after = [_write_catalog(cluster, i) for i in range(2)]  # forwarded or local
        for tenant, token in after:
            for i in range(2):
                _catalog_seen(cluster, i, tenant, token)
    finally:
        cluster.close()
    cluster.logs_without_tracebacks()
