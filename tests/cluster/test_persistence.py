"""The node-id lease CAS of a node that does not own the system partition, on a real broker.

The call goes to the node named by the partition's latest barrier. After a whole
cluster stopped, that node may be gone for good (its name no longer resolves): the
call must be retried like any "no owner yet", never fail as "commit state unknown"
(which stopped the starting node at once).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from metastore.cluster import topics
from metastore.cluster.changelog_records import RecordCodec
from metastore.cluster.cluster_config import ClusterConfig
from metastore.cluster.cluster_node import ClusterNode
from metastore.cluster.cluster_persistence import KafkaPersistence
from metastore.cluster.peer_auth import Peers
from metastore.cluster.view import ViewConsumer, ViewStore
from metastore.engine.leases import lease_key
from metastore.errors import ServiceUnavailable
from metastore.model.codec import default_codec
from metastore.persistence.base import UpdateableObject
from metastore.util.clock import SystemClock
from workers.owner import PartitionOwner

GONE = "http://gone.invalid:8181"  # .invalid never resolves
TIMEOUT = 30.0


@pytest.fixture
def config(kafka_bootstrap: str, topic_prefix: str) -> ClusterConfig:
    cfg = ClusterConfig(kafka_bootstrap, prefix=topic_prefix, cluster=topic_prefix, partitions=2)
    topics.create(cfg)
    return cfg


def _barrier_naming_a_gone_node(config: ClusterConfig, tmp_path: Path) -> None:
    """An owner of partition 0 that advertised ``GONE`` took over, then went away."""
    view = ViewConsumer(ViewStore(tmp_path / "gone-view", config), config).start()
    owner = PartitionOwner(
        config, 0, RecordCodec(default_codec(), GONE), view, GONE, SystemClock().now_us
    )
    try:
        owner.start()
        assert owner.wait_ready(TIMEOUT), "the owner never became ready"
    finally:
        owner.stop()
        view.stop()
        view.store.close()


def test_a_lease_call_routed_to_a_node_that_is_gone_waits_for_an_owner(
    config: ClusterConfig, tmp_path: Path
) -> None:
    _barrier_naming_a_gone_node(config, tmp_path)
    clock = SystemClock()
    node = ClusterNode(
        config,
        tmp_path / "node",
        "http://127.0.0.1:9",
        default_codec(),
        clock.now_us,
        PartitionOwner,
    )
    try:
        node.view.start()  # the view only: this node owns nothing
        deadline = time.monotonic() + TIMEOUT
        while node.route(0) != GONE:
            assert time.monotonic() < deadline, "the view never applied the barrier"
            time.sleep(0.05)
        persistence = KafkaPersistence(node, Peers(node.url), remote_timeout_s=1.0)
        key = lease_key(5)
        with pytest.raises(ServiceUnavailable) as refused:
            persistence.cas_updateable(key, None, UpdateableObject(key, b"lease", "token"))
        assert "no owner of partition 0 answered" in refused.value.message
        assert f"{GONE} is not reachable" in refused.value.message
        assert persistence.get_updateable(key) is None  # nothing was written
    finally:
        node.stop()
