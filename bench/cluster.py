"""Cluster-mode benchmark: nodes on one broker, next to what the broker does alone.

One broker (``harness.broker.BrokerProcess``: Tansu, in memory) serves the whole
run and every scenario gets a fresh topic prefix. Each scenario is a module in
``bench/scenarios/`` (``raw_broker``, ``cluster_writes``, ``replay``). The nodes are child processes
(``metastore serve --kafka``); this process is the load generator. Broker, nodes
and load generator share the machine's cores, so absolute figures are a lower
bound; the ratios between figures measured side by side in this run are the
result.

1. raw broker transactions: 1 and ``--partitions``
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
3b. 1 node again, its interpreter threads pinned to one CPU (``METASTORE_PIN_CPU``,
   ``--pin-cpu``: the last CPU unless ``''``), both loads; its log is not replayed.
4. replay: each cluster's log replayed into a fresh directory (the function
   behind ``metastore replay``) next to a raw consumer reading the same topics
   (read_committed, every partition of both, from the beginning). Both rates
   exclude the idle window (``--idle``) that proves the end was reached.

Commits per transaction come from the log: the consistency tokens of the replies
bound each load's stretch of the refs topic, and each run of consecutive offsets
holding ref records there is one Kafka transaction (``raw_broker.py``,
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
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import confluent_kafka

from bench import summary as bench_summary
from bench.load import Failures, add_pin_cpu_option
from bench.report import command_line, machine, print_outcome, ratio, save_report, table
from bench.scenarios import cluster_writes, raw_broker, replay
from bench.scenarios.cluster_writes import LoadResult, count_transactions, run_cluster
from bench.scenarios.raw_broker import RawTxnResult, raw_transactions
from bench.scenarios.replay import ReplayResult, replay_log
from harness.broker import BrokerProcess
from metastore.cluster.cluster_config import ClusterConfig

CLUSTER_SIZES = (1, 3)
REPO_ROOT = Path(__file__).resolve().parents[1]
OUT_PATH = REPO_ROOT / ".bench" / "cluster.json"


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
    parts += raw_broker.section(raw)
    parts += cluster_writes.section(loads)
    if loads:
        single = unpinned_single(loads)
        rows = [
            [
                r.label,
                f"{r.commits_per_s:.0f}",
                *(ratio(r.commits_per_s, d.txn_per_s) for d in raw),
                ratio(r.commits_per_s, single[r.scenario].commits_per_s)
                if r.nodes > 1 and r.scenario in single
                else "-",
            ]
            for r in loads
        ]
        headers = ["load", "commits/s", *(f"/ {raw_broker.label(d)}" for d in raw), "/ 1 node"]
        parts += ["", "Ratios, measured side by side in this run", table(headers, rows)]
    parts += replay.section(replays)
    return "\n".join(parts)


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
    add_pin_cpu_option(parser, "run both loads through one node whose threads are")
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
    command = command_line("bench.cluster")
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
                            broker.pid,
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
        if args.pin_cpu is not None:  # not replayed: the replays read the same records
            pin = args.pin_cpu
            print(f"\n== 1 node, METASTORE_PIN_CPU={pin} ==", flush=True)
            results, _, stopped = run_cluster(
                broker, f"bench{run_id}-n1p", 1, Path(tmp) / "n1p", args, failures, pin
            )
            nodes_ok &= stopped
            loads += results
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
    bench_summary.contribute("cluster", summary_rows(raw, loads, replays), quick=args.quick)
    return 0 if ok else 1


def summary_rows(
    raw: Sequence[RawTxnResult], loads: Sequence[LoadResult], replays: Sequence[ReplayResult]
) -> list[bench_summary.Row]:
    """The summary's rows: one hot catalog through one node against the broker's raw
    single-producer rate (the target: at least equal), 64 catalogs through one node
    against one producer per partition (plain and with the owner's read-back), and
    replay against a raw consumer of the same log."""
    Row, Figure = bench_summary.Row, bench_summary.Figure
    raws = {(r.producers, r.read_back): r for r in raw}
    rows: list[bench_summary.Row] = []

    def against(load: LoadResult, producers: int, read_back: bool, target: float | None) -> None:
        base = raws.get((producers, read_back))
        if base is None:
            return
        rows.append(
            Row(
                "cluster",
                f"{load.label} vs raw txn/s {raw_broker.label(base)}",
                Figure("node", load.commits_per_s, "/s"),
                Figure("raw", base.txn_per_s, "/s"),
                None if target is None else bench_summary.at_least(target),
            )
        )

    partitions = max((p for p, _ in raws), default=1)
    for load in (r for r in loads if r.nodes == 1):
        if load.scenario == "hot catalog":
            against(load, 1, False, 1.0)
        else:
            for read_back in (False, True):
                against(load, partitions, read_back, None)
    for log in replays:
        rows.append(
            Row(
                "cluster",
                f"replay of the {log.log} vs raw consumer",
                Figure("replay", log.records_per_s, "rec/s"),
                Figure("raw", log.raw.records_per_s, "rec/s"),
            )
        )
    return rows


def unpinned_single(loads: Sequence[LoadResult]) -> dict[str, LoadResult]:
    """Each load through one unpinned node, by scenario: what 3 nodes are compared with."""
    return {r.scenario: r for r in loads if r.nodes == 1 and r.pinned_cpu is None}


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
    single = unpinned_single(loads)

    def key(text: str) -> str:
        return text.replace(" ", "_")

    for load in loads:
        name = f"{key(load.scenario)}_{load.nodes}n"
        name += "" if load.pinned_cpu is None else "_pinned"
        for base in raw:
            out[f"{name}_per_raw_{key(raw_broker.label(base))}"] = div(
                load.commits_per_s, base.txn_per_s
            )
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
