"""A broker outage in the node's log: librdkafka's lines in the node's own format, each
kind once a minute, the partition owners' producers' lines included.

One node of 12 partitions on a broker of its own (this test stops it), writing JSON
lines. Before, its clients wrote librdkafka's own ``%3|...|FAIL|...`` lines to stderr,
past the JSON format, 2,543 of them in the outage's first minute.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from harness.broker import BrokerProcess
from harness.cluster import Cluster
from metastore.cluster.kafka_log import LOGGER_NAME, kind_of

pytestmark = pytest.mark.slow

BOUND_S = 60.0  # generous: the lines come within a second or two of the broker stopping


def lines(path: Path) -> list[dict[str, Any]]:
    """Every line of the log, each of which must be a JSON object."""
    parsed = []
    for raw in path.read_text(errors="replace").splitlines():
        try:
            parsed.append(json.loads(raw))
        except ValueError:
            pytest.fail(f"not a JSON line: {raw[:300]}")
    return parsed


def test_a_broker_outage_is_logged_in_the_nodes_format_once_per_kind(tmp_path: Path) -> None:
    broker = BrokerProcess(log_path=tmp_path / "broker.log").start()
    cluster = Cluster(
        broker.bootstrap,
        f"kl{os.urandom(4).hex()}",
        tmp_path,
        size=1,
        partitions=12,
        env={"METASTORE_LOG_FORMAT": "json"},
    )
    try:
        cluster.start()
        cluster.wait_balanced()
        (node,) = cluster.nodes
        broker.kill()

        deadline = time.monotonic() + BOUND_S
        while True:  # an owner's idle producer delivers its lines too
            kafka = [line for line in lines(node.log_path) if line["logger"] == LOGGER_NAME]
            if any("[rdkafka#producer-" in line["message"] for line in kafka):
                break
            assert time.monotonic() < deadline, node.log_tail()
            time.sleep(0.2)
        time.sleep(2.0)  # librdkafka retries every 50 ms: 40 attempts per client meanwhile

        kafka = [line for line in lines(node.log_path) if line["logger"] == LOGGER_NAME]
        assert all(line["level"] == "ERROR" for line in kafka), kafka
        assert any("[rdkafka#consumer-" in line["message"] for line in kafka), kafka
        # refused, or reset for a connection the broker's end dropped as it stopped
        assert all(broker.bootstrap in line["message"] for line in kafka), kafka
        # within the minute, each kind of line once (different clients of a kind alike)
        kinds = Counter(
            (line["message"].split("-", 1)[0], kind_of(line["message"].split("] ", 1)[1]))
            for line in kafka
        )
        assert max(kinds.values()) == 1, kinds
        assert len(kafka) < 40, kafka  # unfiltered, 14 clients wrote some 40 lines a second
    finally:
        cluster.kill()
        broker.kill()
