"""One PyIceberg workload, single client and sequential, against any ``Catalog``.

Measured, after ``warm_up`` (not measured):

1. create_table/s (``tables`` tables);
2. the catalog commit step: ``catalog.commit_table`` of one set-properties update;
3. load_table/s of a table with a few snapshots;
4. list_tables latency for a namespace of ``LIST_TABLES`` tables;
5. commit latency when the table has 1, 100 and 1,000 snapshots: one metadata-only
   append (add-snapshot + set main) guarded by ``assert-ref-snapshot-id``; the
   history is built with the same commits, ``HISTORY_BATCH`` snapshots per commit.

For this service's node, create_table and the commit step also show where their
time goes on the node, from its own ``/metrics`` (``NodeTimes``): the mean time of
the HTTP request, of the commit in it (queued in its lane until its outcome), of
the durable write (the WAL fsync) and of the garbage collector's pauses per
operation. The rest of a client's latency is the client itself and the loopback
round trip.

Each phase runs on every backend before the next phase starts (``interleave``), so a
ratio compares figures taken seconds apart, not minutes. The timed phases (1-4) go
further: each is cut into ``args.rounds`` rounds, and the backends take turns round by
round, so a hiccup of the machine lasting a fraction of a second (a list of 200 tables
takes 2 ms: one backend's 50 lists once fit in 0.1 s) falls on every backend's samples
alike instead of on one backend's whole phase. A figure is over all of a phase's rounds.
Results are one flat dict per backend (the keys of ``ROWS``), as the JSON file keeps them.
"""

from __future__ import annotations

import argparse
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, ExitStack
from functools import partial
from itertools import pairwise
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertRefSnapshotId,
    SetPropertiesUpdate,
    SetSnapshotRefUpdate,
)
from pyiceberg.types import LongType, NestedField, StringType

from bench.load import Latency, Progress, children_cpu
from bench.report import by_column, ms, table
from bench.summary import Figure, Row, at_least, at_most

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "name", StringType(), required=False),
)
LIST_TABLES = 200
HISTORY_POINTS = (1, 100, 1000)
HISTORY_BATCH = 100

# what ``NodeTimes`` reads: each histogram's sum and count over all its label sets
NODE_HISTOGRAMS = {
    "request": "metastore_http_request_duration_seconds",
    "commit": "metastore_commit_duration_seconds",
    "durable write": "metastore_durable_write_duration_seconds",
    "collector": "metastore_gc_pause_seconds",  # every generation's pauses
}
NODE_PARTS = tuple(NODE_HISTOGRAMS)

# (label, result key, format) of each summary row
ROWS = [
    ("create_table/s", "create_table_per_s", "{:.0f}"),
    ("create_table mean ms", "create_table_mean_ms", "{:.2f}"),
    ("commit step p50 ms", "commit_step_p50_ms", "{:.2f}"),
    ("commit step mean ms", "commit_step_mean_ms", "{:.2f}"),
    ("commit step p99 ms", "commit_step_p99_ms", "{:.2f}"),
    ("create_table client CPU ms", "create_table_client_cpu_ms", "{:.2f}"),
    ("create_table server CPU ms", "create_table_server_cpu_ms", "{:.2f}"),
    ("commit step client CPU ms", "commit_step_client_cpu_ms", "{:.2f}"),
    ("commit step server CPU ms", "commit_step_server_cpu_ms", "{:.2f}"),
    *[
        (f"{op} node {part} ms", f"{key}_node_{part.replace(' ', '_')}_ms", "{:.2f}")
        for op, key in (("create_table", "create_table"), ("commit step", "commit_step"))
        for part in NODE_PARTS
    ],
    ("load_table/s", "load_table_per_s", "{:.0f}"),
    ("list_tables (200) p50 ms", "list_200_tables_p50_ms", "{:.2f}"),
    *[
        (f"commit at {n} snapshots p50 ms", f"commit_at_{n}_snapshots_p50_ms", "{:.2f}")
        for n in HISTORY_POINTS
    ],
]


class Cpu:
    """CPU per operation over ``with`` blocks of ``count`` operations in all, in ms: this
    process's (the client, or all of an in-process catalog) and its running child
    processes' (the node of the ``metastore`` backend; none for ``SqlCatalog``). A phase
    measured in rounds enters it once per round; the rounds add up."""

    def __init__(self, count: int) -> None:
        self._count = count
        self.ms = (0.0, 0.0)
        self._used = (0.0, 0.0)
        self._started = (0.0, 0.0)

    def __enter__(self) -> Cpu:
        self._started = (time.process_time(), children_cpu())
        return self

    def __exit__(self, *_: object) -> None:
        client, server = time.process_time(), children_cpu()
        self._used = (
            self._used[0] + client - self._started[0],
            self._used[1] + server - self._started[1],
        )
        per = 1000 / max(self._count, 1)
        self.ms = (self._used[0] * per, self._used[1] * per)


def histogram_totals(text: str) -> dict[str, tuple[float, float]]:
    """``(sum, count)`` of each of ``NODE_HISTOGRAMS`` in a Prometheus text exposition,
    added over every label set."""
    totals = {part: [0.0, 0.0] for part in NODE_HISTOGRAMS}
    by_name = {name: part for part, name in NODE_HISTOGRAMS.items()}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        series, _, value = line.rpartition(" ")
        name = series.split("{", 1)[0]
        for suffix, slot in (("_sum", 0), ("_count", 1)):
            part = by_name.get(name.removesuffix(suffix)) if name.endswith(suffix) else None
            if part is not None:
                totals[part][slot] += float(value)
    return {part: (total[0], total[1]) for part, total in totals.items()}


class NodeTimes:
    """Mean node time per operation over ``with`` blocks of ``count`` operations in all,
    in ms, from the node's ``/metrics`` read before and after each block: its HTTP
    requests, the commits in them, their durable writes and the collector's pauses
    meanwhile. An operation that makes no commit (or shares a durable write) shows less
    than one of each; the means are per operation. Like ``Cpu``, the blocks of a phase
    measured in rounds add up."""

    def __init__(self, url: str, count: int) -> None:
        self._url = url.rstrip("/") + "/metrics"
        self._count = count
        self._before: dict[str, tuple[float, float]] = {}
        self._seconds: dict[str, float] = {}
        self.ms: dict[str, float] = {}

    def _read(self) -> dict[str, tuple[float, float]]:
        with urllib.request.urlopen(self._url, timeout=30) as response:
            return histogram_totals(response.read().decode())

    def __enter__(self) -> NodeTimes:
        self._before = self._read()
        return self

    def __exit__(self, *_: object) -> None:
        after = self._read()
        for part, (total, _observed) in after.items():
            spent = total - self._before[part][0]
            self._seconds[part] = self._seconds.get(part, 0.0) + spent
        per = 1000 / max(self._count, 1)
        self.ms = {part: spent * per for part, spent in self._seconds.items()}

    def into(self, out: dict[str, float], key: str) -> None:
        for part, value in self.ms.items():
            out[f"{key}_node_{part.replace(' ', '_')}_ms"] = value


class _NoTimes:
    """``NodeTimes`` for a catalog with no node (``SqlCatalog``): records nothing."""

    def __enter__(self) -> _NoTimes:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def into(self, out: dict[str, float], key: str) -> None:
        return None


def node_times(catalog: Catalog, count: int) -> NodeTimes | _NoTimes:
    """The node's times when ``catalog`` is this service over REST; else nothing."""
    if isinstance(catalog, RestCatalog):
        return NodeTimes(catalog.properties["uri"], count)
    return _NoTimes()


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def repeat(label: str, times: int | range, fn: Callable[[int], Any]) -> list[float]:
    """Seconds of each call ``fn(i)``, for ``i`` in ``times`` (a count: ``range(times)``),
    with progress lines."""
    indexes = range(times) if isinstance(times, int) else times
    seconds: list[float] = []
    with Progress(label, total=len(indexes)) as progress:
        for i in indexes:
            seconds.append(timed(partial(fn, i)))
            progress.done += 1
    return seconds


def in_rounds(count: int, rounds: int) -> list[range]:
    """``range(count)`` cut into ``rounds`` consecutive pieces as even as can be (fewer
    when ``count`` is smaller): one per round of a phase."""
    rounds = max(1, min(rounds, count))
    cuts = [count * k // rounds for k in range(rounds + 1)]
    return [range(start, end) for start, end in pairwise(cuts)]


def in_turns(
    label: str,
    count: int,
    rounds: int,
    fn: Callable[[int], Any],
    times: list[float],
    *measures: AbstractContextManager[Any],
) -> Iterator[str]:
    """``count`` calls ``fn(i)`` in ``rounds`` rounds (``in_rounds``), each call's seconds
    added to ``times`` and each round run inside every one of ``measures`` (``Cpu``,
    ``NodeTimes``: they add up over the rounds); yields ``label`` after each round, so
    that ``interleave`` gives the other backends their turn in between."""
    pieces = in_rounds(count, rounds)
    for k, piece in enumerate(pieces):
        with ExitStack() as stack:
            for measure in measures:
                stack.enter_context(measure)
            times += repeat(
                label if len(pieces) == 1 else f"{label} {k + 1}/{len(pieces)}", piece, fn
            )
        yield label


def add_snapshots(catalog: Catalog, table: Table, count: int) -> Table:
    """``count`` metadata-only appends in one commit (snapshots over fake manifest lists)."""
    metadata = table.metadata
    parent = metadata.current_snapshot_id
    sequence = int(getattr(metadata, "last_sequence_number", 0))  # format v1 has none
    updates: list[Any] = []
    now = int(time.time() * 1000)
    for _ in range(count):
        sequence += 1
        snapshot_id = metadata.new_snapshot_id()
        snapshot = Snapshot.model_validate(
            {
                "snapshot-id": snapshot_id,
                "parent-snapshot-id": parent,
                "sequence-number": sequence,
                "timestamp-ms": now,
                "manifest-list": f"{table.location()}/metadata/snap-{snapshot_id}.avro",
                "summary": Summary(Operation.APPEND),
                "schema-id": metadata.current_schema_id,
            }
        )
        updates.append(AddSnapshotUpdate(snapshot=snapshot))
        parent = snapshot_id
    assert parent is not None
    updates.append(
        SetSnapshotRefUpdate.model_validate(
            {"ref-name": "main", "type": SnapshotRefType.BRANCH, "snapshot-id": parent}
        )
    )
    requirement = AssertRefSnapshotId.model_validate(
        {"ref": "main", "snapshot-id": metadata.current_snapshot_id}
    )
    catalog.commit_table(table, (requirement,), tuple(updates))
    return catalog.load_table(table.name())


def phases(
    name: str, catalog: Catalog, args: argparse.Namespace, out: dict[str, float]
) -> Iterator[str]:
    """The workload on ``catalog``, its figures put in ``out``; yields the name of each
    phase once it is measured (a timed phase: once per round), so that ``interleave``
    can run each phase (round) on every backend before the next one (this machine's
    speed drifts over minutes, and hiccups for fractions of a second)."""
    catalog.create_namespace(("bench",))
    catalog.create_namespace(("listing",))
    rest = isinstance(catalog, RestCatalog)
    warm_up(name, catalog, args.warmup)

    def cpu_into(cpu: Cpu, key: str) -> None:
        out[f"{key}_client_cpu_ms"] = cpu.ms[0]
        if rest:  # the node is this process's child; SqlCatalog's work is all the client's
            out[f"{key}_server_cpu_ms"] = cpu.ms[1]

    cpu, node = Cpu(args.tables), node_times(catalog, args.tables)
    times: list[float] = []
    yield from in_turns(
        f"{name}: create_table",
        args.tables,
        args.rounds,
        lambda i: catalog.create_table(("bench", f"t{i}"), SCHEMA),
        times,
        cpu,
        node,
    )
    out["create_table_per_s"] = len(times) / sum(times)
    out["create_table_mean_ms"] = sum(times) / len(times) * 1000
    node.into(out, "create_table")
    cpu_into(cpu, "create_table")

    table = catalog.load_table(("bench", "t0"))

    def set_property(i: int) -> None:
        catalog.commit_table(table, (), (SetPropertiesUpdate(updates={"round": str(i)}),))

    cpu, node = Cpu(args.commits), node_times(catalog, args.commits)
    times = []
    yield from in_turns(
        f"{name}: commit step", args.commits, args.rounds, set_property, times, cpu, node
    )
    latency = Latency.of(times)
    node.into(out, "commit_step")
    cpu_into(cpu, "commit_step")
    out["commit_step_p50_ms"] = latency.p50
    out["commit_step_mean_ms"] = latency.mean
    out["commit_step_p99_ms"] = latency.p99

    add_snapshots(catalog, catalog.load_table(("bench", "t1")), 5)
    times = []
    yield from in_turns(
        f"{name}: load_table",
        args.loads,
        args.rounds,
        lambda _: catalog.load_table(("bench", "t1")),
        times,
    )
    out["load_table_per_s"] = len(times) / sum(times)

    repeat(
        f"{name}: tables for listing",
        LIST_TABLES,
        lambda i: catalog.create_table(("listing", f"l{i:03d}"), SCHEMA),
    )
    yield "tables for listing"
    times = []
    yield from in_turns(
        f"{name}: list_tables",
        args.lists,
        args.rounds,
        lambda _: catalog.list_tables(("listing",)),
        times,
    )
    assert len(catalog.list_tables(("listing",))) == LIST_TABLES
    out["list_200_tables_p50_ms"] = Latency.of(times).p50

    table = catalog.load_table(("bench", "t2"))
    have = 0
    for point in HISTORY_POINTS:
        if point > args.max_snapshots:
            continue
        while have < point:
            step = min(HISTORY_BATCH, point - have)
            table = add_snapshots(catalog, table, step)
            have += step
        times = []
        for _ in range(args.history_commits):
            start = time.perf_counter()
            table = add_snapshots(catalog, table, 1)
            times.append(time.perf_counter() - start)
            have += 1
        p50 = Latency.of(times).p50
        out[f"commit_at_{point}_snapshots_p50_ms"] = p50
        print(f"    {name}: commit at ~{point} snapshots: p50 {ms(p50)} ms", flush=True)
        yield f"commit at {point} snapshots"


def warm_up(name: str, catalog: Catalog, count: int) -> None:
    """``count`` creates, commit steps and loads, not measured: each client's first calls
    pay for imports, connections and compiled statements (a REST client's first creates
    cost several times its later ones in CPU), which are not the catalog's speed."""
    catalog.create_namespace(("warmup",))
    repeat(f"{name}: warm-up", count, lambda i: catalog.create_table(("warmup", f"w{i}"), SCHEMA))
    table = catalog.load_table(("warmup", "w0"))
    for i in range(count):
        catalog.commit_table(table, (), (SetPropertiesUpdate(updates={"round": str(i)}),))
        table = catalog.load_table(("warmup", "w0"))


def interleave(
    catalogs: Mapping[str, Catalog], args: argparse.Namespace
) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
    """The workload on every catalog, one phase at a time on each in turn: the figures
    of each backend that finished, and why each other one failed (the rest go on)."""
    results: dict[str, dict[str, float]] = {name: {} for name in catalogs}
    running = {name: phases(name, c, args, results[name]) for name, c in catalogs.items()}
    failed: dict[str, str] = {}
    while running:
        for name, steps in list(running.items()):
            try:
                next(steps)
            except StopIteration:
                del running[name]
            except Exception as exc:  # report it; the other backends go on
                del running[name], results[name]
                failed[name] = f"{type(exc).__name__}: {exc}"
                print(f"  {name} FAILED: {failed[name]}", flush=True)
    return results, failed


def section(results: Mapping[str, Mapping[str, float]]) -> list[str]:
    """The summary's table: one row per measure, one column per backend."""
    names = list(results)
    rows = by_column(results, ROWS)
    return [table(["measure", *names], rows)]


# (label, result key, unit) of the summary's rows: the figures compared with SqlCatalog
SUMMARY = [
    ("create_table/s", "create_table_per_s", "/s"),
    ("commit step p50", "commit_step_p50_ms", "ms"),
    ("commit step p99", "commit_step_p99_ms", "ms"),
    ("load_table/s", "load_table_per_s", "/s"),
    ("list_tables (200) p50", "list_200_tables_p50_ms", "ms"),
    ("commit at 1000 snapshots p50", "commit_at_1000_snapshots_p50_ms", "ms"),
]
OURS = "metastore"
PINNED = "metastore-pinned"  # the same node, its interpreter threads on one CPU
TARGET_BASE = "sql-sqlite"  # the target: every figure at least equal to this one's
P99_PER_P50 = 3.0  # the target: commit p99 at most this many times its own p50


def summary_rows(results: Mapping[str, Mapping[str, float]]) -> list[Row]:
    """The summary's rows: each figure of this service against each ``SqlCatalog`` (the
    target against SQLite; a rate at least equal, a latency at most equal), and the
    commit step's p99 against its own p50; the same again for the pinned node, if it
    ran, under the same targets."""
    rows: list[Row] = []
    for name in (OURS, PINNED):
        ours = results.get(name)
        if ours is None:
            continue
        shown = "" if name == OURS else " (pinned)"
        for base in (n for n in results if n not in (OURS, PINNED)):
            for label, key, unit in SUMMARY:
                if key not in ours or key not in results[base]:
                    continue
                target = None
                if base == TARGET_BASE:
                    target = at_least(1.0) if unit.startswith("/") else at_most(1.0)
                rows.append(
                    Row(
                        "iceberg",
                        f"{label}{shown} vs {base}",
                        Figure(name, ours[key], unit),
                        Figure(base, results[base][key], unit),
                        target,
                    )
                )
        if "commit_step_p99_ms" in ours:
            rows.append(
                Row(
                    "iceberg",
                    f"commit step p99{shown} / own p50",
                    Figure(f"{name} p99", ours["commit_step_p99_ms"], "ms"),
                    Figure("p50", ours["commit_step_p50_ms"], "ms"),
                    at_most(P99_PER_P50),
                )
            )
    return rows
