"""A node whose view of the log stops stops itself, and the cluster goes on without it.

Two real nodes on the test broker. Node 0's file size limit (``RLIMIT_FSIZE``, lowered
from outside with ``prlimit`` once it serves, as a full disk would stop it) stops its
view's RocksDB from growing while commits go through node 1. Node 0 then stops on its
own with exit status 1 and the reason on one line; before, it kept its partitions in
the group, so no node could write them, and its owners retried a takeover a traceback
a second. Node 1 takes every partition, and every commit it acknowledged is there.

(The interpreter ignores ``SIGXFSZ``, so a write past the limit fails with ``EFBIG``.)
"""

from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path

import pytest
import requests

from harness.cluster import Cluster

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform != "linux", reason="prlimit is Linux's"),
]

PAD = "x" * 30_000  # each commit grows every view's RocksDB log by this much at least
BOUND_S = 120.0  # generous: every awaited condition happens well before this


def test_a_node_whose_view_stops_leaves_the_cluster_to_the_others(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    cluster = Cluster(kafka_bootstrap, f"vf{os.urandom(4).hex()}", tmp_path, size=2, partitions=4)
    cluster.start()
    try:
        cluster.wait_balanced()
        failing, healthy = cluster.nodes
        root = tmp_path / "node0"
        largest = max(p.stat().st_size for p in root.rglob("*") if p.is_file())
        _, hard = resource.prlimit(failing.pid, resource.RLIMIT_FSIZE)
        resource.prlimit(failing.pid, resource.RLIMIT_FSIZE, (largest + 256 * 1024, hard))

        acknowledged: list[str] = []
        deadline = time.monotonic() + BOUND_S
        i = 0
        assert failing.proc is not None
        while failing.proc.poll() is None or len(acknowledged) < i - 10:
            assert time.monotonic() < deadline, f"node 0 still runs: {failing.log_tail()}"
            name = f"n{i}"
            body = {"namespace": [name], "properties": {"p": PAD}}
            reply = requests.post(f"{healthy.url}/v1/namespaces", json=body, timeout=60)
            if reply.status_code == 200:
                acknowledged.append(name)
            else:  # a partition moving (503) or an owner that stopped mid-commit (500)
                assert reply.status_code in (500, 503), reply.text
                time.sleep(0.1)
            i += 1

        assert failing.proc.wait(BOUND_S) == 1
        log = failing.log_path.read_text(errors="replace")
        stopped = [line for line in log.splitlines() if line.startswith("metastore: stopped: ")]
        assert len(stopped) == 1, failing.log_tail(40)
        assert "its view of the log stopped" in stopped[0] and "File too large" in stopped[0]
        assert log.count("could not take ownership") <= 3, failing.log_tail(60)

        cluster.wait_owner(cluster.partition("default", "default"), among=[healthy])
        listed = requests.get(f"{healthy.url}/v1/namespaces", timeout=60)
        assert listed.status_code == 200, listed.text
        names = {ns[0] for ns in listed.json()["namespaces"]}
        assert set(acknowledged) <= names, sorted(set(acknowledged) - names)
        after = requests.post(f"{healthy.url}/v1/namespaces", json={"namespace": ["after"]})
        assert after.status_code == 200, after.text
        assert "Traceback" not in healthy.log_path.read_text(errors="replace")
    finally:
        cluster.close()
