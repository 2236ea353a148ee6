"""A big namespace on one embedded node: load it, walk it, time single reads.

``tables`` tables in one namespace, created with the atomic commit endpoint
(``COMMIT_BATCH`` creates per commit, in shuffled order so each commit lands keys all
over the key space), then one walk through the whole listing and sequential
single-client latency of GET one table and of listing a page of ``PAGE_SIZE``. After
the node stopped, its data directory's size and the shape of the catalog's HEAD index
(read offline from its RocksDB).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.load import Client, Failures, Latency, Progress, new_session
from bench.report import ms, pairs, table
from harness.node import NodeProcess, stop_checked

TENANT = "default"
HOT_CATALOG = "default"  # created by the node at bootstrap
BIG_NAMESPACE = "big"
COMMIT_BATCH = 1000  # creates per atomic commit (the server's default max_changes_per_commit)
PAGE_SIZE = 100


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


async def load_and_read(url: str, args: argparse.Namespace, failures: Failures) -> dict[str, Any]:
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
        from metastore.catalog.service import catalog_ref
        from metastore.engine.object_cache import ObjectCache
        from metastore.engine.objects import CatalogObjects
        from metastore.model.codec import default_codec
        from metastore.persistence.rocksdb import RocksDBPersistence

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


def measure(
    tmp: Path, args: argparse.Namespace, failures: Failures
) -> tuple[BigNamespaceResult, bool]:
    """The scenario on a fresh node started with ``--fsync``; the result and whether the
    node then stopped cleanly."""
    data_dir = tmp / "node-big" / "data"
    data_dir.parent.mkdir(parents=True)
    print(f"\n== {args.tables} tables in one namespace (node with --fsync) ==", flush=True)
    node = NodeProcess(data_dir, extra_args=("--fsync",)).start()
    try:
        raw = asyncio.run(load_and_read(node.url, args, failures))
    finally:
        stopped = stop_checked(node)
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
    return big, stopped


def section(big: BigNamespaceResult | None) -> list[str]:
    """The summary's lines for the result (none without one)."""
    if big is None:
        return []
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
    lines = ["", f"{big.tables} tables in one namespace", pairs(load)]
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
    lines += [
        "",
        "Reads (sequential, one client, after warm-up)",
        table(["operation", "samples", "p50 ms", "p99 ms", "mean ms"], rows),
    ]
    return lines
