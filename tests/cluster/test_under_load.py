"""A cluster that keeps taking writes: nodes join, restart and replay while 16 clients
commit, and a node that stops gracefully hands its partitions over at once.

On Apache Kafka the end a reader's first fetch reports is true, so a node (or a replay)
is caught up once it has read to it; it used to wait for a second without any record,
which never comes under steady writes. Everything runs on real node processes and the
session's Kafka broker; the writers are bounded in count and time and stop by
themselves.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from harness.cluster import QUIET_LEASES, Cluster, health, view_state
from harness.node import NodeProcess
from metastore.catalog.consistency import HEADER
from metastore.cluster import topics
from metastore.cluster.replay import replay

pytestmark = pytest.mark.slow

WRITERS = 16
TIMEOUT = 60.0
MAX_COMMITS = 20_000  # a bound on the whole load, never reached in a passing run
MAX_LOAD_S = 300.0


@dataclass
class Load:
    """16 clients creating tables through one node until told to stop (or a bound)."""

    url: str
    tenant: str
    token: str
    stop: threading.Event = field(default_factory=threading.Event)
    acked: list[tuple[float, str, str]] = field(default_factory=list)  # (when, table, token)
    unknown: list[str] = field(default_factory=list)  # 500 CommitStateUnknown: either way
    failures: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Load:
        for w in range(WRITERS):
            thread = threading.Thread(target=self._write, args=(w,), daemon=True)
            thread.start()
            self.threads.append(thread)
        return self

    def _write(self, writer: int) -> None:
        path = f"{self.url}/api/v1/tenants/{self.tenant}/catalogs/c/namespaces/n/tables"
        token = self.token
        started = time.monotonic()
        with requests.Session() as http:
            for i in range(MAX_COMMITS // WRITERS):
                if self.stop.is_set() or time.monotonic() - started > MAX_LOAD_S:
                    return
                name = f"w{writer}_{i}"
                reply = http.post(path, json={"name": name}, headers={HEADER: token}, timeout=30)
                while reply.status_code == 503 and not self.stop.is_set():
                    time.sleep(0.1)  # no owner yet (a handover): nothing was written, again
                    reply = http.post(
                        path, json={"name": name}, headers={HEADER: token}, timeout=30
                    )
                if reply.status_code == 500 and "CommitStateUnknown" in reply.text:
                    with self.lock:  # a client cannot tell; the table may or may not be there
                        self.unknown.append(name)
                    continue
                if reply.status_code != 201:
                    with self.lock:
                        self.failures.append(f"{name}: {reply.status_code} {reply.text[:200]}")
                    return
                token = reply.headers[HEADER]
                with self.lock:
                    self.acked.append((time.monotonic(), name, token))

    def count(self) -> int:
        with self.lock:
            return len(self.acked)

    def wait_for(self, commits: int, timeout: float = TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while self.count() < commits:
            assert not self.failures, self.failures[:3]
            assert time.monotonic() < deadline, f"only {self.count()} commits in {timeout}s"
            time.sleep(0.05)

    def finish(self) -> list[tuple[float, str, str]]:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)
        assert not self.failures, self.failures[:3]
        return list(self.acked)


def _catalog(url: str) -> tuple[str, str]:
    tenant = f"t{os.urandom(4).hex()}"
    token = ""
    for path, body in (
        ("/api/v1/tenants", {"name": tenant}),
        (f"/api/v1/tenants/{tenant}/catalogs", {"name": "c"}),
        (f"/api/v1/tenants/{tenant}/catalogs/c/namespaces", {"namespace": ["n"]}),
    ):
        headers = {HEADER: token} if token else {}
        made = requests.post(url + path, json=body, headers=headers, timeout=TIMEOUT)
        assert made.status_code == 201, made.text
        token = made.headers[HEADER]
    return tenant, token


def _all_read_through(node: NodeProcess, tenant: str, acked: list[tuple[float, str, str]]) -> None:
    """Every acknowledged table, read through ``node`` after the last token of its writer."""
    path = f"{node.url}/api/v1/tenants/{tenant}/catalogs/c/namespaces/n/tables"
    last_token = max(acked, key=lambda a: a[0])[2] if acked else ""
    tokens = {a[1].split("_")[0]: a[2] for a in sorted(acked)}  # each writer's last
    for token in {last_token, *tokens.values()}:  # waits until the node applied it
        reply = requests.get(path, headers={HEADER: token}, params={"pageSize": 1}, timeout=TIMEOUT)
        assert reply.status_code == 200, reply.text
    listed: set[str] = set()
    page_token = None
    while True:
        params = {"pageSize": 1000, **({"pageToken": page_token} if page_token else {})}
        reply = requests.get(path, params=params, headers={HEADER: last_token}, timeout=TIMEOUT)
        assert reply.status_code == 200, reply.text
        body = reply.json()
        listed |= {item["name"] for item in body["tables"]}
        page_token = body.get("next-page-token")
        if not page_token:
            break
    missing = {a[1] for a in acked} - listed
    assert not missing, f"{len(missing)} acknowledged tables missing on {node.url}"


def _converged(nodes: list[NodeProcess], timeout: float = TIMEOUT) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while True:
        states = [view_state(n) for n in nodes]
        if all(s["offsets"] == states[0]["offsets"] for s in states):
            assert len({s["digest"] for s in states}) == 1, states
            return states[0]
        assert time.monotonic() < deadline, "the views never converged"
        time.sleep(0.2)


def test_nodes_join_restart_and_replay_while_16_clients_commit(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    cluster = Cluster(
        kafka_bootstrap, f"u{os.urandom(5).hex()}", tmp_path / "nodes", size=3, env=QUIET_LEASES
    )
    first, joining, restarting = cluster.nodes
    try:
        topics.create(cluster.config)
        first.start(TIMEOUT)
        restarting.start(TIMEOUT)
        tenant, token = _catalog(first.url)
        load = Load(first.url, tenant, token).start()
        load.wait_for(300)  # a backlog to read: the log grows while the others start

        # a node joins under load: it serves while the writers keep committing
        joining.start(TIMEOUT)
        joined_at, acked_then = time.monotonic(), load.count()
        load.wait_for(acked_then + 100)
        assert health(joining)["status"] == "ok"

        # a node stopped and started again under load resumes its view and serves
        assert restarting.stop() == 0, restarting.log_tail()
        load.wait_for(load.count() + 100)
        restarting = cluster.restart(2)
        load.wait_for(load.count() + 100)

        # a replay under load ends, holding at least what was committed when it began
        before_replay = load.count()
        replayed = replay(cluster.config, tmp_path / "replay", progress=False)
        assert replayed.consumed > 0
        assert load.count() > before_replay, "the writers stopped during the replay"

        acked = load.finish()
        assert any(when > joined_at for when, _, _ in acked)
        for node in cluster.nodes:
            _all_read_through(node, tenant, acked)
        live = _converged(cluster.nodes)
        # resumed, the replay reads the tail written after it ended: the live digest
        assert replay(cluster.config, tmp_path / "replay", progress=False).digest == live["digest"]
    finally:
        cluster.close()


def test_a_graceful_stop_hands_its_partitions_over_before_any_session_timeout(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A stopping node leaves the owners' group, so the broker rebalances at once; with a
    session timeout of 60 s, a node that only dropped out would keep its partitions
    ownerless for a minute."""
    env = {"METASTORE_SESSION_TIMEOUT_MS": "60000", **QUIET_LEASES}
    cluster = Cluster(kafka_bootstrap, f"g{os.urandom(5).hex()}", tmp_path, size=2, env=env)
    try:
        cluster.start()
        owned = cluster.wait_balanced()
        staying, leaving = cluster.nodes
        assert owned[1], owned
        stopped_at = time.monotonic()
        assert leaving.stop() == 0, leaving.log_tail()
        deadline = stopped_at + 30.0  # half the session timeout
        while sorted(health(staying)["owned-partitions"]) != list(range(12)):
            assert time.monotonic() < deadline, health(staying)
            time.sleep(0.05)
        assert "left the group" in leaving.log_tail(200)
    finally:
        cluster.close()
