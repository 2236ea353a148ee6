"""The owners' group on a real broker: members that stop never wedge the group.

Stopping the group's leader while a rebalance is in progress used to leave the group
with a departed leader for good on the test broker (every later member waited for
that leader's assignment forever), so a cluster whose nodes were all stopped one
after another could never start again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from metastore.cluster import topics
from metastore.cluster.cluster_config import ClusterConfig
from metastore.cluster.membership import Membership

PARTITIONS = 4
TIMEOUT = 60.0


@pytest.fixture
def config(kafka_bootstrap: str, topic_prefix: str) -> ClusterConfig:
    cfg = ClusterConfig(
        kafka_bootstrap,
        prefix=topic_prefix,
        cluster=topic_prefix,
        partitions=PARTITIONS,
        session_timeout_ms=3000,
    )
    topics.create(cfg)
    return cfg


@pytest.fixture
def members(config: ClusterConfig) -> Iterator[Callable[[], Membership]]:
    started: list[Membership] = []

    def member() -> Membership:
        started.append(Membership(config, lambda _: None, lambda _: None))
        started[-1].start()
        return started[-1]

    yield member
    for each in started:
        each.stop()


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_a_member_alone_after_every_other_stopped_owns_every_partition(
    members: Callable[[], Membership],
) -> None:
    everything = frozenset(range(PARTITIONS))
    leader = members()  # the first member to join leads the group
    _until(lambda: leader.assigned() == everything, "the first member owns everything")
    other = members()
    _until(lambda: bool(leader.assigned()) and bool(other.assigned()), "both members own some")
    other.stop()  # a rebalance begins...
    leader.stop()  # ...and the leader stops while it is in progress
    assert leader.assigned() == other.assigned() == frozenset()
    alone = members()
    _until(lambda: alone.assigned() == everything, "the new member owns every partition")
