"""Concurrent appenders: ``CLIENTS`` PyIceberg clients appending to one table for a while.

Each client is a thread with its own catalog client (as separate ingestion jobs
would be) and its own ids; it appends one small Arrow batch at a time until the
time is up. The table sets ``commit.retry.num-retries=0``, so PyIceberg never
retries on its own: a ``CommitFailedException`` is counted as a client retry and
the client reloads the table and tries again, up to ``RETRIES`` times (PyIceberg's
default), after which the append counts as a failure. At the end one scan checks
that every acknowledged append's rows are present exactly once and no failed one's.

Run against this service with ``metastore.commit.rebase-appends`` on and off (two
tables on the same node) and against PyIceberg's ``SqlCatalog``; and, for scale, one
client alone on this service (what one client process can append per second here:
the 16 threads share that process's interpreter, so that is their ceiling too).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

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
    lock: threading.Lock = field(default_factory=threading.Lock)
    counts: Counter[str] = field(default_factory=Counter)
    committed: list[int] = field(default_factory=list)
    first_error: str | None = None

    def add(self, key: str, ids: list[int] | None = None, error: str | None = None) -> None:
        with self.lock:
            self.counts[key] += 1
            if ids is not None:
                self.committed.extend(ids)
            if error is not None and self.first_error is None:
                self.first_error = error


def _client(catalog: Catalog) -> Catalog:
    """Another client of the same catalog (its own connections and state)."""
    return type(catalog)(catalog.name, **catalog.properties)


def _batch(ids: list[int]) -> pa.Table:
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "name": pa.array([f"r{i}" for i in ids], pa.string())}
    )


def appenders(
    catalog: Catalog,
    name: str,
    properties: Mapping[str, str],
    seconds: float,
    clients: int = CLIENTS,
) -> dict[str, float]:
    """``clients`` appenders on a new table ``appenders.<name>`` for ``seconds``."""
    if NAMESPACE not in catalog.list_namespaces():
        catalog.create_namespace(NAMESPACE)
    identifier = (*NAMESPACE, name)
    catalog.create_table(
        identifier, SCHEMA, properties={"commit.retry.num-retries": "0", **properties}
    )
    tally = _Tally()
    start = threading.Barrier(clients + 1)
    deadline: list[float] = []

    def writer(index: int) -> None:
        client = _client(catalog)
        table = client.load_table(identifier)
        start.wait()
        n = 0
        while time.perf_counter() < deadline[0]:
            ids = [index * 10_000_000 + n * 2, index * 10_000_000 + n * 2 + 1]
            n += 1
            for attempt in range(RETRIES + 1):
                try:
                    table.append(_batch(ids))
                    tally.add("appends", ids)
                    break
                except CommitFailedException:
                    tally.add("retries" if attempt < RETRIES else "failures")
                    table = client.load_table(identifier)
                except Exception as exc:  # report, never hang the run
                    tally.add("errors", error=f"{type(exc).__name__}: {exc}"[:300])
                    table = client.load_table(identifier)
                    break

    threads = [threading.Thread(target=writer, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    begin = time.perf_counter()
    deadline.append(begin + seconds)
    start.wait()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - begin
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
