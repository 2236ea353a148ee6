"""Several real metastore nodes (child processes) on one broker.

Nothing is mocked: each node is ``metastore serve --kafka ...`` with its own view
directory, log and port; tests talk HTTP to them, kill them by PID and replay the
log, benchmarks load them. A node's warehouse is set explicitly (cluster mode
refuses the node-local default): its own by default, or one shared by all.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from harness.node import NodeProcess
from metastore.cluster import topics
from metastore.cluster.changelog_records import partition_for
from metastore.cluster.cluster_config import ClusterConfig
from metastore.cluster.peer_auth import PeerKey
from metastore.engine.leases import SYSTEM_TENANT

START_TIMEOUT = 120.0
# Each node renews its node-id lease a third of the way through it (60 s by default), a
# write to the changelog like any other. A test that compares the views of one moment
# with a replay or rebuild of the log after it must see no write in between: its
# nodes hold their leases for an hour.
QUIET_LEASES = {"METASTORE_LEASE_SECONDS": "3600"}


class Cluster:
    def __init__(
        self,
        bootstrap: str,
        prefix: str,
        root: Path,
        size: int = 3,
        partitions: int = 12,
        env: dict[str, str] | None = None,
        node_type: type[NodeProcess] = NodeProcess,
        shared_warehouse: bool = False,
    ) -> None:
        self.env = env
        self.node_type = node_type
        self.shared_warehouse = shared_warehouse
        self.config = ClusterConfig(bootstrap, prefix=prefix, cluster=prefix, partitions=partitions)
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.nodes = [self._node(i) for i in range(size)]

    def _node(self, i: int, port: int | None = None) -> NodeProcess:
        args = (
            "--kafka", self.config.bootstrap,
            "--topic-prefix", self.config.prefix,
            "--cluster-id", self.config.cluster,
            "--partitions", str(self.config.partitions),
        )  # fmt: skip
        return self.node_type(
            self.root / f"node{i}" / "data",
            port=port,
            extra_args=args,
            env={"METASTORE_WAREHOUSE": self.warehouse(i).as_uri(), **(self.env or {})},
            log_path=self.root / f"node{i}.log",
        )

    def warehouse(self, i: int) -> Path:
        """Node ``i``'s warehouse setting. Each node seeds the catalogs created without
        storage with its own, so with separate warehouses shared tables need a catalog
        with a shared storage root (or a shared setting: ``shared_warehouse``)."""
        if self.shared_warehouse:
            return (self.root / "warehouse").resolve()
        return (self.root / f"node{i}" / "warehouse").resolve()

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    @property
    def pids(self) -> list[int]:
        return [n.proc.pid for n in self.nodes if n.proc is not None]

    def start(self, timeout: float = START_TIMEOUT) -> Cluster:
        """Create the topics, start every node side by side, wait until each is healthy
        (``timeout`` per node); on failure every node is killed."""
        topics.create(self.config)
        for node in self.nodes:
            node.spawn()
        try:
            for node in self.nodes:
                node.wait_healthy(timeout)
        except BaseException:
            self.kill()
            raise
        return self

    def restart(self, i: int) -> NodeProcess:
        """A new process on the same data directory and port (the view resumes)."""
        old = self.nodes[i]
        self.nodes[i] = self._node(i, port=old.port)
        return self.nodes[i].start(START_TIMEOUT)

    def close(self) -> None:
        """Stop every node, one after the other, the owner of the system partition last: a
        stopping node releases its node id through that owner, so stopped first it would
        leave each later node waiting for it in vain (seconds per node). One that does not
        stop in time is killed, and the first such failure is raised once all are down
        (never leave a node running)."""
        failures: list[BaseException] = []
        for node in sorted(self.nodes, key=self._holds_leases):  # stable: False first
            try:
                node.close()
            except Exception as exc:
                node.kill()
                failures.append(exc)
        if failures:
            raise failures[0]

    def _holds_leases(self, node: NodeProcess) -> bool:
        """Whether ``node`` answers that it owns the system partition (node-id leases)."""
        if node.proc is None or node.proc.poll() is not None:
            return False
        try:
            status, body = get_reply(node.url + "/health", timeout=5.0)
        except (OSError, ValueError):
            return False
        owned = body.get("owned-partitions") if status == 200 and isinstance(body, dict) else None
        return self.partition(SYSTEM_TENANT, "") in (owned or [])

    def stop_all(self, timeout: float = 60.0) -> bool:
        """Graceful stop of every node at once (SIGTERM each, then wait); True iff all exit 0.

        One at a time, each stop would hand its partitions to the nodes still running.
        """
        running = self.alive()
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

    def alive(self) -> list[NodeProcess]:
        return [n for n in self.nodes if n.proc is not None and n.proc.poll() is None]

    def partition(self, tenant: str, catalog: str) -> int:
        return partition_for(tenant, catalog, self.config.partitions)

    def owners(self) -> list[list[int]] | None:
        """Each node's owned partitions, or None while any node does not answer 200."""
        owned = []
        for node in self.nodes:
            try:
                status, body = get_reply(node.url + "/health", timeout=5.0)
            except (OSError, ValueError):
                return None
            if status != 200 or not isinstance(body, dict):
                return None
            owned.append(sorted(body.get("owned-partitions") or []))
        return owned

    def wait_balanced(self, timeout: float = START_TIMEOUT) -> list[list[int]]:
        """Until every partition has one owner and no node is idle: the group settled, so
        no rebalance is still to come when a load starts."""
        want = list(range(self.config.partitions))
        deadline = time.monotonic() + timeout
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

    def owner_of(
        self, partition: int, among: list[NodeProcess] | None = None
    ) -> NodeProcess | None:
        """The node whose health reports ``partition`` owned and ready, if exactly one does."""
        owners = [n for n in (among or self.alive()) if partition in health(n)["owned-partitions"]]
        return owners[0] if len(owners) == 1 else None

    def wait_owner(
        self, partition: int, among: list[NodeProcess] | None = None, timeout: float = 60.0
    ) -> NodeProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            owner = self.owner_of(partition, among)
            if owner is not None:
                return owner
            time.sleep(0.1)
        raise TimeoutError(f"no single ready owner of partition {partition} in {timeout}s")

    def logs_without_tracebacks(self) -> None:
        for node in self.nodes:
            text = node.log_path.read_text(errors="replace") if node.log_path.exists() else ""
            assert "Traceback" not in text, f"{node.url} logged an error:\n{node.log_tail(60)}"

    def log_tails(self, lines: int = 20) -> str:
        return "\n".join(f"--- {n.log_path.name}\n{n.log_tail(lines)}" for n in self.nodes)


def get_reply(url: str | urllib.request.Request, timeout: float = 10.0) -> tuple[int, Any]:
    """(status, parsed body) of a request; an error status still parses its JSON body."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def get_json(url: str | urllib.request.Request, timeout: float = 10.0) -> Any:
    return get_reply(url, timeout)[1]


def health(node: NodeProcess) -> dict[str, Any]:
    body: dict[str, Any] = get_json(node.url + "/health")
    return body


def view_state(node: NodeProcess, secret: str = "") -> dict[str, Any]:
    """The node's view (an internal endpoint: signed as a node when a secret is given)."""
    path = "/internal/v1/view"
    headers = {}
    if secret:
        headers = PeerKey(secret).sign("GET", node.url, path, b"", sender="http://tests")
    request = urllib.request.Request(node.url + path, headers=headers)
    body: dict[str, Any] = get_json(request, timeout=60)
    return body
