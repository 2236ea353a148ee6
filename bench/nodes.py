"""The processes under test: CPU accounting, a checked stop, and a cluster of nodes.

``ClusterNodes`` starts ``size`` real ``metastore serve --kafka`` children on one
broker with their own topic prefix and waits until every partition has exactly
one owner and every node owns some (a balanced group, so no rebalance is still to
come when the load starts).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from metastore.cluster import topics
from metastore.cluster.config import ClusterConfig
from metastore.procs import NodeProcess

START_TIMEOUT_S = 120.0


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU seconds of this process, or of ``pid`` (Linux /proc)."""
    if pid is None:
        t = os.times()
        return t.user + t.system
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def check_stop(node: NodeProcess) -> bool:
    """Stop gracefully; False (with the log's tail printed) unless it exits 0."""
    if node.proc is not None and node.proc.poll() is not None:
        print(f"node exited early with {node.proc.returncode}:\n{node.log_tail()}")
        return False
    code = node.stop()
    if code != 0:
        print(f"node stopped with exit code {code}:\n{node.log_tail()}")
    return code == 0


def get_json(url: str, timeout: float = 5.0) -> tuple[int, Any]:
    """(status, parsed body) of a GET; an error status still parses its JSON body."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


class ClusterNodes:
    def __init__(self, bootstrap: str, prefix: str, root: Path, size: int, partitions: int) -> None:
        self.config = ClusterConfig(bootstrap, prefix=prefix, cluster=prefix, partitions=partitions)
        root.mkdir(parents=True, exist_ok=True)
        args = (
            "--kafka", bootstrap,
            "--topic-prefix", prefix,
            "--cluster-id", prefix,
            "--partitions", str(partitions),
        )  # fmt: skip
        warehouse = {"METASTORE_WAREHOUSE": (root / "warehouse").resolve().as_uri()}  # shared
        self.nodes = [
            NodeProcess(
                root / f"node{i}" / "data",
                extra_args=args,
                env=warehouse,
                log_path=root / f"node{i}.log",
            )
            for i in range(size)
        ]

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    @property
    def pids(self) -> list[int]:
        return [n.proc.pid for n in self.nodes if n.proc is not None]

    def start(self, timeout: float = START_TIMEOUT_S) -> ClusterNodes:
        deadline = time.monotonic() + timeout
        topics.create(self.config)
        for node in self.nodes:
            node.spawn()
        try:
            for node in self.nodes:
                node.wait_healthy(max(1.0, deadline - time.monotonic()))
            self.wait_owned(deadline)
        except BaseException:
            self.kill()
            raise
        return self

    def owners(self) -> list[list[int]] | None:
        """Each node's owned partitions, or None while any node does not answer 200."""
        owned = []
        for node in self.nodes:
            status, body = 0, None
            with contextlib.suppress(OSError, ValueError):
                status, body = get_json(node.url + "/health")
            if status != 200 or not isinstance(body, dict):
                return None
            owned.append(sorted(body.get("owned-partitions") or []))
        return owned

    def wait_owned(self, deadline: float) -> list[list[int]]:
        """Until every partition has one owner and no node is idle (the group settled)."""
        want = list(range(self.config.partitions))
        owned: list[list[int]] | None = None
        while time.monotonic() < deadline:
            owned = self.owners()
            if (
                owned is not None
                and sorted(p for ps in owned for p in ps) == want
                and all(owned[: len(want)])  # with more nodes than partitions, some idle
            ):
                return owned
            time.sleep(0.1)
        raise TimeoutError(f"partitions not all owned in time: {owned}")

    def stop(self, timeout: float = 60.0) -> bool:
        """Graceful stop of every node at once (SIGTERM each, then wait); True iff all exit 0.

        One at a time, each stop would hand its partitions to the nodes still running.
        """
        running = [n for n in self.nodes if n.proc is not None and n.proc.poll() is None]
        ok = len(running) == len(self.nodes)
        if not ok:
            print(f"a node exited early:\n{self.log_tails()}")
        for node in running:
            assert node.proc is not None
            node.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for node in running:
            assert node.proc is not None
            try:
                code = node.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                node.kill()
                code = -1
            if code != 0:
                print(f"node {node.url} stopped with exit code {code}:\n{node.log_tail()}")
                ok = False
        return ok

    def kill(self) -> None:
        for node in self.nodes:
            node.kill()

    def log_tails(self, lines: int = 20) -> str:
        return "\n".join(f"--- {n.log_path.name}\n{n.log_tail(lines)}" for n in self.nodes)
