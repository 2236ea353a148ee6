"""The data pipeline benchmark: ``metastore rebuild`` on Spark vs ``metastore replay``.

One Tansu broker; one log of ``--records`` records (1,000,000 by default) written
in the owners' record format (``bench/scenarios/rebuild.py``); then, in one run, a
raw read_committed consumer, ``metastore replay`` (one process) and ``metastore
rebuild`` (Spark ``--master``, ``local[*]`` by default) read it, and their digests
must agree; finally a tail is written and a node with an empty data directory
starts with ``--restore-from`` the rebuilt view, timed until it serves (and one
without, which reads the whole log, unless ``--skip-cold``). Broker, readers and
nodes share this machine's cores. The summary goes to ``.bench/pipeline.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import confluent_kafka

from bench import summary
from bench.load import Failures
from bench.report import command_line, machine, print_outcome, save_report
from bench.scenarios import rebuild
from bench.scenarios.raw_broker import raw_consume
from harness.broker import BrokerProcess
from metastore.cluster import topics
from metastore.cluster.cluster_config import ClusterConfig

REPO_ROOT = Path(__file__).resolve().parents[1]
OUT_PATH = REPO_ROOT / ".bench" / "pipeline.json"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.pipeline", description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000, help="in the log")
    parser.add_argument("--quick", action="store_true", help="smoke run: 50,000 records")
    parser.add_argument("--partitions", type=int, default=12, help="per topic")
    parser.add_argument("--objects-per-commit", type=int, default=3)
    parser.add_argument("--idle", type=float, default=1.0, help="replay's and rebuild's (s)")
    parser.add_argument("--master", default="local[*]", help="Spark master of the rebuild")
    parser.add_argument("--tail", type=int, default=None, help="records after the rebuild")
    parser.add_argument("--skip-restore", action="store_true")
    parser.add_argument("--skip-cold", action="store_true", help="no node without restore")
    args = parser.parse_args(argv)
    if args.quick:
        args.records = 50_000
    if args.tail is None:
        args.tail = max(1_000, args.records // 100)
    if min(args.records, args.partitions, args.objects_per_commit, args.idle, args.tail) <= 0:
        parser.error("--records, --partitions, --objects-per-commit, --idle, --tail: positive")
    return args


def run(args: argparse.Namespace) -> int:
    info = machine() | {"librdkafka": confluent_kafka.libversion()[0]}
    command = command_line("bench.pipeline")
    print(f"command: {command}  (cwd {os.getcwd()})")
    print(f"machine: nproc={info['nproc']} cpu={info['cpu']!r} python={info['python']}")
    print(f"note: the broker, the readers and the nodes share the same {info['nproc']} cores\n")
    failures = Failures()
    prefix = f"bench{os.urandom(3).hex()}"
    with (
        tempfile.TemporaryDirectory(prefix="metastore-bench-pipeline-") as tmp,
        BrokerProcess(log_path=Path(tmp) / "broker.log") as broker,
    ):
        root = Path(tmp)
        config = ClusterConfig(broker.bootstrap, prefix=prefix, partitions=args.partitions)
        topics.create(config)
        print(f"== log: {args.records:,} records on {broker.bootstrap} ({prefix}) ==", flush=True)
        log, writer = rebuild.write_log(config, args.records, args.objects_per_commit)
        try:
            print("\n== raw read_committed consumer ==", flush=True)
            raw = asyncio.run(raw_consume(config, args.idle, "raw consume", failures))
            source = ["--kafka", config.bootstrap, "--partitions", str(args.partitions)]
            idle = ["--idle", str(args.idle)]
            print("\n== metastore replay ==", flush=True)
            replayed = rebuild.timed(
                "replay",
                ["replay", *source, "--prefix", prefix, "--data-dir", str(root / "replayed"),
                 "--no-progress", *idle],
                failures,
            )  # fmt: skip
            print(f"\n== metastore rebuild (Spark {args.master}) ==", flush=True)
            rebuilt = rebuild.timed(
                "rebuild",
                ["rebuild", *source, "--topic-prefix", prefix, "--out", str(root / "rebuilt"),
                 "--master", args.master, "--no-progress", *idle],
                failures,
            )  # fmt: skip
            if replayed.digest != rebuilt.digest:
                failures.add(f"digests differ: replay {replayed.digest}, rebuild {rebuilt.digest}")
            if raw.records != replayed.records or replayed.records != rebuilt.records:
                failures.add(
                    f"records read: raw {raw.records}, replay {replayed.records}, "
                    f"rebuild {rebuilt.records}"
                )
            restored = None
            if not args.skip_restore and (root / "rebuilt").is_dir():
                print("\n== restore: tail, then a node from the rebuilt view ==", flush=True)
                restored = rebuild.restore(
                    writer,
                    root / "rebuilt",
                    root / "nodes",
                    args.tail,
                    not args.skip_cold,
                    failures,
                )
        finally:
            writer.close()
    result = rebuild.PipelineResult(log, raw, replayed, rebuilt, restored, args.master)
    text = "\n".join(rebuild.section(result))
    ok = print_outcome(text, failures, nodes_ok=True)
    report = {
        "command": command,
        "machine": info,
        "settings": vars(args),
        "result": asdict(result),
        "ratios": {
            "rebuild_per_replay": rebuilt.records_per_s / replayed.records_per_s
            if replayed.records_per_s
            else None,
            "raw_per_replay": raw.records_per_s / replayed.records_per_s
            if replayed.records_per_s
            else None,
        },
        "failures": asdict(failures),
        "ok": ok,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    save_report(OUT_PATH, REPO_ROOT, report)
    summary.contribute(
        "pipeline",
        [
            summary.Row(
                "pipeline",
                "rebuild on Spark vs replay",
                summary.Figure("rebuild", rebuilt.records_per_s, "rec/s"),
                summary.Figure("replay", replayed.records_per_s, "rec/s"),
            )
        ],
        quick=args.quick,
    )
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
