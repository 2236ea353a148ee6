"""HTTP benchmark of one embedded metastore node.

The node runs as a child process (``harness.node.NodeProcess``, fresh temp
data dir, loopback port); this process is the load generator (one aiohttp
ClientSession with a connection pool). Both share the same machine, so the
figures are a lower bound of what the node does with its cores to itself.

Scenarios:

1. hot catalog: ``--concurrency`` clients, every commit creates one table in ONE catalog.
2. many catalogs: the same load spread round-robin over ``--catalogs`` catalogs.
3. both with ``--fsync`` and with ``--no-fsync`` (a separate node each), and with
   ``--fsync`` once more on a node whose interpreter threads are pinned to one CPU
   (``METASTORE_PIN_CPU``, ``--pin-cpu``: the last CPU unless ``''``), same run.
4. the bare-aiohttp ceiling: the same POST load against an app that only answers
   (``bench/scenarios/aiohttp_ceiling.py``), in the same run; the write scenarios are
   also shown as a share of it.
4b. the commit engine alone: scenarios 1 and 2 (fsync on) through the node's own
   engine in this process, without HTTP (``bench/scenarios/engine_alone.py``): the
   engine's share of a commit's CPU, and the most one writer core commits.
5. big namespace: ``--tables`` tables in one namespace, loaded with the atomic
   commit endpoint (1000 creates per commit), then sequential single-client
   latency of GET one table and of listing a page of 100.

Scenarios 1-3 are ``bench/scenarios/embedded_writes.py``, 5 is
``bench/scenarios/big_namespace.py``.

Run from the repo root: ``.venv/bin/python -m bench.embedded [--quick]``. The
summary is also written to ``.bench/embedded.json``. Exit status 1 if any request
failed unexpectedly (every name is unique, so even a 409 is a bug).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from bench import summary as bench_summary
from bench.load import Failures, add_pin_cpu_option
from bench.report import command_line, machine, print_outcome, save_report
from bench.scenarios import aiohttp_ceiling, big_namespace, embedded_writes, engine_alone
from bench.scenarios.big_namespace import BigNamespaceResult
from bench.scenarios.embedded_writes import ThroughputResult

REPO_ROOT = Path(__file__).resolve().parents[1]
OUT_PATH = REPO_ROOT / ".bench" / "embedded.json"


def summary(
    throughput: Sequence[ThroughputResult],
    ceiling: ThroughputResult | None,
    engines: Sequence[ThroughputResult],
    big: BigNamespaceResult | None,
    nproc: int,
) -> str:
    parts = [
        f"Embedded node, one machine with {nproc} cores shared by the node (child process) "
        "and the load generator (this process)."
    ]
    parts += embedded_writes.section(throughput)
    parts += aiohttp_ceiling.section(ceiling, throughput)
    parts += engine_alone.section(engines, throughput, ceiling)
    parts += big_namespace.section(big)
    return "\n".join(parts)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.embedded", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--seconds", type=float, default=10.0, help="per throughput scenario")
    parser.add_argument("--tables", type=int, default=100_000, help="tables in the big namespace")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: seconds=2, tables=5000, samples<=500"
    )
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--catalogs", type=int, default=64)
    parser.add_argument("--samples", type=int, default=2000, help="read samples per operation")
    parser.add_argument("--warmup", type=float, default=None, help="seconds before measuring")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-big", action="store_true")
    parser.add_argument("--skip-ceiling", action="store_true", help="no bare-aiohttp run")
    parser.add_argument(
        "--skip-engine", action="store_true", help="no run of the commit engine alone"
    )
    parser.add_argument(
        "--fsync-modes",
        choices=("both", "on", "off"),
        default="both",
        help="nodes to measure writes on: --fsync, --no-fsync or both",
    )
    add_pin_cpu_option(parser, "measure the writes with fsync on a node whose threads are")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.tables, args.samples = 2.0, 5000, min(args.samples, 500)
    if args.warmup is None:
        args.warmup = min(1.0, args.seconds / 5)
    if args.seconds <= 0 or args.tables < 1 or args.concurrency < 1 or args.catalogs < 1:
        parser.error("--seconds, --tables, --concurrency and --catalogs must be positive")
    return args


def run(args: argparse.Namespace) -> int:
    info = machine()
    command = command_line("bench.embedded")
    print(f"command: {command}  (cwd {os.getcwd()})")
    print(
        f"machine: nproc={info['nproc']} cpu={info['cpu']!r} python={info['python']} "
        f"{info['platform']}"
    )
    print(
        f"note: the node and this load generator share the same {info['nproc']} cores "
        f"(one machine, loopback HTTP)\n",
        flush=True,
    )
    failures = Failures()
    throughput: list[ThroughputResult] = []
    ceiling: ThroughputResult | None = None
    engines: list[ThroughputResult] = []
    big: BigNamespaceResult | None = None
    nodes_ok = True
    modes = {"both": (True, False), "on": (True,), "off": (False,)}[args.fsync_modes]
    with tempfile.TemporaryDirectory(prefix="metastore-bench-") as tmp:
        if not args.skip_throughput and not args.skip_ceiling:
            ceiling, stopped = aiohttp_ceiling.measure(Path(tmp), args, failures)
            nodes_ok &= stopped
        if not args.skip_throughput:
            for fsync in modes:
                results, stopped = embedded_writes.measure(Path(tmp), fsync, args, failures)
                throughput += results
                nodes_ok &= stopped
            if args.pin_cpu is not None and True in modes:
                results, stopped = embedded_writes.measure(
                    Path(tmp), True, args, failures, args.pin_cpu
                )
                throughput += results
                nodes_ok &= stopped
            if not args.skip_engine and True in modes:
                engines = engine_alone.measure(Path(tmp), True, args, failures)
        if not args.skip_big:
            big, stopped = big_namespace.measure(Path(tmp), args, failures)
            nodes_ok &= stopped

    text = summary(throughput, ceiling, engines, big, info["nproc"])
    ok = print_outcome(text, failures, nodes_ok, "request failures")
    report = {
        "command": command,
        "machine": info,
        "settings": {
            k: v
            for k, v in vars(args).items()
            if k not in ("skip_throughput", "skip_big", "skip_ceiling", "skip_engine")
        },
        "throughput": [asdict(r) for r in throughput],
        "ceiling": None if ceiling is None else asdict(ceiling),
        "engine_alone": [asdict(r) for r in engines],
        "of_ceiling": None
        if ceiling is None or not ceiling.commits_per_s
        else {
            f"{r.label} / {'fsync' if r.fsync else 'no-fsync'}": r.commits_per_s
            / ceiling.commits_per_s
            for r in throughput
        },
        "big_namespace": None if big is None else asdict(big),
        "failures": asdict(failures),
        "ok": ok,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    save_report(OUT_PATH, REPO_ROOT, report)
    rows = aiohttp_ceiling.summary_rows(ceiling, throughput)
    rows += engine_alone.summary_rows(engines, throughput, ceiling)
    bench_summary.contribute("embedded", rows, quick=args.quick)
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
