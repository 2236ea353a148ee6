"""The garbage collection benchmark: ``metastore gc`` on a store of 1,000,000 objects.

One embedded node's store, built fast (``bench/scenarios/gc.py``: the node creates
the catalogs, then the store is extended directly through the persistence API while
no node has it open), most of it history older than the retention window. In one
run: the mark as a single-process Python scan of the store and as ``metastore gc
--phase mark`` on Spark (``--master``, ``local[*]`` by default; a child process
timed from start to exit, the JVM's start included, next to the mark's own rate),
``metastore audit`` and ``metastore export`` of the same store (objects/s), then
``metastore gc --phase sweep`` through the node (deletes/s), and the store's
objects and bytes before and after (after a manual compaction too: RocksDB reclaims
deleted rows' space only when it compacts). The summary goes to ``.bench/gc.json``.
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

from rocksdict import Options, Rdict

from bench import summary
from bench.load import Failures
from bench.report import command_line, machine, pairs, print_outcome, save_report
from bench.scenarios import gc
from harness.node import NodeProcess
from metastore.pipeline.gc.gc_mark import MarkTimes

REPO_ROOT = Path(__file__).resolve().parents[1]
OUT_PATH = REPO_ROOT / ".bench" / "gc.json"
RETENTION_S = 24 * 3600


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.gc", description=__doc__)
    parser.add_argument("--objects", type=int, default=1_000_000, help="written directly")
    parser.add_argument("--quick", action="store_true", help="smoke run: 50,000 objects")
    parser.add_argument("--catalogs", type=int, default=40)
    parser.add_argument("--fresh", type=int, default=50, help="retained commits per catalog")
    parser.add_argument("--master", default="local[*]", help="Spark master of the mark")
    args = parser.parse_args(argv)
    if args.quick:
        args.objects = 50_000
    if min(args.objects, args.catalogs, args.fresh) <= 0:
        parser.error("--objects, --catalogs, --fresh: positive")
    return args


def compacted_bytes(store: Path) -> int:
    db = Rdict(str(store), Options(raw_mode=True))
    try:
        db.compact_range(None, None)
    finally:
        db.close()
    return gc.store_bytes(store)


def run(args: argparse.Namespace) -> int:
    info = machine()
    command = command_line("bench.gc")
    print(f"command: {command}  (cwd {os.getcwd()})")
    print(f"machine: nproc={info['nproc']} cpu={info['cpu']!r} python={info['python']}\n")
    failures = Failures()
    catalogs = gc.catalog_names(args.catalogs)
    per_catalog = max(args.fresh + 1, args.objects // 2 // args.catalogs)
    with tempfile.TemporaryDirectory(prefix="metastore-bench-gc-") as tmp:
        root = Path(tmp)
        data, store = root / "node" / "data", root / "node" / "data" / "rocksdb"
        print(f"== store: {args.catalogs} catalogs x {per_catalog:,} commits ==", flush=True)
        with NodeProcess(data, log_path=root / "node.log") as node:
            gc.create_catalogs(node.url, catalogs)
        built = gc.extend(store, catalogs, per_catalog, args.fresh)
        objects_before = gc.count_objects(store, catalogs)
        bytes_before = gc.store_bytes(store)
        print(f"built {built.objects:,} objects in {built.seconds:.1f} s", flush=True)

        print("\n== mark: single-process Python scan ==", flush=True)
        times = MarkTimes(time.time_ns() // 1000, 0, RETENTION_S * 1_000_000)
        scan = gc.python_mark(store, catalogs, times)
        print(f"{scan.objects:,} objects in {scan.seconds:.1f} s", flush=True)

        with NodeProcess(data, log_path=root / "node2.log") as node:
            master = ("--master", args.master)
            print(f"\n== metastore audit, metastore export (Spark {args.master}) ==", flush=True)
            audited = gc.job_command("audit", node.url, root / "audit", *master)
            exported = gc.job_command("export", node.url, root / "export", *master)
            for name, timed in (("audit", audited), ("export", exported)):
                print(
                    f"{name}: {timed.summary['objects']:,} objects, "
                    f"{timed.summary['objects_per_s']:,.0f} objects/s in the job, "
                    f"{timed.seconds:.1f} s wall",
                    flush=True,
                )
            print(f"\n== mark: metastore gc --phase mark (Spark {args.master}) ==", flush=True)
            common = ("--grace", "0", "--retention", str(RETENTION_S), "--master", args.master)
            marked = gc.gc_command(node.url, root / "gc", "--phase", "mark", *common)
            print(f"{marked.summary['marked']:,} objects in {marked.seconds:.1f} s", flush=True)
            print("\n== sweep: metastore gc --phase sweep ==", flush=True)
            sweep_us = time.time_ns() // 1000
            swept = gc.gc_command(node.url, root / "gc", "--phase", "sweep", *common)
            print(f"{swept.summary['deleted']:,} deleted in {swept.seconds:.1f} s", flush=True)
        objects_after = gc.count_objects(store, catalogs)
        objects_older = gc.count_objects(store, catalogs, sweep_us)  # what the sweep found
        bytes_after = gc.store_bytes(store)
        bytes_compacted = compacted_bytes(store)
    if marked.summary["candidates"] != scan.candidates:
        failures.add(f"candidates: Spark {marked.summary['candidates']}, Python {scan.candidates}")
    deleted = swept.summary["deleted"]
    if objects_before - objects_older != deleted:
        failures.add(
            f"objects {objects_before} -> {objects_older}, the job reports {deleted} deleted"
        )
    spark_rate = marked.summary["mark_objects_per_s"]
    rows = [
        ("objects in the store", f"{objects_before:,}"),
        ("built directly", f"{built.objects:,} in {built.seconds:.1f} s"),
        ("mark, Python (1 process)", f"{scan.objects_per_s:,.0f} objects/s ({scan.seconds:.1f} s)"),
        (
            f"mark, Spark {args.master}",
            f"{spark_rate:,.0f} objects/s in the job; {marked.seconds:.1f} s wall incl. JVM",
        ),
        (
            f"audit, Spark {args.master}",
            f"{audited.summary['objects_per_s']:,.0f} objects/s in the job; "
            f"{audited.seconds:.1f} s wall incl. JVM",
        ),
        (
            f"export, Spark {args.master}",
            f"{exported.summary['objects_per_s']:,.0f} objects/s in the job; "
            f"{exported.seconds:.1f} s wall incl. JVM",
        ),
        ("candidates", f"{marked.summary['candidates']:,} (Python {scan.candidates:,})"),
        (
            "sweep",
            f"{deleted:,} deleted, {swept.summary['spared']:,} spared in {swept.seconds:.1f} s "
            f"({deleted / swept.seconds:,.0f} deletes/s)",
        ),
        ("objects after", f"{objects_after:,}"),
        (
            "storage",
            f"{bytes_before / 1e6:,.1f} MB before, {bytes_after / 1e6:,.1f} MB after, "
            f"{bytes_compacted / 1e6:,.1f} MB compacted",
        ),
    ]
    ok = print_outcome(pairs(rows), failures, nodes_ok=True)
    report = {
        "command": command,
        "machine": info,
        "settings": vars(args),
        "built": asdict(built),
        "python_mark": asdict(scan),
        "audit": asdict(audited),
        "export": asdict(exported),
        "spark_mark": asdict(marked),
        "sweep": asdict(swept),
        "objects": {"before": objects_before, "after": objects_after},
        "bytes": {"before": bytes_before, "after": bytes_after, "compacted": bytes_compacted},
        "sweep_deletes_per_s": deleted / swept.seconds if swept.seconds else None,
        "spark_per_python": spark_rate / scan.objects_per_s if scan.objects_per_s else None,
        "failures": asdict(failures),
        "ok": ok,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    save_report(OUT_PATH, REPO_ROOT, report)
    summary.contribute(
        "gc",
        [
            summary.Row(
                "gc",
                "mark on Spark vs one process",
                summary.Figure("spark", spark_rate, "obj/s"),
                summary.Figure("python", scan.objects_per_s, "obj/s"),
            )
        ],
        quick=args.quick,
    )
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
