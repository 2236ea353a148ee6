"""HTTP benchmark of one embedded metastore node.

The node runs as a child process (``metastore.procs.NodeProcess``, fresh temp
data dir, loopback port); this process is the load generator (one aiohttp
ClientSession with a connection pool). Both share the same machine, so the
figures are a lower bound of what the node does with its cores to itself.

Scenarios:

1. hot catalog: ``--concurrency`` clients, every commit creates one table in ONE catalog.
2. many catalogs: the same load spread round-robin over ``--catalogs`` catalogs.
3. both with ``--fsync`` and with ``--no-fsync`` (a separate node each).
4. big namespace: ``--tables`` tables in one namespace, loaded with the atomic
   commit endpoint (1000 creates per commit), then sequential single-client
   latency of GET one table and of listing a page of 100.

Run from the repo root: ``.venv/bin/python -m bench.embedded [--quick]``. The
summary is also written to ``.bench/embedded.json``. Exit status 1 if any request
failed unexpectedly (every name is unique, so even a 409 is a bug).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import shlex
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.load import Client, Failures, Latency, Progress, closed_loop, new_session
from bench.nodes import check_stop, cpu_seconds
from bench.report import machine, ms, pairs, pct, print_outcome, save_report, table
from metastore.procs import NodeProcess

TENANT = "default"
HOT_CATALOG = "default"  # created by the node at bootstrap
NAMESPACE = "bench"
BIG_NAMESPACE = "big"
COMMIT_BATCH = 1000  # creates per atomic commit (the server's default max_changes_per_commit)
PAGE_SIZE = 100
REPO_ROOT = Path(__file__).resolve().parents[1]
OUT_PATH = REPO_ROOT / ".bench" / "embedded.json"


# --- bookkeeping ---------------------------------------------------------------------


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
    cas_retries: int
    node_cpu: float  # CPU seconds per wall second (1.0 = one core busy)
    client_cpu: float
    errors: int


@dataclass
class ReadResult:
    operation: str
    latency: Latency


@dataclass
class BigNamespaceResult:
    tables: int
    load_commits: int
    load_seconds: float
    tables_per_s: float
    commit_latency: Latency
    walk_pages: int
    walk_seconds: float
    reads: list[ReadResult]
    head_seq: int
    catalog_commits: int
    index: dict[str, Any]
    data_dir_bytes: int
    data_dir_files: int
    errors: int


# --- throughput scenarios (1-3) ------------------------------------------------------


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


async def throughput_node(
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
            commits = after["metastore_commits_total"] - before["metastore_commits_total"]
            batches = (
                after["metastore_commit_batches_total"] - before["metastore_commit_batches_total"]
            )
            if int(commits) != len(latencies):
                failures.add(
                    f"{name}: server counted {commits:.0f} commits, client {len(latencies)}"
                )
            results.append(
                ThroughputResult(
                    scenario=name,
                    fsync=fsync,
                    catalogs=len(catalogs),
                    concurrency=args.concurrency,
                    seconds=round(elapsed, 3),
                    commits=len(latencies),
                    commits_per_s=len(latencies) / elapsed,
                    latency=Latency.of(latencies),
                    server_commits=int(commits),
                    server_batches=int(batches),
                    commits_per_write=commits / batches if batches else None,
                    cas_retries=int(
                        after["metastore_cas_retries_total"] - before["metastore_cas_retries_total"]
                    ),
                    node_cpu=cpu_node,
                    client_cpu=cpu_client,
                    errors=failures.count - errors_before,
                )
            )
    return results


# --- big namespace (4) ---------------------------------------------------------------


def table_url(client: Client, name: str = "") -> str:
    base = client.catalog(HOT_CATALOG) + f"/namespaces/{BIG_NAMESPACE}/tables"
    return f"{base}/{name}" if name else base


async def load_tables(client: Client, names: Sequence[str]) -> tuple[list[float], float]:
    """Create ``names`` with atomic commits of ``COMMIT_BATCH`` creates, one at a time."""
    latencies: list[float] = []
    start = time.perf_counter()
    with Progress("load", total=len(names)) as progress:
        for first in range(0, len(names), COMMIT_BATCH):
            chunk = names[first : first + COMMIT_BATCH]
            body = {
                "operation": "bench load",
                "changes": [
                    {"action": "create", "entity": {"kind": "table", "path": [BIG_NAMESPACE, n]}}
                    for n in chunk
                ],
            }
            before = client.failures.count
            elapsed, _ = await client.request(
                "POST", client.catalog(HOT_CATALOG) + "/commit", body=body
            )
            if client.failures.count == before:
                latencies.append(elapsed)
                progress.done += len(chunk)
            else:
                progress.errors += 1
    return latencies, time.perf_counter() - start


async def walk_listing(client: Client, expected: int) -> tuple[list[str], float]:
    """Page through the whole namespace once; returns every continuation token."""
    tokens: list[str] = []
    seen = 0
    token: str | None = None
    start = time.perf_counter()
    with Progress("walk listing", total=expected) as progress:
        while True:
            params = {"pageSize": str(PAGE_SIZE)} | ({"pageToken": token} if token else {})
            _, page = await client.request("GET", table_url(client), params=params)
            if not isinstance(page, dict):
                break  # counted as a failure already
            seen += len(page["tables"])
            progress.done = seen
            token = page.get("next-page-token")
            if not token:
                break
            tokens.append(token)
    if seen != expected:
        client.failures.add(f"walk listing saw {seen} tables, want {expected}")
    return tokens, time.perf_counter() - start


async def sample_reads(
    client: Client,
    label: str,
    samples: int,
    warmup: int,
    make: Callable[[], tuple[str, dict[str, str] | None]],
    check: Callable[[dict[str, Any]], bool],
) -> ReadResult:
    """Sequential single-client latency of ``make() -> (url, params)`` requests."""
    latencies: list[float] = []
    with Progress(label, total=samples) as progress:
        for i in range(warmup + samples):
            url, params = make()
            elapsed, body = await client.request("GET", url, params=params)
            if not isinstance(body, dict) or not check(body):
                if body is not None:
                    client.failures.add(f"GET {url} {params}: unexpected body {str(body)[:200]}")
                progress.errors += 1
                continue
            if i >= warmup:
                latencies.append(elapsed)
                progress.done += 1
    return ReadResult(label, Latency.of(latencies))


async def big_namespace(url: str, args: argparse.Namespace, failures: Failures) -> dict[str, Any]:
    rng = random.Random(args.seed)
    async with new_session(4) as session:
        client = Client(session, url, failures)
        errors_before = failures.count
        await client.request(
            "POST",
            client.catalog(HOT_CATALOG) + "/namespaces",
            body={"namespace": [BIG_NAMESPACE]},
            expect=201,
        )
        width = len(str(max(args.tables - 1, 1)))
        names = [f"t{i:0{width}d}" for i in range(args.tables)]
        # Creation order shuffled: each commit lands keys all over the key space, as
        # real table names do, instead of only appending at the end of the index.
        load_order = names[:]
        rng.shuffle(load_order)
        commit_latencies, load_seconds = await load_tables(client, load_order)

        _, ref = await client.request("GET", client.catalog(HOT_CATALOG) + "/ref")
        head_seq = 0
        if isinstance(ref, dict):
            _, head = await client.request(
                "GET", client.catalog(HOT_CATALOG) + f"/commits/{ref['head']}"
            )
            head_seq = int(head["seq"]) if isinstance(head, dict) else 0

        tokens, walk_seconds = await walk_listing(client, args.tables)
        warmup = min(200, args.samples)
        known = set(names)
        reads = [
            await sample_reads(
                client,
                "GET one random table",
                args.samples,
                warmup,
                lambda: (table_url(client, rng.choice(names)), None),
                lambda body: body.get("name") in known,
            )
        ]
        full_page = min(PAGE_SIZE, args.tables)
        reads.append(
            await sample_reads(
                client,
                f"list first page ({PAGE_SIZE})",
                args.samples,
                warmup,
                lambda: (table_url(client), {"pageSize": str(PAGE_SIZE)}),
                lambda body: len(body.get("tables", ())) == full_page,
            )
        )
        if tokens:
            reads.append(
                await sample_reads(
                    client,
                    f"list page ({PAGE_SIZE}) at random token",
                    args.samples,
                    warmup,
                    lambda: (
                        table_url(client),
                        {"pageSize": str(PAGE_SIZE), "pageToken": rng.choice(tokens)},
                    ),
                    lambda body: 0 < len(body.get("tables", ())) <= PAGE_SIZE,
                )
            )
    return {
        "tables": args.tables,
        "load_commits": len(commit_latencies),
        "load_seconds": load_seconds,
        "commit_latency": Latency.of(commit_latencies),
        "walk_pages": len(tokens) + 1,
        "walk_seconds": walk_seconds,
        "reads": reads,
        "head_seq": head_seq,
        "errors": failures.count - errors_before,
    }


def dir_size(path: Path) -> tuple[int, int]:
    """(bytes allocated on disk, file count) under ``path``."""
    total = files = 0
    for root, _, names in os.walk(path):
        for name in names:
            try:
                st = os.stat(os.path.join(root, name))
            except OSError:
                continue
            total += st.st_blocks * 512
            files += 1
    return total, files


def inspect_index(data_dir: Path) -> dict[str, Any]:
    """Shape of the catalog's HEAD index, read offline from the stopped node's RocksDB.

    Uses engine internals (best effort): a change there degrades this to an error note.
    """
    try:
        from metastore.cache import ObjectCache
        from metastore.codec import default_codec
        from metastore.persistence.rocksdb import RocksDBPersistence
        from metastore.service import catalog_ref
        from metastore.store import CatalogObjects

        persistence = RocksDBPersistence(data_dir / "rocksdb", sync=False)
        try:
            ref = persistence.get_ref(catalog_ref(TENANT, HOT_CATALOG))
            if ref is None:
                return {"error": "no catalog ref"}
            objects = CatalogObjects(
                persistence, default_codec(), ObjectCache(), TENANT, HOT_CATALOG
            )
            head = objects.commit(ref.head)
            stripe_entries = [len(objects.stripe(s.id)) for s in head.stripes]
            types = Counter(o.key.type for o in persistence.scan_objects(TENANT, HOT_CATALOG))
        finally:
            persistence.close()
    except Exception as exc:  # best effort: internals may move
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {
        "head_seq": head.seq,
        "embedded_entries": len(head.index),
        "stripes": len(stripe_entries),
        "stripe_entries_min": min(stripe_entries, default=0),
        "stripe_entries_max": max(stripe_entries, default=0),
        "stripe_entries_mean": (
            sum(stripe_entries) / len(stripe_entries) if stripe_entries else 0.0
        ),
        "objects_by_type": dict(sorted(types.items())),
    }


# --- reporting -----------------------------------------------------------------------


def summary(
    throughput: Sequence[ThroughputResult], big: BigNamespaceResult | None, nproc: int
) -> str:
    parts = [
        f"Embedded node, one machine with {nproc} cores shared by the node (child process) "
        "and the load generator (this process)."
    ]
    if throughput:
        rows = [
            [
                r.scenario,
                "on" if r.fsync else "off",
                str(r.concurrency),
                str(r.commits),
                f"{r.commits_per_s:.0f}",
                ms(r.latency.p50),
                ms(r.latency.p99),
                ms(r.latency.p999),
                "-" if r.commits_per_write is None else f"{r.commits_per_write:.1f}",
                pct(r.node_cpu),
                pct(r.client_cpu),
                str(r.errors),
            ]
            for r in throughput
        ]
        headers = [
            "scenario", "fsync", "conc", "commits", "commits/s",
            "p50 ms", "p99 ms", "p99.9 ms", "commits/write", "node cpu", "bench cpu", "errors",
        ]  # fmt: skip
        parts += [
            "",
            "Write throughput (each commit creates one table; commits/write = server's "
            "commits / durable writes; cpu 100% = one core)",
            table(headers, rows),
        ]
    if big is not None:
        load = [
            ["tables", f"{big.tables}"],
            ["load", f"{big.load_commits} commits x {COMMIT_BATCH} creates"],
            ["load time", f"{big.load_seconds:.1f} s"],
            ["load rate", f"{big.tables_per_s:.0f} tables/s"],
            ["commit p50 / p99", f"{ms(big.commit_latency.p50)} / {ms(big.commit_latency.p99)} ms"],
            ["listing walk", f"{big.walk_pages} pages in {big.walk_seconds:.1f} s"],
            ["catalog commits (HEAD seq)", f"{big.head_seq}"],
        ]
        idx = big.index
        if "error" in idx:
            load.append(["index shape", f"unavailable ({idx['error']})"])
        else:
            load.append(
                [
                    "HEAD index",
                    f"{idx['embedded_entries']} embedded entries, {idx['stripes']} stripes "
                    f"({idx['stripe_entries_min']}-{idx['stripe_entries_max']} keys, "
                    f"mean {idx['stripe_entries_mean']:.0f})",
                ]
            )
            objs = ", ".join(f"{k} {v}" for k, v in idx["objects_by_type"].items())
            load.append(["objects", objs])
        load.append(
            [
                "data dir on disk",
                f"{big.data_dir_bytes / 2**20:.1f} MiB in {big.data_dir_files} files "
                "(after graceful stop)",
            ]
        )
        load.append(["errors", str(big.errors)])
        parts += [
            "",
            f"{big.tables} tables in one namespace",
            pairs(load),
        ]
        rows = [
            [
                r.operation,
                str(r.latency.n),
                ms(r.latency.p50),
                ms(r.latency.p99),
                ms(r.latency.mean),
            ]
            for r in big.reads
        ]
        parts += [
            "",
            "Reads (sequential, one client, after warm-up)",
            table(["operation", "samples", "p50 ms", "p99 ms", "mean ms"], rows),
        ]
    return "\n".join(parts)


# --- main ----------------------------------------------------------------------------


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
    command = shlex.join([Path(sys.executable).name, "-m", "bench.embedded", *sys.argv[1:]])
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
    big: BigNamespaceResult | None = None
    nodes_ok = True
    with tempfile.TemporaryDirectory(prefix="metastore-bench-") as tmp:
        if not args.skip_throughput:
            for fsync in (True, False):
                flag = "--fsync" if fsync else "--no-fsync"
                data_dir = Path(tmp) / f"node-{flag.lstrip('-')}" / "data"
                data_dir.parent.mkdir(parents=True)
                print(f"== throughput, node started with {flag} ==", flush=True)
                node = NodeProcess(data_dir, extra_args=(flag,)).start()
                try:
                    assert node.proc is not None
                    pid = node.proc.pid
                    throughput += asyncio.run(throughput_node(node.url, pid, fsync, args, failures))
                finally:
                    nodes_ok &= check_stop(node)
        if not args.skip_big:
            data_dir = Path(tmp) / "node-big" / "data"
            data_dir.parent.mkdir(parents=True)
            print(f"\n== {args.tables} tables in one namespace (node with --fsync) ==", flush=True)
            node = NodeProcess(data_dir, extra_args=("--fsync",)).start()
            try:
                raw = asyncio.run(big_namespace(node.url, args, failures))
            finally:
                nodes_ok &= check_stop(node)
            size, files = dir_size(data_dir)
            big = BigNamespaceResult(
                tables=raw["tables"],
                load_commits=raw["load_commits"],
                load_seconds=raw["load_seconds"],
                tables_per_s=raw["tables"] / raw["load_seconds"],
                commit_latency=raw["commit_latency"],
                walk_pages=raw["walk_pages"],
                walk_seconds=raw["walk_seconds"],
                reads=raw["reads"],
                head_seq=raw["head_seq"],
                catalog_commits=raw["head_seq"],
                index=inspect_index(data_dir),
                data_dir_bytes=size,
                data_dir_files=files,
                errors=raw["errors"],
            )

    text = summary(throughput, big, info["nproc"])
    ok = print_outcome(text, failures, nodes_ok, "request failures")
    report = {
        "command": command,
        "machine": info,
        "settings": {
            k: v for k, v in vars(args).items() if k not in ("skip_throughput", "skip_big")
        },
        "throughput": [asdict(r) for r in throughput],
        "big_namespace": None if big is None else asdict(big),
        "failures": asdict(failures),
        "ok": ok,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    save_report(OUT_PATH, REPO_ROOT, report)
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
