"""Concurrent appenders: ``CLIENTS`` PyIceberg clients appending to one table for a while.

Each client is a thread (or, with ``processes``, a process of its own) with its own
catalog client (as separate ingestion jobs would be) and its own ids; it appends one
small Arrow batch at a time until the time is up. The table sets
``commit.retry.num-retries=0``, so PyIceberg never retries on its own: a
``CommitFailedException`` is counted as a client retry and the client reloads the
table and tries again, up to ``RETRIES`` times (PyIceberg's
default), after which the append counts as a failure. At the end one scan checks
that every acknowledged append's rows are present exactly once and no failed one's.

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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException

from bench.report import table
from bench.scenarios.iceberg_workload import SCHEMA

CLIENTS = 16
RETRIES = 4  # PyIceberg's default commit.retry.num-retries
REBASE = "metastore.commit.rebase-appends"
NAMESPACE = ("appenders",)

ROWS = [
    ("appends/s", "appends_per_s", "{:.1f}"),
    ("appends acknowledged", "appends", "{:.0f}"),
    ("client retries (409s)", "retries", "{:.0f}"),
    ("failed appends (gave up)", "failures", "{:.0f}"),
    ("other errors", "errors", "{:.0f}"),
    ("every row once (1 = yes)", "rows_ok", "{:.0f}"),
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
    start: _Barrier,
    out: _Queue,
) -> None:
    """One appender: its own catalog client, its own ids, until ``seconds`` have passed
    since every appender was ready."""
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
) -> dict[str, float]:
    """``clients`` appenders (threads, or with ``processes`` processes) on a new table
    ``appenders.<name>`` for ``seconds``."""
    if NAMESPACE not in catalog.list_namespaces():
        catalog.create_namespace(NAMESPACE)
    identifier = (*NAMESPACE, name)
    catalog.create_table(
        identifier, SCHEMA, properties={"commit.retry.num-retries": "0", **properties}
    )
    context = multiprocessing.get_context("spawn")
    start: _Barrier = context.Barrier(clients + 1) if processes else threading.Barrier(clients + 1)
    out: _Queue = context.Queue() if processes else queue.Queue()
    spec = (type(catalog), catalog.name, dict(catalog.properties), identifier)
    workers: list[threading.Thread | multiprocessing.process.BaseProcess] = [
        (context.Process if processes else threading.Thread)(
            target=_writer, args=(*spec, i, seconds, start, out), daemon=True
        )
        for i in range(clients)
    ]
    for worker in workers:
        worker.start()
    start.wait(timeout=300)
    begin = time.monotonic()
    tally = _Tally()
    for _ in workers:
        tally.merge(out.get(timeout=seconds + 600))
    elapsed = time.monotonic() - begin
    for worker in workers:
        worker.join()
    scanned = catalog.load_table(identifier).scan().to_arrow()["id"].to_pylist()
    rows_ok = sorted(scanned) == sorted(tally.committed)
    counts = tally.counts
    retries = counts["retries"] + counts["failures"]  # every 409 seen by a client
    print(
        f"    {name}: {counts['appends'] / elapsed:.1f} appends/s, {retries} client retries, "
        f"{counts['failures']} failures, {counts['errors']} errors, rows once: {rows_ok}"
        + (f" (first error: {tally.first_error})" if tally.first_error else ""),
        flush=True,
    )
    return {
        "appends_per_s": counts["appends"] / elapsed,
        "appends": float(counts["appends"]),
        "retries": float(retries),
        "failures": float(counts["failures"]),
        "errors": float(counts["errors"]),
        "rows_ok": 1.0 if rows_ok else 0.0,
        "seconds": elapsed,
    }


def section(results: Mapping[str, Mapping[str, float]]) -> list[str]:
    """The scenario's table (one column per run) and the ratio the target is about."""
    names = list(results)
    rows = [
        [label, *(fmt.format(results[n][key]) if key in results[n] else "-" for n in names)]
        for label, key, fmt in ROWS
    ]
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
