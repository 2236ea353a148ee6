"""Cluster-mode benchmark: nodes on one broker, next to what the broker does alone.

One broker (``metastore.procs.BrokerProcess``: Tansu, in memory) serves the whole
run and every scenario gets a fresh topic prefix. The nodes are child processes
(``metastore serve --kafka``); this process is the load generator. Broker, nodes
and load generator share the machine's cores, so absolute figures are a lower
bound; the ratios between figures measured side by side in this run are the
result.

1. raw broker transactions (``bench/broker.py``): 1 and ``--partitions``
   transactional producers, each on its own thread and partition, looping begin /
   produce one 300-byte record / commit with the partition owner's producer
   settings. The concurrency mirrors a node: one producer per owned partition,
   one transaction in flight each. So 1 producer is what one hot catalog (one
   partition) would get without group commit, and one per partition is what the
   whole cluster would get. The "read-back" rows repeat both in the owner's shape:
   flush, commit, then wait until a consumer polling like the view (its default
   batch and timeout) has read the record, as an owner waits before it acks.
2. 1 node (it owns every partition): ``--concurrency`` clients, each commit
   creates one table, all in ONE catalog ("hot catalog"), then round-robin over
   ``--catalogs`` catalogs.
3. 3 nodes: the same two loads, client ``w`` talking to node ``w mod 3``. A
   third of the clients talk to the owner of a given partition, the rest are
   forwarded; "forwarded" reports the measured share (below 2/3 when the owner's
   own clients, being faster, send more).
4. replay: each cluster's log replayed into a fresh directory (the function
   behind ``metastore replay``) next to a raw consumer reading the same topics
   (read_committed, every partition of both, from the beginning). Both rates
   exclude the idle window (``--idle``) that proves the end was reached.

Commits per transaction come from the log: the consistency tokens of the replies
bound each load's stretch of the refs topic, and each run of consecutive offsets
holding ref records there is one Kafka transaction (``bench/broker.py``,
``refs_census``); commits (warm-up included) divided by those transactions.

Run from the repo root: ``.venv/bin/python -m bench.cluster [--quick]``. The
summary is also written to ``.bench/cluster.json``. Exit status 1 if any request
failed unexpectedly (every table name is unique, so even a 409 is a bug), the
replay read a different number of records than the raw consumer, or a node did
not stop cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import confluent_kafka

from bench.broker import (
    RECORD_BYTES,
    RawTxnResult,
    raw_transactions,
    refs_census,
)
from bench.load import (
    Client,
    Failures,
    Latency,
    Progress,
    closed_loop,
    new_session,
)
from bench.nodes import ClusterNodes, cpu_seconds
from bench.replay import ReplayResult, replay_log
from bench.report import machine, ms, pct, print_outcome, save_report, table
from metastore.cluster.config import ClusterConfig
from metastore.cluster.records import partition_for
from metastore.consistency import HEADER
from metastore.procs import BrokerProcess

TENANT = "bench"
HOT_CATALOG = "hot"
NAMESPACE = "bench"
CLUSTER_SIZES = (1, 3)
REPO_ROOT = Path(__file__).resolve().parents[1]
OUT_PATH = REPO_ROOT / ".bench" / "cluster.json"

Marks = dict[int, int]  # partition -> next refs offset after the writes seen so far


# --- results -------------------------------------------------------------------------


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


# --- loads on a cluster (2, 3) -------------------------------------------------------


class Tokens:
    """Consistency tokens seen in replies: the log offsets that bound each load."""

    def __init__(self) -> None:
        self.marks: Marks = {}

    def note(self, headers: Any) -> str | None:
        token = headers.get(HEADER) if headers else None
        if token:
            p, _, offset = str(token).partition(":")
            self.marks[int(p)] = max(self.marks.get(int(p), 0), int(offset))
        return str(token) if token else None


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
    nodes: ClusterNodes, broker_pid: int | None, args: argparse.Namespace, failures: Failures
) -> list[LoadResult]:
    tokens = Tokens()
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
    nodes: ClusterNodes,
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
) -> tuple[list[LoadResult], ClusterConfig, bool]:
    """Start ``size`` nodes on a fresh prefix, run both loads, stop them gracefully."""
    nodes = ClusterNodes(broker.bootstrap, prefix, root, size, args.partitions)
    started = time.perf_counter()
    nodes.start()
    owned = nodes.owners() or []
    print(
        f"  healthy, every partition owned after {time.perf_counter() - started:.1f} s "
        f"(partitions per node: {', '.join(str(len(o)) for o in owned)})",
        flush=True,
    )
    broker_pid = broker.proc.pid if broker.proc is not None else None
    try:
        results = asyncio.run(cluster_loads(nodes, broker_pid, args, failures))
    except BaseException:
        nodes.kill()
        raise
    return results, nodes.config, nodes.stop()


def count_transactions(config: ClusterConfig, loads: Sequence[LoadResult], idle_s: float) -> None:
    """Fill each load's commits per transaction from its stretch of the refs topic."""
    census = refs_census(config, idle_s)
    for load in loads:
        start, end = load.marks
        load.ref_records, load.transactions = census.window(start, end)
        all_commits = load.warmup_commits + load.commits
        load.commits_per_txn = all_commits / load.transactions if load.transactions else None


# --- reporting -----------------------------------------------------------------------


def raw_label(r: RawTxnResult) -> str:
    return f"x{r.producers}" + (" read-back" if r.read_back else "")


def ratio(a: float, b: float) -> str:
    return "-" if not b or math.isnan(a) or math.isnan(b) else f"{a / b:.2f}"


def summary(
    raw: Sequence[RawTxnResult],
    loads: Sequence[LoadResult],
    replays: Sequence[ReplayResult],
    nproc: int,
) -> str:
    parts = [
        f"Cluster mode on one Tansu broker (in memory), one machine with {nproc} cores shared "
        "by the broker, the nodes (child processes) and the load generator (this process)."
    ]
    if raw:
        rows = [
            [
                raw_label(r),
                str(r.transactions),
                f"{r.txn_per_s:.0f}",
                ms(r.latency.p50),
                ms(r.latency.p99),
                pct(r.broker_cpu),
                pct(r.bench_cpu),
                str(r.errors),
            ]
            for r in raw
        ]
        headers = ["raw transactions", "txns", "txn/s", "p50 ms", "p99 ms", "broker cpu",
                   "bench cpu", "errors"]  # fmt: skip
        parts += [
            "",
            f"Raw broker rate: begin / produce one {RECORD_BYTES}-byte record / commit, one "
            "producer per thread and partition, one transaction in flight each; read-back: "
            "then wait until a consumer polling like the view has read it",
            table(headers, rows),
        ]
    if loads:
        rows = [
            [
                f"{r.scenario}, {r.nodes} node{'s' if r.nodes > 1 else ''}",
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
        parts += [
            "",
            f"Writes: {concurrency} clients, each commit creates one table (forwarded = share "
            "sent on by a non-owner; commits/txn from the log; cpu 100% = one core)",
            table(headers, rows),
        ]
        single = {r.scenario: r for r in loads if r.nodes == 1}
        rows = [
            [
                f"{r.scenario}, {r.nodes} node{'s' if r.nodes > 1 else ''}",
                f"{r.commits_per_s:.0f}",
                *(ratio(r.commits_per_s, d.txn_per_s) for d in raw),
                ratio(r.commits_per_s, single[r.scenario].commits_per_s)
                if r.nodes > 1 and r.scenario in single
                else "-",
            ]
            for r in loads
        ]
        headers = ["load", "commits/s", *(f"/ {raw_label(d)}" for d in raw), "/ 1 node"]
        parts += ["", "Ratios, measured side by side in this run", table(headers, rows)]
    if replays:
        rows = [
            [
                r.log,
                str(r.records),
                f"{r.raw.records_per_s:.0f}",
                f"{r.records_per_s:.0f}",
                ratio(r.records_per_s, r.raw.records_per_s),
                str(r.dropped),
                r.digest[:16],
            ]
            for r in replays
        ]
        headers = ["log", "records", "raw consume rec/s", "replay rec/s", "replay / raw",
                   "dropped", "digest"]  # fmt: skip
        parts += [
            "",
            "Replay into a fresh directory vs a raw read_committed consumer of the same topics "
            "(idle window excluded from both)",
            table(headers, rows),
        ]
    return "\n".join(parts)


# --- main ----------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--seconds", type=float, default=10.0, help="per load and raw phase")
    parser.add_argument("--quick", action="store_true", help="smoke run: seconds=2")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--catalogs", type=int, default=64)
    parser.add_argument("--partitions", type=int, default=12, help="per topic")
    parser.add_argument("--warmup", type=float, default=None, help="seconds before measuring")
    parser.add_argument("--idle", type=float, default=1.0, help="replay's idle window (s)")
    parser.add_argument("--skip-raw", action="store_true")
    parser.add_argument("--skip-replay", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds = 2.0
    if args.warmup is None:
        args.warmup = min(2.0, args.seconds / 5)
    if min(args.seconds, args.concurrency, args.catalogs, args.partitions, args.idle) <= 0:
        parser.error("--seconds, --concurrency, --catalogs, --partitions, --idle: positive")
    return args


def run(args: argparse.Namespace) -> int:
    info = machine() | {
        "confluent_kafka": confluent_kafka.version()[0],
        "librdkafka": confluent_kafka.libversion()[0],
    }
    command = shlex.join([Path(sys.executable).name, "-m", "bench.cluster", *sys.argv[1:]])
    print(f"command: {command}  (cwd {os.getcwd()})")
    print(
        f"machine: nproc={info['nproc']} cpu={info['cpu']!r} python={info['python']} "
        f"{info['platform']} confluent-kafka={info['confluent_kafka']}"
    )
    print(
        f"note: the broker, the nodes and this load generator share the same {info['nproc']} "
        "cores (one machine, loopback)\n",
        flush=True,
    )
    failures = Failures()
    raw: list[RawTxnResult] = []
    loads: list[LoadResult] = []
    replays: list[ReplayResult] = []
    nodes_ok = True
    run_id = os.urandom(3).hex()
    with (
        tempfile.TemporaryDirectory(prefix="metastore-bench-cluster-") as tmp,
        BrokerProcess(log_path=Path(tmp) / "broker.log") as broker,
    ):
        broker_pid = broker.proc.pid if broker.proc is not None else None
        print(f"broker: Tansu on {broker.bootstrap}, topic prefixes bench{run_id}-*", flush=True)
        if not args.skip_raw:
            print("\n== raw broker transactions ==", flush=True)
            for read_back, producers in itertools.product(
                (False, True), sorted({1, args.partitions})
            ):
                raw.append(
                    asyncio.run(
                        raw_transactions(
                            broker.bootstrap,
                            f"bench{run_id}-raw{producers}{'rb' if read_back else ''}",
                            args.partitions,
                            producers,
                            args.seconds,
                            args.warmup,
                            broker_pid,
                            failures,
                            read_back=read_back,
                        )
                    )
                )
        logs: list[tuple[str, ClusterConfig, list[LoadResult]]] = []
        for size in CLUSTER_SIZES:
            name = f"{size} node{'s' if size > 1 else ''}"
            print(f"\n== {name} ==", flush=True)
            results, config, stopped = run_cluster(
                broker, f"bench{run_id}-n{size}", size, Path(tmp) / f"n{size}", args, failures
            )
            nodes_ok &= stopped
            loads += results
            logs.append((f"{name} log", config, results))
        if not args.skip_replay:
            for name, config, results in logs:
                print(f"\n== replay of the {name} ==", flush=True)
                data_dir = Path(tmp) / f"replay-{config.prefix}"
                replays.append(asyncio.run(replay_log(config, name, data_dir, args.idle, failures)))
                count_transactions(config, results, args.idle)

    text = summary(raw, loads, replays, info["nproc"])
    ok = print_outcome(text, failures, nodes_ok)
    report = {
        "command": command,
        "machine": info,
        "settings": {k: v for k, v in vars(args).items() if not k.startswith("skip_")},
        "raw_transactions": [asdict(r) for r in raw],
        "loads": [_without_marks(r) for r in loads],
        "replays": [asdict(r) for r in replays],
        "ratios": ratios(raw, loads, replays),
        "failures": asdict(failures),
        "ok": ok,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    save_report(OUT_PATH, REPO_ROOT, report)
    return 0 if ok else 1


def _without_marks(load: LoadResult) -> dict[str, Any]:
    fields = asdict(load)
    del fields["marks"]
    return fields


def ratios(
    raw: Sequence[RawTxnResult], loads: Sequence[LoadResult], replays: Sequence[ReplayResult]
) -> dict[str, float | None]:
    """The summary's ratios, keyed for the JSON file."""

    def div(a: float, b: float) -> float | None:
        return a / b if b and not math.isnan(a) and not math.isnan(b) else None

    out: dict[str, float | None] = {}
    single = {r.scenario: r for r in loads if r.nodes == 1}

    def key(text: str) -> str:
        return text.replace(" ", "_")

    for load in loads:
        name = f"{key(load.scenario)}_{load.nodes}n"
        for base in raw:
            out[f"{name}_per_raw_{key(raw_label(base))}"] = div(load.commits_per_s, base.txn_per_s)
        if load.nodes > 1 and load.scenario in single:
            out[f"{name}_per_1n"] = div(load.commits_per_s, single[load.scenario].commits_per_s)
    for log in replays:
        out[f"replay_per_raw_consume_{key(log.log)}"] = div(
            log.records_per_s, log.raw.records_per_s
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
