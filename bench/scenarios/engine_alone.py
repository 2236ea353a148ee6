"""The node's commit engine alone: the embedded write load without HTTP.

The engine is the node's own, built as a node builds it: ``create_app`` and its
startup (persistence, commit threads, node-id lease, engine, bootstrap), with no
listening socket, and the collector and the switch interval set as a serving node
sets them (``heap``, ``server``). ``concurrency`` coroutines in this process then make
the commits the native create route makes (``Metastore.change`` with one
``CreateEntity``, as the anonymous caller), in the same closed loop and with the same
names as ``embedded_writes``: first in the hot catalog, then round-robin over
``catalogs``.

Set beside the node's figures this splits a commit's CPU in two: the engine's
(building the commit, its index and encodings, the RocksDB write; the lanes'
hand-offs) and the rest, the HTTP front end (aiohttp, the middlewares, validation,
the handler, the answer). It measures what a node with several front-end processes
before one writer could reach at most: one writer core commits at this rate.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from aiohttp import web

from bench.load import Failures, Progress, closed_loop
from bench.report import ms, pct, ratio, table
from bench.scenarios.embedded_writes import (
    COUNTERS,
    HOT_CATALOG,
    NAMESPACE,
    Measured,
    ThroughputResult,
)
from bench.summary import Figure, Row
from harness.process import cpu_seconds
from metastore.config.server_config import ServerConfig
from metastore.errors import MetastoreError
from metastore.http.typedefs import METASTORE, METRICS, STATS
from metastore.model.changes import CreateEntity
from metastore.model.keys import EntityKey, Kind
from metastore.node import heap
from metastore.node.app import create_app
from metastore.node.server import SWITCH_INTERVAL_S
from metastore.security.principal import ANONYMOUS_PRINCIPAL

SCENARIO = "engine alone"
TENANT = "default"  # the node's bootstrap tenant and catalog (ServerConfig's defaults)
OPERATION = "create table"  # as the native create route names it
PRINCIPAL = ANONYMOUS_PRINCIPAL.id  # the caller of a node with authentication off


def _counter(app: web.Application, name: str) -> float:
    value = app[STATS]().get(name)
    return float(value[2]) if value is not None else 0.0


async def run_commits(
    app: web.Application, fsync: bool, args: argparse.Namespace, failures: Failures
) -> list[ThroughputResult]:
    """Both loads on the started ``app``'s engine."""
    metastore = app[METASTORE]
    many = [f"c{i:03d}" for i in range(args.catalogs)]
    for name in many:
        await metastore.create_catalog(TENANT, name, {}, PRINCIPAL)
    namespace = EntityKey.namespace_key((NAMESPACE,))
    for name in (HOT_CATALOG, *many):
        await metastore.change(TENANT, name, [CreateEntity(namespace)], PRINCIPAL, "create")
    loads = (("hot catalog", [HOT_CATALOG]), (f"{args.catalogs} catalogs", many))
    return [await _load(app, name, catalogs, fsync, args, failures) for name, catalogs in loads]


async def _load(
    app: web.Application,
    name: str,
    catalogs: Sequence[str],
    fsync: bool,
    args: argparse.Namespace,
    failures: Failures,
) -> ThroughputResult:
    """One load: a warm-up, then ``args.seconds`` measured, read against the engine's
    own counters."""
    metastore = app[METASTORE]
    scenario = f"{SCENARIO}: {name}"
    round_robin = itertools.count()
    errors_before = failures.count

    async def send(w: int, i: int) -> float | None:
        catalog = catalogs[next(round_robin) % len(catalogs)]
        key = EntityKey(Kind.TABLE, (NAMESPACE,), f"t{w}_{i}")
        started = time.perf_counter()
        try:
            await metastore.change(TENANT, catalog, [CreateEntity(key)], PRINCIPAL, OPERATION)
        except MetastoreError as exc:  # every name is unique: any refusal is a bug
            failures.add(f"{scenario}: {catalog} {key.name}: {exc}")
            return None
        return time.perf_counter() - started

    next_index = [0] * args.concurrency
    await closed_loop(send, args.concurrency, args.warmup, next_index, None)
    before = {c: _counter(app, c) for c in COUNTERS}
    collector_before = _collector_seconds(app)
    cpu_before = cpu_seconds()
    with Progress(f"{scenario} / {'fsync' if fsync else 'no-fsync'}") as progress:
        latencies, elapsed = await closed_loop(
            send, args.concurrency, args.seconds, next_index, progress
        )
    cpu = (cpu_seconds() - cpu_before) / elapsed  # the engine and its callers share it
    grown = {c: _counter(app, c) - before[c] for c in COUNTERS}
    collector = _collector_seconds(app) - collector_before
    measured = Measured(scenario, fsync, len(catalogs), latencies, elapsed, grown, collector)
    return measured.result(args, failures, "engine", cpu, 0.0, errors_before)


def _collector_seconds(app: web.Application) -> float:
    """The collector's pauses in this process so far (the engine's and its callers')."""
    return sum(seconds for _, seconds in app[METRICS].collector_pauses.totals())


async def _measure(
    data_dir: Path, fsync: bool, args: argparse.Namespace, failures: Failures
) -> list[ThroughputResult]:
    app = create_app(ServerConfig.load({"data_dir": data_dir, "fsync": fsync}, env={}))
    runner = web.AppRunner(app, handle_signals=False)
    try:
        await runner.setup()  # the node's startup, without a site: nothing listens
    except BaseException:
        await runner.cleanup()  # what the startup opened before it failed
        raise
    # the collector and the switch interval, set as a serving node sets them
    heap.settle_after_startup()
    heap.freeze_survivors()
    switch = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        return await run_commits(app, fsync, args, failures)
    finally:
        sys.setswitchinterval(switch)  # this process goes on to drive other loads
        heap.stop_freezing_survivors()
        gc.unfreeze()
        await runner.cleanup()


def measure(
    tmp: Path, fsync: bool, args: argparse.Namespace, failures: Failures
) -> list[ThroughputResult]:
    """Both loads on a fresh engine with fsync on or off, in this process."""
    data_dir = tmp / f"engine-{'fsync' if fsync else 'no-fsync'}" / "data"
    data_dir.parent.mkdir(parents=True)
    print(f"== commit engine alone (no HTTP), fsync {'on' if fsync else 'off'} ==", flush=True)
    return asyncio.run(_measure(data_dir, fsync, args, failures))


def _cpu_ms(r: ThroughputResult) -> float:
    return r.node_cpu / r.commits_per_s * 1000 if r.commits_per_s else float("nan")


def _node_of(
    engine: ThroughputResult, nodes: Sequence[ThroughputResult]
) -> ThroughputResult | None:
    """The node's result for the same load as ``engine``'s."""
    for r in nodes:
        if r.fsync == engine.fsync and engine.scenario == f"{SCENARIO}: {r.scenario}":
            return r
    return None


def section(
    engines: Sequence[ThroughputResult],
    nodes: Sequence[ThroughputResult],
    ceiling: ThroughputResult | None,
) -> list[str]:
    """The summary's lines: each load through the engine alone, beside the node."""
    if not engines:
        return []
    rows = []
    for r in engines:
        node = _node_of(r, nodes)
        front = _cpu_ms(node) - _cpu_ms(r) if node is not None else float("nan")
        rows.append(
            [
                r.scenario,
                "on" if r.fsync else "off",
                f"{r.commits_per_s:.0f}",
                ratio(r.commits_per_s, ceiling.commits_per_s) if ceiling else "-",
                ms(r.latency.p50),
                ms(r.latency.p99),
                "-" if r.commits_per_write is None else f"{r.commits_per_write:.1f}",
                pct(r.node_cpu),
                "-" if r.collector_share is None else pct(r.collector_share),
                ms(_cpu_ms(r)),
                "-" if node is None else ms(_cpu_ms(node)),
                ms(front),
                str(r.errors),
            ]
        )
    headers = [
        "load", "fsync", "commits/s", "of ceiling", "p50 ms", "p99 ms", "commits/write",
        "cpu", "of it gc", "engine cpu ms", "node cpu ms", "front end ms", "errors",
    ]  # fmt: skip
    return [
        "",
        "The commit engine alone (the node's engine in this process, no HTTP; the same "
        "commits and clients): the most one writer core commits; front end = the node's "
        "CPU per answer minus the engine's per commit; of it gc = the garbage collector's "
        "pauses over this process's CPU time",
        table(headers, rows),
    ]


def summary_rows(
    engines: Sequence[ThroughputResult],
    nodes: Sequence[ThroughputResult],
    ceiling: ThroughputResult | None,
) -> list[Row]:
    """Each load's rate through the engine alone against the ceiling (what one writer
    behind front ends of their own could reach) and its CPU per commit against the
    node's per answer (the engine's share of a commit)."""
    rows: list[Row] = []
    for r in engines:
        mode = "fsync" if r.fsync else "no fsync"
        load = r.scenario.removeprefix(f"{SCENARIO}: ")
        if ceiling is not None:
            rows.append(
                Row(
                    "embedded",
                    f"{load} ({mode}) engine alone commits/s vs ceiling",
                    Figure("engine", r.commits_per_s, "/s"),
                    Figure("bare aiohttp", ceiling.commits_per_s, "/s"),
                )
            )
        node = _node_of(r, nodes)
        if node is not None:
            rows.append(
                Row(
                    "embedded",
                    f"{load} ({mode}) engine cpu per commit vs node's per answer",
                    Figure("engine", _cpu_ms(r), "ms"),
                    Figure("node", _cpu_ms(node), "ms"),
                )
            )
    return rows
