"""A store that cannot write: a real node whose file size limit (``RLIMIT_FSIZE``, lowered
from outside with ``prlimit`` once it serves) stops RocksDB's log from growing, as a
full disk would. Its commits are refused as of unknown outcome, ``/health`` says so
with their count, the log carries one traceback for the whole run, ``/metrics`` counts
them, reads go on, and the node stops cleanly, saying what it could not write.

(The interpreter ignores ``SIGXFSZ``, so a write past the limit fails with ``EFBIG``
instead of killing the node.)
"""

from __future__ import annotations

import resource
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from harness.node import NodeProcess

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="prlimit is Linux's")

PAD = "x" * 30_000  # each commit grows RocksDB's log by this much at least
TRIES = 200


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeProcess]:
    with NodeProcess(tmp_path / "data", log_path=tmp_path / "node.log") as process:
        yield process


def test_a_store_that_cannot_write_is_degraded_and_logs_one_traceback(
    node: NodeProcess, tmp_path: Path
) -> None:
    url = node.url
    largest = max(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file())
    _, hard = resource.prlimit(node.pid, resource.RLIMIT_FSIZE)
    resource.prlimit(node.pid, resource.RLIMIT_FSIZE, (largest + 256 * 1024, hard))

    statuses = []
    for i in range(TRIES):  # until the log is past the limit, then a few more
        body = {"namespace": [f"n{i}"], "properties": {"p": PAD}}
        reply = requests.post(f"{url}/v1/namespaces", json=body, timeout=30)
        statuses.append(reply.status_code)
        if statuses.count(500) == 5:
            break
        assert reply.status_code in (200, 500), reply.text
    assert statuses.count(500) == 5, statuses
    error = reply.json()["error"]
    assert error["type"] == "CommitStateUnknownException", error
    assert "File too large" in error["message"], error

    health = requests.get(f"{url}/health", timeout=30)
    assert health.status_code == 503, health.text
    body = health.json()
    assert body["status"] == "degraded" and body["writable"] is False, body
    failures = body["write-failures"]
    assert failures["count"] == 5, failures
    assert "File too large" in failures["first-error"], failures
    metrics = requests.get(f"{url}/metrics", timeout=30).text
    assert "metastore_write_failures_total 5\n" in metrics

    assert requests.get(f"{url}/v1/namespaces/n0", timeout=30).status_code == 200  # reads go on
    assert node.stop() == 0  # what it cannot write at shutdown is said, not raised
    log = node.log_path.read_text(errors="replace")
    assert log.count("Traceback") == 1, node.log_tail(80)
    assert log.count("failed; later failures are counted") == 1, node.log_tail(80)
    assert "WARNING metastore.engine.leases: could not release node id" in log
    assert "ERROR metastore.node.contexts: closing the store failed: " in log
