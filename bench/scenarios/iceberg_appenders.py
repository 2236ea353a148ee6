"""Concurrent appenders: ``CLIENTS`` PyIceberg clients appending to one table for a while.

Each client is a thread (or, with ``processes``, a process of its own) with its own
catalog client (as separate ingestion jobs would be) and its own ids; it appends one
small Arrow batch at a time until the time is up. The table sets
``commit.retry.num-retries=0``, so PyIceberg never retries on its own: a
``CommitFailedException`` is counted as a client retry and the client reloads the
table and tries again, up to ``RETRIES`` times (PyIceberg's
default), after which the append counts as a failure. At the end one scan checks
that every acknowledged append's rows are present exactly once and no failed one's,
and the snapshot chain is valid (every snapshot on the branch, each one's parent the
one before it, sequence numbers increasing).

By default (``fresh``) each append starts from the catalog's current table, as an
ingestion job that loads the table for each batch does: the client loads it, then
appends. On the REST catalog the client sets PyIceberg's ``snapshot-loading-mode=refs``
(``FRESH_REST_PROPERTIES``), so the load answers only the snapshots its branches
point at; ``SqlCatalog`` has no such mode and reads the whole metadata file. This is
what a client of a long-lived, often appended table wants: PyIceberg deep-copies the
table's metadata several times per append, which with every snapshot of the history
costs more than the rest of the append. Without ``fresh`` each client keeps its
table between appends (the metadata of the commit's answer, all snapshots).

Run against this service with ``metastore.commit.rebase-appends`` on and off (two
tables on the same node) and against PyIceberg's ``SqlCatalog``; and, for scale, one
client alone on this service (what one client can append per second here: 16
threads share one interpreter, so that is about their ceiling too).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.process
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Protocol

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table

from bench.report import by_column, table
from bench.scenarios.iceberg_workload import SCHEMA
from bench.summary import Figure, Row, at_least, at_most

CLIENTS = 16
RETRIES = 4  # PyIceberg's default commit.retry.num-retries
REBASE = "metastore.commit.rebase-appends"
NAMESPACE = ("appenders",)
FRESH_REST_PROPERTIES = {"snapshot-loading-mode": "refs"}  # a fresh REST client's setting
TARGET_PER_SQLITE = 10.0  # rebase on: at least this many times SqlCatalog/SQLite's appends/s

ROWS = [
    ("appends/s", "appends_per_s", "{:.1f}"),
    ("appends acknowledged", "appends", "{:.0f}"),
    ("client retries (409s)", "retries", "{:.0f}"),
    ("failed appends (gave up)", "failures", "{:.0f}"),
    ("other errors", "errors", "{:.0f}"),
    ("every row once (1 = yes)", "rows_ok", "{:.0f}"),
    ("snapshot chain valid (1 = yes)", "chain_ok", "{:.0f}"),
    ("client CPU ms / append", "client_cpu_ms", "{:.1f}"),
    ("server CPU ms / append", "server_cpu_ms", "{:.1f}"),
    # the appender threads' process: its CPU over the run's time. The threads share one
    # interpreter (Arrow's work aside), so near one core they, not the catalog, set the rate
    ("client process, cores busy", "client_cores", "{:.2f}"),
]


@dataclass
class _Tally:
    """One writer's outcome (sent back through a queue: a thread's or a process's)."""

    counts: Counter[str] = field(default_factory=Counter)
    committed: list[int] = field(default_factory=list)
    first_error: str | None = None

    def merge(self, other: _Tally) -> None:
        self.counts.update(other.counts)
        self.committed.extend(other.committed)
        self.first_error = self.first_error or other.first_error


class _Queue(Protocol):
    def put(self, item: Any) -> None: ...
    def get(self, block: bool = True, timeout: float | None = None) -> Any: ...


class _Barrier(Protocol):
    def wait(self, timeout: float | None = None) -> int: ...


def _batch(ids: list[int]) -> pa.Table:
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "name": pa.array([f"r{i}" for i in ids], pa.string())}
    )


def _writer(
    kind: type[Catalog],
    name: str,
    properties: dict[str, str],
    identifier: tuple[str, ...],
    index: int,
    seconds: float,
    fresh: bool,
    start: _Barrier,
    out: _Queue,
) -> None:
    """One appender: its own catalog client, its own ids, until ``seconds`` have passed
    since every appender was ready; with ``fresh`` it loads the table before each
    append."""
    tally = _Tally()
    try:
        client = kind(name, **properties)
        table = client.load_table(identifier)
        start.wait()
        deadline = time.monotonic() + seconds
        n = 0
        while time.monotonic() < deadline:
            ids = [index * 10_000_000 + n * 2, index * 10_000_000 + n * 2 + 1]
            n += 1
            for attempt in range(RETRIES + 1):
                try:
                    if fresh and attempt == 0:  # (a retry has just loaded it)
                        table = client.load_table(identifier)
                    table.append(_batch(ids))
                    tally.counts["appends"] += 1
                    tally.committed.extend(ids)
                    break
                except CommitFailedException:
                    tally.counts["retries" if attempt < RETRIES else "failures"] += 1
                    table = client.load_table(identifier)
    except Exception as exc:  # report, never hang the run
        tally.counts["errors"] += 1
        tally.first_error = f"{type(exc).__name__}: {exc}"[:300]
    out.put(tally)


def appenders(
    catalog: Catalog,
    name: str,
    properties: Mapping[str, str],
    seconds: float,
    clients: int = CLIENTS,
    processes: bool = False,
    fresh: bool = True,
    client_properties: Mapping[str, str] | None = None,
    server_cpu: Callable[[], float] | None = None,
) -> dict[str, float]:
    """``clients`` appenders (threads, or with ``processes`` processes) on a new table
    ``appenders.<name>`` for ``seconds``; each appender's catalog client has
    ``catalog``'s properties and ``client_properties``. ``server_cpu`` (CPU seconds
    used so far by the catalog's server) gives the server's CPU per append; the
    client's is this process's (threads only)."""
    if NAMESPACE not in catalog.list_namespaces():
        catalog.create_namespace(NAMESPACE)
    identifier = (*NAMESPACE, name)
    catalog.create_table(
        identifier, SCHEMA, properties={"commit.retry.num-retries": "0", **properties}
    )
    context = multiprocessing.get_context("spawn")
    start: _Barrier = context.Barrier(clients + 1) if processes else threading.Barrier(clients + 1)
    out: _Queue = context.Queue() if processes else queue.Queue()
    client = {**catalog.properties, **(client_properties or {})}
    spec = (type(catalog), catalog.name, client, identifier)
    workers: list[threading.Thread | multiprocessing.process.BaseProcess] = [
        (context.Process if processes else threading.Thread)(
            target=_writer, args=(*spec, i, seconds, fresh, start, out), daemon=True
        )
        for i in range(clients)
    ]
    for worker in workers:
        worker.start()
    start.wait(timeout=300)
    begin, cpu_begin = time.monotonic(), time.process_time()
    server_begin = server_cpu() if server_cpu is not None else 0.0
    tally = _Tally()
    for _ in workers:
        tally.merge(out.get(timeout=seconds + 600))
    elapsed = time.monotonic() - begin
    client_cpu = time.process_time() - cpu_begin
    server_used = server_cpu() - server_begin if server_cpu is not None else None
    for worker in workers:
        worker.join()
    final = catalog.load_table(identifier)
    scanned = final.scan().to_arrow()["id"].to_pylist()
    rows_ok = sorted(scanned) == sorted(tally.committed)
    counts = tally.counts
    chain_ok = chain_valid(final, counts["appends"])
    retries = counts["retries"] + counts["failures"]  # every 409 seen by a client
    appends = max(counts["appends"], 1)
    result = {
        "appends_per_s": counts["appends"] / elapsed,
        "appends": float(counts["appends"]),
        "retries": float(retries),
        "failures": float(counts["failures"]),
        "errors": float(counts["errors"]),
        "rows_ok": 1.0 if rows_ok else 0.0,
        "chain_ok": 1.0 if chain_ok else 0.0,
        "seconds": elapsed,
    }
    if not processes:
        result["client_cpu_ms"] = client_cpu * 1000 / appends
        result["client_cores"] = client_cpu / elapsed
    if server_used is not None:
        result["server_cpu_ms"] = server_used * 1000 / appends
    cpu = "".join(
        f", {who} CPU {result[key]:.1f} ms/append"
        for who, key in (("client", "client_cpu_ms"), ("server", "server_cpu_ms"))
        if key in result
    )
    print(
        f"    {name}: {result['appends_per_s']:.1f} appends/s, {retries} client retries, "
        f"{counts['failures']} failures, {counts['errors']} errors, rows once: {rows_ok}, "
        f"chain valid: {chain_ok}{cpu}"
        + (f" (first error: {tally.first_error})" if tally.first_error else ""),
        flush=True,
    )
    return result


def chain_valid(table: Table, appends: int) -> bool:
    """Every snapshot of ``table`` is on its current branch, one per acknowledged append
    (the table was created empty), each one's parent the snapshot before it, with a
    lower sequence number."""
    snapshots = {s.snapshot_id: s for s in table.metadata.snapshots}
    chain: list[int] = []  # sequence numbers, newest first
    snapshot = table.current_snapshot()
    while snapshot is not None and len(chain) <= len(snapshots):
        chain.append(snapshot.sequence_number or 0)
        parent = snapshot.parent_snapshot_id
        snapshot = snapshots.get(parent) if parent is not None else None
        if parent is not None and snapshot is None:
            return False  # a parent that is not in the table
    ordered = all(newer > older for newer, older in pairwise(chain))
    return ordered and len(chain) == len(snapshots) == appends


def section(results: Mapping[str, Mapping[str, float]]) -> list[str]:
    """The scenario's table (one column per run) and the ratio the target is about."""
    names = list(results)
    rows = by_column(results, ROWS)
    title = f"{CLIENTS} concurrent appenders to one table (one client alone, for scale)"
    lines = [title, table(["measure", *names], rows)]
    on, sqlite = results.get("metastore rebase on"), results.get("sql-sqlite")
    if on and sqlite and sqlite["appends_per_s"] > 0:
        ratio = on["appends_per_s"] / sqlite["appends_per_s"]
        lines.append(f"rebase on / sql-sqlite appends/s: {ratio:.1f}x (target >= 10x)")
    off = results.get("metastore rebase off")
    if on and off and off["appends_per_s"] > 0:
        lines.append(
            f"rebase on / off appends/s: {on['appends_per_s'] / off['appends_per_s']:.1f}x"
        )
    return lines


def summary_rows(results: Mapping[str, Mapping[str, float]]) -> list[Row]:
    """The summary's rows: rebase on's appends/s against SqlCatalog/SQLite's (at least
    ``TARGET_PER_SQLITE`` times), its client retries and failed appends (none), every
    row once with a valid chain (yes), and rebase off's appends/s against SQLite's and
    the node's CPU per append, reported."""
    on, off = results.get("metastore rebase on"), results.get("metastore rebase off")
    sqlite = results.get("sql-sqlite")
    rows: list[Row] = []
    if on is None:
        return rows
    if sqlite is not None:
        base = Figure("sql-sqlite", sqlite["appends_per_s"], "/s")
        rows.append(
            Row(
                "appenders",
                f"{CLIENTS} appenders: appends/s rebase on vs sql-sqlite",
                Figure("rebase on", on["appends_per_s"], "/s"),
                base,
                at_least(TARGET_PER_SQLITE),
            )
        )
        if off is not None:
            rows.append(
                Row(
                    "appenders",
                    f"{CLIENTS} appenders: appends/s rebase off vs sql-sqlite",
                    Figure("rebase off", off["appends_per_s"], "/s"),
                    base,
                )
            )
    rows += [
        Row(
            "appenders",
            "rebase on: client retries (409s)",
            Figure("rebase on", on["retries"]),
            target=at_most(0),
        ),
        Row(
            "appenders",
            "rebase on: failed appends (gave up or error)",
            Figure("rebase on", on["failures"] + on["errors"]),
            target=at_most(0),
        ),
        Row(
            "appenders",
            "rebase on: every row once, chain valid (1 = yes)",
            Figure("rebase on", min(on["rows_ok"], on["chain_ok"])),
            target=at_least(1),
        ),
    ]
    if "server_cpu_ms" in on:
        rows.append(
            Row(
                "appenders",
                "rebase on: node CPU per append",
                Figure("rebase on", on["server_cpu_ms"], "ms"),
            )
        )
    return rows
