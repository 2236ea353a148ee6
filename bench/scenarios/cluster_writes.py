"""Loads on a cluster: nodes on one broker, every commit creates one table.

``concurrency`` clients in a closed loop, client ``w`` talking to node ``w mod size``,
first all in ONE catalog (the hot catalog), then round-robin over ``catalogs``
catalogs. A non-owner forwards a write to the partition's owner; the nodes' counters
give the share forwarded. The consistency tokens of the replies bound each load's
stretch of the refs topic, from which ``count_transactions`` later reads the commits
per Kafka transaction (``raw_broker.refs_census``).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.load import Client, Failures, Latency, Progress, closed_loop, new_session, pin_env
from bench.report import ms, pct, table
from bench.scenarios.raw_broker import refs_census
from harness.broker import BrokerProcess
from harness.cluster import Cluster
from harness.process import cpu_seconds
from metastore.catalog.consistency import HEADER, ConsistencyToken
from metastore.cluster.changelog_records import partition_for
from metastore.cluster.cluster_config import ClusterConfig

TENANT = "bench"
HOT_CATALOG = "hot"
NAMESPACE = "bench"

Marks = dict[int, int]  # partition -> next refs offset after the writes seen so far


@dataclass
class LoadResult:
    nodes: int
    scenario: str
    catalogs: int
    partitions_used: int
    concurrency: int
    seconds: float
    commits: int
    commits_per_s: float
    latency: Latency
    server_commits: int
    forwarded: float  # share of the measured commits a node forwarded to the owner
    forward_retries: int
    cas_retries: int
    nodes_cpu: float  # CPU seconds per wall second, all nodes (1.0 = one core busy)
    broker_cpu: float
    bench_cpu: float
    errors: int
    warmup_commits: int
    # from the log after the run, over the load's warm-up and measured commits
    transactions: int | None = None
    ref_records: int | None = None  # one per durable write of a catalog (group commit)
    commits_per_txn: float | None = None
    marks: tuple[Marks, Marks] = field(default=({}, {}), repr=False)
    pinned_cpu: int | None = None  # the nodes' METASTORE_PIN_CPU (None: not pinned)

    @property
    def label(self) -> str:
        """The load, its number of nodes, and whether they were pinned to a CPU."""
        nodes = f"{self.nodes} node{'s' if self.nodes > 1 else ''}"
        return f"{self.scenario}, {nodes}" + ("" if self.pinned_cpu is None else ", pinned")


class Tokens:
    """Consistency tokens seen in replies: the log offsets that bound each load (read with
    the service's own parser, so the benchmark follows the token's format)."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.marks: Marks = {}

    def note(self, headers: Any) -> str | None:
        text = headers.get(HEADER) if headers else None
        if text:
            token = ConsistencyToken.parse(str(text), self.partitions)
            self.marks[token.partition] = max(self.marks.get(token.partition, 0), token.offset)
        return str(text) if text else None


async def setup(clients: Sequence[Client], catalogs: Sequence[str], tokens: Tokens) -> None:
    """Tenant, catalogs and one namespace each through node 0, then wait until every
    node's view has them (a node runs the handler itself before it forwards)."""
    first = clients[0]
    reply = await first.call(
        "POST", first.base + "/api/v1/tenants", body={"name": TENANT}, expect=201
    )
    tenant_token = tokens.note(reply.headers) or ""
    gate = asyncio.Semaphore(8)
    last: dict[str, str] = {}

    async def one(name: str) -> None:
        async with gate:
            token = tenant_token
            for url, body in (
                (f"{first.api}/catalogs", {"name": name}),
                (first.catalog(name) + "/namespaces", {"namespace": [NAMESPACE]}),
            ):
                reply = await first.call(
                    "POST", url, body=body, headers={HEADER: token} if token else None, expect=201
                )
                token = tokens.note(reply.headers) or token
            last[name] = token

    await asyncio.gather(*(one(n) for n in catalogs))
    for client in clients[1:]:
        await asyncio.gather(
            *(
                client.call(
                    "GET",
                    client.catalog(name) + f"/namespaces/{NAMESPACE}",
                    headers={HEADER: last[name]} if last.get(name) else None,
                )
                for name in catalogs
            )
        )


async def create_tables(
    clients: Sequence[Client],
    catalogs: Sequence[str],
    concurrency: int,
    seconds: float,
    next_index: list[int],
    progress: Progress | None,
    tokens: Tokens,
) -> tuple[list[float], float]:
    """Worker ``w`` talks to node ``w mod len(clients)``, round-robin over ``catalogs``."""
    round_robin = itertools.count()
    paths = [f"/catalogs/{c}/namespaces/{NAMESPACE}/tables" for c in catalogs]

    async def send(w: int, i: int) -> float | None:
        client = clients[w % len(clients)]
        url = client.api + paths[next(round_robin) % len(paths)]
        reply = await client.call("POST", url, body={"name": f"t{w}_{i}"}, expect=201)
        tokens.note(reply.headers)
        return reply.seconds if reply.ok else None

    return await closed_loop(send, concurrency, seconds, next_index, progress)


async def totals(clients: Sequence[Client]) -> dict[str, float]:
    """Every node's counters, summed."""
    summed: dict[str, float] = {}
    for values in await asyncio.gather(*(c.metrics() for c in clients)):
        for name, value in values.items():
            summed[name] = summed.get(name, 0.0) + value
    return summed


async def cluster_loads(
    nodes: Cluster, broker_pid: int | None, args: argparse.Namespace, failures: Failures
) -> list[LoadResult]:
    tokens = Tokens(nodes.config.partitions)
    async with new_session(args.concurrency + 8) as session:
        clients = [Client(session, url, failures, tenant=TENANT) for url in nodes.urls]
        many = [f"c{i:03d}" for i in range(args.catalogs)]
        print(f"  setup: tenant {TENANT!r}, catalog {HOT_CATALOG!r}, {args.catalogs} catalogs")
        await setup(clients, [HOT_CATALOG, *many], tokens)
        return [
            await measure_load(nodes, clients, name, catalogs, broker_pid, args, failures, tokens)
            for name, catalogs in (
                ("hot catalog", [HOT_CATALOG]),
                (f"{args.catalogs} catalogs", many),
            )
        ]


async def measure_load(
    nodes: Cluster,
    clients: Sequence[Client],
    name: str,
    catalogs: Sequence[str],
    broker_pid: int | None,
    args: argparse.Namespace,
    failures: Failures,
    tokens: Tokens,
) -> LoadResult:
    size = len(nodes.nodes)
    start_marks = dict(tokens.marks)
    next_index = [0] * args.concurrency
    errors_before = failures.count
    # Warm-up (not measured): connections, caches, the owners' producers.
    warm, _ = await create_tables(
        clients, catalogs, args.concurrency, args.warmup, next_index, None, tokens
    )
    before = await totals(clients)
    pids = nodes.pids
    cpu_before = sum(cpu_seconds(p) for p in pids), cpu_seconds(broker_pid), cpu_seconds()
    with Progress(f"{name} / {size} node{'s' if size > 1 else ''}") as progress:
        latencies, elapsed = await create_tables(
            clients, catalogs, args.concurrency, args.seconds, next_index, progress, tokens
        )
    cpu_after = sum(cpu_seconds(p) for p in pids), cpu_seconds(broker_pid), cpu_seconds()
    after = await totals(clients)

    def delta(metric: str) -> int:
        return int(after.get(metric, 0.0) - before.get(metric, 0.0))

    commits = delta("metastore_commits_total")
    if commits < len(latencies):
        failures.add(f"{name}: nodes counted {commits} commits, clients {len(latencies)}")
    cpu = [(a - b) / elapsed for a, b in zip(cpu_after, cpu_before, strict=True)]
    return LoadResult(
        nodes=size,
        scenario=name,
        catalogs=len(catalogs),
        partitions_used=len({partition_for(TENANT, c, nodes.config.partitions) for c in catalogs}),
        concurrency=args.concurrency,
        seconds=round(elapsed, 3),
        commits=len(latencies),
        commits_per_s=len(latencies) / elapsed,
        latency=Latency.of(latencies),
        server_commits=commits,
        forwarded=delta("metastore_forwarded_total") / max(1, len(latencies)),
        forward_retries=delta("metastore_forward_retries_total"),
        cas_retries=delta("metastore_cas_retries_total"),
        nodes_cpu=cpu[0],
        broker_cpu=cpu[1],
        bench_cpu=cpu[2],
        errors=failures.count - errors_before,
        warmup_commits=len(warm),
        marks=(start_marks, dict(tokens.marks)),
    )


def run_cluster(
    broker: BrokerProcess,
    prefix: str,
    size: int,
    root: Path,
    args: argparse.Namespace,
    failures: Failures,
    pin: int | None = None,
) -> tuple[list[LoadResult], ClusterConfig, bool]:
    """Start ``size`` nodes on a fresh prefix, their interpreter threads pinned to CPU
    ``pin`` if given (never otherwise, whatever this process's environment says), run
    both loads, stop them gracefully."""
    env = pin_env(pin)
    nodes = Cluster(
        broker.bootstrap, prefix, root, size, args.partitions, env=env, shared_warehouse=True
    )
    started = time.perf_counter()
    try:
        nodes.start()
        owned = nodes.wait_balanced()
        print(
            f"  healthy, every partition owned after {time.perf_counter() - started:.1f} s "
            f"(partitions per node: {', '.join(str(len(o)) for o in owned)})",
            flush=True,
        )
        results = asyncio.run(cluster_loads(nodes, broker.pid, args, failures))
    except BaseException:
        nodes.kill()
        raise
    results = [replace(r, pinned_cpu=pin) for r in results]
    return results, nodes.config, nodes.stop_all()


def count_transactions(config: ClusterConfig, loads: Sequence[LoadResult], idle_s: float) -> None:
    """Fill each load's commits per transaction from its stretch of the refs topic."""
    census = refs_census(config, idle_s)
    for load in loads:
        start, end = load.marks
        load.ref_records, load.transactions = census.window(start, end)
        all_commits = load.warmup_commits + load.commits
        load.commits_per_txn = all_commits / load.transactions if load.transactions else None


def section(loads: Sequence[LoadResult]) -> list[str]:
    """The summary's table of these loads (none without loads)."""
    if not loads:
        return []
    rows = [
        [
            r.label,
            str(r.partitions_used),
            str(r.commits),
            f"{r.commits_per_s:.0f}",
            ms(r.latency.p50),
            ms(r.latency.p99),
            ms(r.latency.p999),
            pct(r.forwarded),
            "-" if r.commits_per_txn is None else f"{r.commits_per_txn:.1f}",
            pct(r.nodes_cpu),
            pct(r.broker_cpu),
            pct(r.bench_cpu),
            str(r.errors),
        ]
        for r in loads
    ]
    headers = ["load", "partitions", "commits", "commits/s", "p50 ms", "p99 ms",
               "p99.9 ms", "forwarded", "commits/txn", "nodes cpu", "broker cpu",
               "bench cpu", "errors"]  # fmt: skip
    concurrency = loads[0].concurrency
    return [
        "",
        f"Writes: {concurrency} clients, each commit creates one table (forwarded = share "
        "sent on by a non-owner; commits/txn from the log; cpu 100% = one core)",
        table(headers, rows),
    ]
