"""Three real nodes on one broker: routing, read-your-writes, replay = live, crashes, zombies.

Every node is a child process (``metastore serve --kafka``). Acknowledgements are
checked against the log itself: the log is replayed into a fresh view and read
with the same service code the nodes use.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from harness.cluster import QUIET_LEASES, Cluster, health, view_state
from harness.node import NodeProcess
from metastore.catalog.consistency import HEADER
from metastore.catalog.service import Metastore
from metastore.cluster.replay import replay
from metastore.cluster.view import ViewStore
from metastore.engine.object_cache import ObjectCache
from metastore.model.codec import default_codec
from metastore.model.keys import Kind
from tests.native.support import (
    TIMEOUT,
    Api,
    assert_error,
    assert_serial_chain,
    assert_status,
    unique,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three nodes shared by the non-destructive tests of this module."""
    root = tmp_path_factory.mktemp("cluster")
    env = {"METASTORE_CONSISTENCY_WAIT_S": "2", **QUIET_LEASES}  # views vs a replay
    nodes = Cluster(kafka_bootstrap, f"n{os.urandom(5).hex()}", root, env=env).start()
    yield nodes
    nodes.close()
    nodes.logs_without_tracebacks()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as s:
        yield s


def _fresh_cluster(kafka_bootstrap: str, tmp_path: Path) -> Cluster:
    return Cluster(kafka_bootstrap, f"n{os.urandom(5).hex()}", tmp_path).start()


async def _token_chain(
    apis: list[Api], steps: list[tuple[str, str, dict[str, Any]]]
) -> tuple[str, list[dict[str, Any]]]:
    """Each step through the next node, carrying the previous step's consistency token."""
    token = ""
    bodies = []
    for i, (method, path, body) in enumerate(steps):
        api = apis[i % len(apis)]
        reply = await api.call(
            method, path, json_body=body, headers={HEADER: token} if token else None
        )
        bodies.append(assert_status(reply, 200, 201))
        token = reply_token(reply)
    return token, bodies


def reply_token(reply: Any) -> str:
    token = reply.headers.get(HEADER)
    assert token, f"a write without a consistency token: {reply.describe()}"
    return str(token)


# --- routing and read-your-writes --------------------------------------------------------


async def test_writes_through_any_node_are_read_from_every_node(
    cluster: Cluster, session: aiohttp.ClientSession
) -> None:
    apis = [Api(session, n.url) for n in cluster.nodes]
    tenant = unique("t")
    base = f"/api/v1/tenants/{tenant}/catalogs/c"
    steps: list[tuple[str, str, dict[str, Any]]] = [
        ("POST", "/api/v1/tenants", {"name": tenant}),
        ("POST", f"/api/v1/tenants/{tenant}/catalogs", {"name": "c"}),
        ("POST", base + "/namespaces", {"namespace": ["sales"]}),
    ]
    steps += [("POST", base + "/namespaces/sales/tables", {"name": f"t{i}"}) for i in range(9)]
    token, _ = await _token_chain(apis, steps)
    for api in apis:  # every node, given the last token, sees every write at once
        reply = await api.call("GET", base + "/namespaces/sales/tables", headers={HEADER: token})
        names = sorted(e["name"] for e in assert_status(reply)["tables"])
        assert names == [f"t{i}" for i in range(9)], f"{api.base_url}: {names}"
        history = assert_status(await api.call("GET", base + "/commits", headers={HEADER: token}))[
            "commits"
        ]
        assert_serial_chain(history)
        assert len(history) == 11  # catalog creation, the namespace, nine tables
    forwarded = [await _metric(session, n, "metastore_forwarded_total") for n in cluster.nodes]
    assert sum(forwarded) > 0, "no write was forwarded: the test did not exercise routing"


async def test_a_token_ahead_of_the_view_waits_then_answers_503(
    cluster: Cluster, session: aiohttp.ClientSession
) -> None:
    api = Api(session, cluster.nodes[0].url)
    ahead = "0:999999999:0123456789abcdef"  # partition:offset:tenant tag
    reply = await api.call("GET", "/api/v1/tenants", headers={HEADER: ahead})
    assert_error(reply, 503, "ServiceUnavailableException")
    for bad in ("x", "1:", ":2", "-1:3", "0:1", "99999:1:0123456789abcdef", "1:2:3", "1" * 80):
        reply = await api.call("GET", "/api/v1/tenants", headers={HEADER: bad})
        assert_error(reply, 400, "BadRequestException")


async def test_not_owner_is_invisible_to_clients_and_conflicts_stay_409(
    cluster: Cluster, session: aiohttp.ClientSession
) -> None:
    """A conflict decided at the owner comes back through the forwarding node unchanged."""
    apis = [Api(session, n.url) for n in cluster.nodes]
    tenant = unique("t")
    token, _ = await _token_chain(
        apis,
        [
            ("POST", "/api/v1/tenants", {"name": tenant}),
            ("POST", f"/api/v1/tenants/{tenant}/catalogs", {"name": "c"}),
        ],
    )
    path = f"/api/v1/tenants/{tenant}/catalogs/c/namespaces"
    replies = await asyncio.gather(
        *(
            a.call("POST", path, json_body={"namespace": ["same"]}, headers={HEADER: token})
            for a in apis
        )
    )
    statuses = sorted(r.status for r in replies)
    assert statuses == [201, 409, 409], [r.describe() for r in replies]
    for reply in replies:
        if reply.status == 409:
            assert_error(reply, 409, "AlreadyExistsException")


async def test_replayed_log_digest_equals_every_live_view(
    cluster: Cluster, session: aiohttp.ClientSession, tmp_path: Path
) -> None:
    apis = [Api(session, n.url) for n in cluster.nodes]
    tenant = unique("t")
    await _token_chain(
        apis,
        [
            ("POST", "/api/v1/tenants", {"name": tenant}),
            ("POST", f"/api/v1/tenants/{tenant}/catalogs", {"name": "c"}),
            ("POST", f"/api/v1/tenants/{tenant}/catalogs/c/namespaces", {"namespace": ["n"]}),
        ],
    )
    states = await asyncio.to_thread(_converged, cluster.nodes)
    summary = await asyncio.to_thread(
        replay, cluster.config, tmp_path / "replayed", progress=False, idle_s=1.0
    )
    assert {s["digest"] for s in states} == {summary.digest}, (states, summary)


def _converged(nodes: list[NodeProcess], timeout: float = 60.0) -> list[dict[str, Any]]:
    """Every node's view state once all report the same offsets (writes have stopped)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = [view_state(n) for n in nodes]
        if all(s["offsets"] == states[0]["offsets"] for s in states):
            return states
        time.sleep(0.2)
    raise TimeoutError("the nodes' views did not converge")


async def _metric(session: aiohttp.ClientSession, node: NodeProcess, name: str) -> int:
    async with session.get(node.url + "/metrics") as response:
        text = await response.text()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return int(line.split()[1])
    raise AssertionError(f"{name} missing from {node.url}/metrics")


# --- crashes -----------------------------------------------------------------------------


@dataclass
class Ledger:
    """What the clients were told: only ``acked`` must be in the log."""

    acked: dict[str, tuple[float, float]] = field(default_factory=dict)  # table -> sent, 201
    unknown: list[str] = field(default_factory=list)  # 500 / connection lost mid-request
    statuses: dict[int, int] = field(default_factory=dict)
    bad: list[str] = field(default_factory=list)  # answers that must never happen

    def count(self, status: int) -> None:
        self.statuses[status] = self.statuses.get(status, 0) + 1


async def _committer(
    worker: int,
    urls: list[str],
    base: str,
    ledger: Ledger,
    stop: asyncio.Event,
    session: aiohttp.ClientSession,
) -> None:
    rng = random.Random(worker)
    n = 0
    while not stop.is_set():
        n += 1
        name = f"w{worker}-{n}"
        url = rng.choice(urls)
        sent = time.monotonic()
        try:
            async with session.post(
                url + base + "/namespaces/load/tables",
                json={"name": name},
                timeout=aiohttp.ClientTimeout(total=90),
            ) as response:
                body = await response.text()
                status = response.status
        except aiohttp.ClientConnectorError:
            ledger.count(0)  # refused: the node is down, nothing was sent
            await asyncio.sleep(0.05)
            continue
        except (aiohttp.ClientError, TimeoutError):
            ledger.unknown.append(name)  # sent, then the connection died
            ledger.count(-1)
            continue
        ledger.count(status)
        if status == 201:
            ledger.acked[name] = (sent, time.monotonic())
        elif status == 500 and "CommitStateUnknownException" in body:
            ledger.unknown.append(name)
        elif status == 503:
            await asyncio.sleep(0.1)
        else:
            ledger.bad.append(f"{name} via {url}: {status} {body[:300]}")


def _tables_in_log(cluster: Cluster, path: Path, tenant: str) -> set[str]:
    """Replay the whole log into a fresh view and list the catalog with the service code."""
    summary = replay(cluster.config, path, progress=False, idle_s=1.0, timeout_s=120.0)
    assert summary.waiting == 0, summary
    store = ViewStore(path, cluster.config)
    try:
        service = Metastore(store, default_codec(), ObjectCache(64 << 20), lanes=None)  # type: ignore[arg-type]
        names: set[str] = set()
        token = None
        while True:
            page = service.list_entities(tenant, "c", ("load",), Kind.TABLE, token, 1000)
            names |= {e.path[-1] for e in page.items}
            token = page.next_token
            if token is None:
                return names
    finally:
        store.close()


async def _catalog_with_namespace(api: Api) -> tuple[str, str]:
    tenant = unique("t")
    await _token_chain(
        [api],
        [
            ("POST", "/api/v1/tenants", {"name": tenant}),
            ("POST", f"/api/v1/tenants/{tenant}/catalogs", {"name": "c"}),
            ("POST", f"/api/v1/tenants/{tenant}/catalogs/c/namespaces", {"namespace": ["load"]}),
        ],
    )
    return tenant, f"/api/v1/tenants/{tenant}/catalogs/c"


async def test_owner_kill_9_loses_no_acknowledged_commit_and_a_restart_resumes_its_view(
    kafka_bootstrap: str, tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    cluster = _fresh_cluster(kafka_bootstrap, tmp_path / "nodes")
    try:
        tenant, base = await _catalog_with_namespace(Api(session, cluster.nodes[0].url))
        partition = cluster.partition(tenant, "c")
        victim = cluster.wait_owner(partition)
        urls = [n.url for n in cluster.nodes]
        ledger, stop = Ledger(), asyncio.Event()
        workers = [
            asyncio.create_task(_committer(w, urls, base, ledger, stop, session)) for w in range(50)
        ]
        await _until(lambda: len(ledger.acked) >= 200, 60, "200 commits before the kill")
        before = len(ledger.acked)
        victim.kill()
        killed_at = time.monotonic()
        # resumed = a commit sent after the kill was acknowledged
        await _until(
            lambda: any(s > killed_at for s, _ in ledger.acked.values()),
            90,
            "a commit after the kill",
        )
        resumed_at = min(done for sent, done in ledger.acked.values() if sent > killed_at)
        await _until(lambda: len(ledger.acked) >= before + 200, 60, "200 commits after resuming")
        stop.set()
        await asyncio.gather(*workers)
        survivors = [n for n in cluster.nodes if n is not victim]
        new_owner = cluster.wait_owner(partition, survivors)
        assert new_owner is not victim
        print(
            f"\nowner kill -9: {len(ledger.acked)} acknowledged, {len(ledger.unknown)} unknown, "
            f"statuses {dict(sorted(ledger.statuses.items()))}; "
            f"writes resumed {resumed_at - killed_at:.2f}s after the kill"
        )
        assert not ledger.bad, ledger.bad[:5]
        in_log = await asyncio.to_thread(_tables_in_log, cluster, tmp_path / "replay", tenant)
        lost = sorted(set(ledger.acked) - in_log)
        assert not lost, f"{len(lost)} acknowledged commits are not in the log: {lost[:10]}"
        assert in_log <= set(ledger.acked) | set(ledger.unknown), "a table nobody asked for"
        history = assert_status(await Api(session, new_owner.url).call("GET", base + "/commits"))
        assert history["commits"][0]["seq"] == len(in_log) + 2  # catalog, namespace, tables

        # The killed node comes back on its data directory and resumes its view.
        stored = sum((await asyncio.to_thread(view_state, new_owner))["offsets"].values())
        restarted = await asyncio.to_thread(cluster.restart, cluster.nodes.index(victim))
        consumed = await _metric(session, restarted, "metastore_view_records_total")
        assert 0 < consumed < stored, (consumed, stored)
        states = await asyncio.to_thread(_converged, cluster.nodes)
        assert len({s["digest"] for s in states}) == 1, states
    finally:
        cluster.close()
    cluster.logs_without_tracebacks()


async def test_zombie_owner_acknowledges_nothing_absent_from_the_log(
    kafka_bootstrap: str, tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    cluster = _fresh_cluster(kafka_bootstrap, tmp_path / "nodes")
    zombie: NodeProcess | None = None
    try:
        tenant, base = await _catalog_with_namespace(Api(session, cluster.nodes[0].url))
        partition = cluster.partition(tenant, "c")
        zombie = cluster.wait_owner(partition)
        others = [n for n in cluster.nodes if n is not zombie]
        to_zombie, elsewhere, stop = Ledger(), Ledger(), asyncio.Event()
        assert zombie.proc is not None
        workers = [
            asyncio.create_task(_committer(w, [zombie.url], base, to_zombie, stop, session))
            for w in range(16)
        ] + [
            asyncio.create_task(
                _committer(100 + w, [n.url for n in others], base, elsewhere, stop, session)
            )
            for w in range(16)
        ]
        await _until(lambda: len(to_zombie.acked) >= 50, 60, "commits through the owner")
        zombie.proc.send_signal(signal.SIGSTOP)
        try:
            new_owner = await asyncio.to_thread(cluster.wait_owner, partition, others, 60.0)
            acked = len(elsewhere.acked)
            await _until(lambda: len(elsewhere.acked) >= acked + 50, 60, "the new owner commits")
        finally:
            zombie.proc.send_signal(signal.SIGCONT)
        await _until(
            lambda: partition not in health(zombie)["owned-partitions"], 60, "the zombie steps down"
        )
        await asyncio.sleep(1.0)  # its held requests are answered meanwhile
        stop.set()
        await asyncio.gather(*workers)
        assert not to_zombie.bad and not elsewhere.bad, (to_zombie.bad[:5], elsewhere.bad[:5])
        in_log = await asyncio.to_thread(_tables_in_log, cluster, tmp_path / "replay", tenant)
        lost = sorted((set(to_zombie.acked) | set(elsewhere.acked)) - in_log)
        assert not lost, f"acknowledged but absent from the log: {lost[:10]}"
        print(
            f"\nzombie: {len(to_zombie.acked)} acknowledged through it "
            f"(statuses {dict(sorted(to_zombie.statuses.items()))}), "
            f"{len(elsewhere.acked)} elsewhere; new owner {new_owner.url}"
        )
    finally:
        if zombie is not None and zombie.proc is not None and zombie.proc.poll() is None:
            zombie.proc.send_signal(signal.SIGCONT)
        cluster.close()
    cluster.logs_without_tracebacks()


async def _until(condition: Any, timeout: float, what: str) -> None:  # noqa: ASYNC109
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)
