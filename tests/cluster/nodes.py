"""Several real metastore nodes (child processes) on one broker, for the cluster tests.

Nothing is mocked: each node is ``metastore serve --kafka ...`` with its own view
directory; the tests talk HTTP to them, kill them by PID and replay the log.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from metastore.cluster import topics
from metastore.cluster.config import ClusterConfig
from metastore.cluster.peer_auth import PeerKey
from metastore.cluster.records import partition_for
from metastore.procs import NodeProcess

START_TIMEOUT = 120.0


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
    ) -> None:
        self.env = env
        self.node_type = node_type
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
        """Node ``i``'s own warehouse, set explicitly (cluster mode refuses the node-local
        default): each node seeds the catalogs created without storage with its own, so
        shared tables need a catalog with a shared storage root (or a shared setting)."""
        return (self.root / f"node{i}" / "warehouse").resolve()

    def start(self) -> Cluster:
        topics.create(self.config)
        for node in self.nodes:
            node.spawn()
        for node in self.nodes:
            node.wait_healthy(START_TIMEOUT)
        return self

    def restart(self, i: int) -> NodeProcess:
        """A new process on the same data directory and port (the view resumes)."""
        old = self.nodes[i]
        self.nodes[i] = self._node(i, port=old.port)
        return self.nodes[i].start(START_TIMEOUT)

    def close(self) -> None:
        """Stop every node; one that does not stop in time is killed, and the first such
        failure is raised once all are down (never leave a node running)."""
        failures: list[BaseException] = []
        for node in self.nodes:
            try:
                node.close()
            except Exception as exc:
                node.kill()
                failures.append(exc)
        if failures:
            raise failures[0]

    def alive(self) -> list[NodeProcess]:
        return [n for n in self.nodes if n.proc is not None and n.proc.poll() is None]

    def partition(self, tenant: str, catalog: str) -> int:
        return partition_for(tenant, catalog, self.config.partitions)

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


def get_json(url: str | urllib.request.Request, timeout: float = 10.0) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return json.loads(exc.read())


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
