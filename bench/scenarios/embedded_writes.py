"""Write throughput of one embedded node: every commit creates one table.

``concurrency`` clients in a closed loop, first all in ONE catalog (the hot catalog:
group commit shares its durable writes), then round-robin over ``catalogs`` catalogs.
The node's counters before and after give the server's commits, its durable writes
(batches), its CAS retries and the garbage collector's pauses (their share of the
node's CPU); node and client CPU come from /proc.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from bench.load import Client, Failures, Latency, Progress, closed_loop, new_session, pin_env
from bench.report import ms, pct, table
from harness.node import NodeProcess, stop_checked
from harness.process import cpu_seconds

HOT_CATALOG = "default"  # created by the node at bootstrap
NAMESPACE = "bench"


@dataclass
class ThroughputResult:
    scenario: str
    fsync: bool
    catalogs: int
    concurrency: int
    seconds: float
    commits: int
    commits_per_s: float
    latency: Latency
    server_commits: int
    server_batches: int
    commits_per_write: float | None
    commits_per_fsync: float | None  # commits per WAL fsync (the group sync), with fsync on
    cas_retries: int
    node_cpu: float  # CPU seconds per wall second (1.0 = one core busy)
    client_cpu: float
    errors: int
    # the collector's pauses over the node's CPU time (every thread waits for one)
    collector_share: float | None = None
    pinned_cpu: int | None = None  # the node's METASTORE_PIN_CPU (None: not pinned)

    @property
    def label(self) -> str:
        """The scenario, marked when its node's interpreter threads were pinned to a CPU."""
        return self.scenario + ("" if self.pinned_cpu is None else ", pinned")


COUNTERS = (  # the node's counters a load's result reads, before and after it
    "metastore_commits_total",
    "metastore_commit_batches_total",
    "metastore_wal_syncs_total",  # none without fsync
    "metastore_cas_retries_total",
)
COLLECTOR = "metastore_gc_pause_seconds_sum"  # one series per generation


def collector_seconds(values: Mapping[str, float]) -> float:
    """The seconds the collector has paused the node, every generation, from the
    values of ``/metrics`` by series (``Client.metrics``)."""
    return sum(v for series, v in values.items() if series.split("{", 1)[0] == COLLECTOR)


@dataclass
class Measured:
    """One measured load: its clients' latencies and what the counters grew by."""

    scenario: str
    fsync: bool
    catalogs: int
    latencies: list[float]
    elapsed: float
    grown: dict[str, float]  # by counter name (``COUNTERS``)
    collector_s: float  # the collector's pauses meanwhile

    def result(
        self,
        args: argparse.Namespace,
        failures: Failures,
        counter: str,
        node_cpu: float,
        client_cpu: float,
        errors_before: int,
    ) -> ThroughputResult:
        """The load's result; a commit count that differs from the clients' is a
        failure (``counter`` names who counted)."""
        commits, batches, syncs, retries = (self.grown[name] for name in COUNTERS)
        if int(commits) != len(self.latencies):
            failures.add(
                f"{self.scenario}: {counter} counted {commits:.0f} commits, "
                f"clients {len(self.latencies)}"
            )
        return ThroughputResult(
            scenario=self.scenario,
            fsync=self.fsync,
            catalogs=self.catalogs,
            concurrency=args.concurrency,
            seconds=round(self.elapsed, 3),
            commits=len(self.latencies),
            commits_per_s=len(self.latencies) / self.elapsed,
            latency=Latency.of(self.latencies),
            server_commits=int(commits),
            server_batches=int(batches),
            commits_per_write=commits / batches if batches else None,
            commits_per_fsync=commits / syncs if syncs else None,
            cas_retries=int(retries),
            node_cpu=node_cpu,
            client_cpu=client_cpu,
            errors=failures.count - errors_before,
            collector_share=self.collector_s / (node_cpu * self.elapsed) if node_cpu else None,
        )


async def create_catalogs(client: Client, names: Sequence[str]) -> None:
    """Create the catalogs (except the bootstrap one) and a namespace in each."""
    gate = asyncio.Semaphore(8)

    async def one(name: str) -> None:
        async with gate:
            if name != HOT_CATALOG:
                await client.request(
                    "POST", f"{client.api}/catalogs", body={"name": name}, expect=201
                )
            await client.request(
                "POST",
                client.catalog(name) + "/namespaces",
                body={"namespace": [NAMESPACE]},
                expect=201,
            )

    await asyncio.gather(*(one(n) for n in names))


async def create_tables(
    client: Client,
    catalogs: Sequence[str],
    concurrency: int,
    seconds: float,
    next_index: list[int],
    progress: Progress | None,
) -> tuple[list[float], float]:
    """``concurrency`` workers create uniquely named tables until ``seconds`` pass,
    round-robin over ``catalogs``.

    Returns the latencies of the successful creates and the wall time until the
    last in-flight request finished.
    """
    round_robin = itertools.count()
    urls = [client.catalog(c) + f"/namespaces/{NAMESPACE}/tables" for c in catalogs]

    async def send(w: int, i: int) -> float | None:
        url = urls[next(round_robin) % len(urls)]
        reply = await client.call("POST", url, body={"name": f"t{w}_{i}"}, expect=201)
        return reply.seconds if reply.ok else None

    return await closed_loop(send, concurrency, seconds, next_index, progress)


async def run_writes(
    url: str, pid: int, fsync: bool, args: argparse.Namespace, failures: Failures
) -> list[ThroughputResult]:
    mode = "fsync" if fsync else "no-fsync"
    results: list[ThroughputResult] = []
    async with new_session(args.concurrency) as session:
        client = Client(session, url, failures)
        many = [f"c{i:03d}" for i in range(args.catalogs)]
        print(f"  setup: namespace in {HOT_CATALOG!r}, {args.catalogs} catalogs", flush=True)
        await create_catalogs(client, [HOT_CATALOG, *many])
        scenarios = [
            ("hot catalog", [HOT_CATALOG]),
            (f"{args.catalogs} catalogs", many),
        ]
        for name, catalogs in scenarios:
            next_index = [0] * args.concurrency
            errors_before = failures.count
            # Warm-up (not measured): connections, caches, first index spills.
            await create_tables(
                client, catalogs, args.concurrency, args.warmup, next_index, progress=None
            )
            before = await client.metrics()
            cpu_before = cpu_seconds(pid), cpu_seconds()
            with Progress(f"{name} / {mode}") as progress:
                latencies, elapsed = await create_tables(
                    client, catalogs, args.concurrency, args.seconds, next_index, progress
                )
            cpu_node, cpu_client = (
                (cpu_seconds(pid) - cpu_before[0]) / elapsed,
                (cpu_seconds() - cpu_before[1]) / elapsed,
            )
            after = await client.metrics()
            grown = {c: after.get(c, 0.0) - before.get(c, 0.0) for c in COUNTERS}
            collector = collector_seconds(after) - collector_seconds(before)
            measured = Measured(name, fsync, len(catalogs), latencies, elapsed, grown, collector)
            results.append(
                measured.result(args, failures, "server", cpu_node, cpu_client, errors_before)
            )
    return results


def measure(
    tmp: Path,
    fsync: bool,
    args: argparse.Namespace,
    failures: Failures,
    pin: int | None = None,
) -> tuple[list[ThroughputResult], bool]:
    """Both loads on a fresh node started with ``--fsync`` or ``--no-fsync``, its
    interpreter threads pinned to CPU ``pin`` if given (never pinned otherwise, whatever
    this process's environment says); the results and whether the node then stopped
    cleanly."""
    flag = "--fsync" if fsync else "--no-fsync"
    where = "" if pin is None else f"-cpu{pin}"
    data_dir = tmp / f"node-{flag.lstrip('-')}{where}" / "data"
    data_dir.parent.mkdir(parents=True)
    pinned = "" if pin is None else f", METASTORE_PIN_CPU={pin}"
    print(f"== throughput, node started with {flag}{pinned} ==", flush=True)
    env = pin_env(pin)
    node = NodeProcess(data_dir, extra_args=(flag,), env=env).start()
    results: list[ThroughputResult] = []
    try:
        results = asyncio.run(run_writes(node.url, node.pid, fsync, args, failures))
    finally:
        stopped = stop_checked(node)
    return [replace(r, pinned_cpu=pin) for r in results], stopped


def section(results: Sequence[ThroughputResult]) -> list[str]:
    """The summary's lines for these results (none without results)."""
    if not results:
        return []
    rows = [
        [
            r.label,
            "on" if r.fsync else "off",
            str(r.concurrency),
            str(r.commits),
            f"{r.commits_per_s:.0f}",
            ms(r.latency.p50),
            ms(r.latency.p99),
            ms(r.latency.p999),
            "-" if r.commits_per_write is None else f"{r.commits_per_write:.1f}",
            "-" if r.commits_per_fsync is None else f"{r.commits_per_fsync:.1f}",
            pct(r.node_cpu),
            "-" if r.collector_share is None else pct(r.collector_share),
            pct(r.client_cpu),
            str(r.errors),
        ]
        for r in results
    ]
    headers = [
        "scenario", "fsync", "conc", "commits", "commits/s",
        "p50 ms", "p99 ms", "p99.9 ms", "commits/write", "commits/fsync", "node cpu",
        "of it gc", "bench cpu", "errors",
    ]  # fmt: skip
    return [
        "",
        "Write throughput (each commit creates one table; commits/write = server's "
        "commits / catalog batches (one compare-and-swap each; the batches of several "
        "catalogs share one RocksDB write); commits/fsync = server's commits / "
        "WAL fsyncs (batches of any catalogs share one); cpu 100% = one core; of it gc = "
        "the garbage collector's pauses over the node's CPU time)",
        table(headers, rows),
    ]
