"""The same PyIceberg workload against this service and against PyIceberg's ``SqlCatalog``.

Backends, side by side in one run:

- ``metastore``: an embedded node (child process, fsync on) through ``RestCatalog``;
- ``sql-sqlite``: ``SqlCatalog`` on a SQLite file;
- ``sql-postgres``: ``SqlCatalog`` on PostgreSQL 15 from Debian's packages, started here
  on a loopback port in a temp directory (installed with apt-get when missing and
  running as root; skipped with a note otherwise).

Every backend writes its table files to a local ``file://`` warehouse. Measured,
single client, sequential:

1. create_table/s (``--tables`` tables);
2. the catalog commit step: ``catalog.commit_table`` of one set-properties update;
3. load_table/s of a table with a few snapshots;
4. list_tables latency for a namespace of 200 tables;
5. commit latency when the table has 1, 100 and 1,000 snapshots: one metadata-only
   append (add-snapshot + set main) guarded by ``assert-ref-snapshot-id``; the
   history is built with the same commits, 100 snapshots per commit.

Run from the repo root: ``.venv/bin/python -m bench.iceberg [--quick]``; the summary
is also written to ``.bench/iceberg.json``. Never asserts; exit 1 on an error.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
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

from metastore.procs import NodeProcess, free_port

REPO_ROOT = Path(__file__).resolve().parents[1]
OUT_PATH = REPO_ROOT / ".bench" / "iceberg.json"
PG_BIN = Path("/usr/lib/postgresql/15/bin")
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "name", StringType(), required=False),
)
LIST_TABLES = 200
HISTORY_POINTS = (1, 100, 1000)
HISTORY_BATCH = 100


def p(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def ms(value: float) -> str:
    return f"{value * 1000:.2f}"


class Progress:
    def __init__(self, label: str, total: int) -> None:
        self.label, self.total, self.done = label, total, 0
        self.start = self.last = time.monotonic()

    def tick(self) -> None:
        self.done += 1
        now = time.monotonic()
        if now - self.last >= 2.0 or self.done == self.total:
            self.last = now
            rate = self.done / max(now - self.start, 1e-9)
            print(f"    {self.label}: {self.done}/{self.total} ({rate:.0f}/s)", flush=True)


# --- backends -------------------------------------------------------------------------


@contextmanager
def metastore_backend(root: Path) -> Iterator[Catalog]:
    node = NodeProcess(root / "node" / "data", log_path=root / "node.log")
    with node:
        catalog = RestCatalog("bench", uri=node.url)
        try:
            yield catalog
        finally:
            catalog.close()


@contextmanager
def sqlite_backend(root: Path) -> Iterator[Catalog]:
    from pyiceberg.catalog.sql import SqlCatalog

    warehouse = root / "sqlite-warehouse"
    warehouse.mkdir(parents=True)
    yield SqlCatalog("bench", uri=f"sqlite:///{root / 'catalog.db'}", warehouse=warehouse.as_uri())


def _as_postgres(args: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


def ensure_postgres() -> str | None:
    """None if PostgreSQL 15 is usable, else why not."""
    if (PG_BIN / "initdb").exists():
        return None
    if os.geteuid() != 0:
        return "PostgreSQL 15 is not installed and installing it needs root"
    print("  installing postgresql-15 (apt-get)", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "postgresql-15"],
    ):
        if subprocess.run(command, env=env, check=False).returncode != 0:
            return f"{' '.join(command)} failed"
    return None if (PG_BIN / "initdb").exists() else "postgresql-15 installed no initdb"


@contextmanager
def postgres_backend(root: Path) -> Iterator[Catalog]:
    from pyiceberg.catalog.sql import SqlCatalog

    data = root / "pg"
    data.mkdir(parents=True)
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(data, "postgres")
    port = free_port()

    def run(*command: str) -> None:
        subprocess.run(_as_postgres(list(command)), check=True, capture_output=True)

    run(str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres")
    options = f"-p {port} -k {data} -c listen_addresses=127.0.0.1"
    run(
        str(PG_BIN / "pg_ctl"),
        "-D",
        str(data),
        "-o",
        options,
        "-l",
        str(data / "log"),
        "-w",
        "start",
    )
    try:
        warehouse = root / "pg-warehouse"
        warehouse.mkdir()
        uri = f"postgresql+psycopg2://postgres@127.0.0.1:{port}/postgres"
        catalog = SqlCatalog("bench", uri=uri, warehouse=warehouse.as_uri())
        try:
            yield catalog
        finally:
            catalog.engine.dispose()
    finally:
        run(str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")


# --- the workload ---------------------------------------------------------------------


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def add_snapshots(catalog: Catalog, table: Table, count: int) -> Table:
    """``count`` metadata-only appends in one commit (snapshots over fake manifest lists)."""
    metadata = table.metadata
    parent = metadata.current_snapshot_id
    sequence = metadata.last_sequence_number
    updates: list[Any] = []
    now = int(time.time() * 1000)
    for _ in range(count):
        sequence += 1
        snapshot_id = metadata.new_snapshot_id()
        updates.append(
            AddSnapshotUpdate(
                snapshot=Snapshot(
                    snapshot_id=snapshot_id,
                    parent_snapshot_id=parent,
                    sequence_number=sequence,
                    timestamp_ms=now,
                    manifest_list=f"{table.location()}/metadata/snap-{snapshot_id}.avro",
                    summary=Summary(Operation.APPEND),
                    schema_id=metadata.current_schema_id,
                )
            )
        )
        parent = snapshot_id
    assert parent is not None
    updates.append(
        SetSnapshotRefUpdate(ref_name="main", type=SnapshotRefType.BRANCH, snapshot_id=parent)
    )
    requirement = AssertRefSnapshotId(ref="main", snapshot_id=metadata.current_snapshot_id)
    catalog.commit_table(table, (requirement,), tuple(updates))
    return catalog.load_table(table.name())


def workload(catalog: Catalog, args: argparse.Namespace) -> dict[str, float]:
    out: dict[str, float] = {}
    catalog.create_namespace(("bench",))
    catalog.create_namespace(("listing",))

    progress = Progress("create_table", args.tables)
    times = []
    for i in range(args.tables):
        times.append(timed(lambda i=i: catalog.create_table(("bench", f"t{i}"), SCHEMA)))
        progress.tick()
    out["create_table_per_s"] = len(times) / sum(times)

    table = catalog.load_table(("bench", "t0"))
    progress = Progress("commit step", args.commits)
    times = []
    for i in range(args.commits):
        update = SetPropertiesUpdate(updates={"round": str(i)})
        times.append(timed(lambda u=update: catalog.commit_table(table, (), (u,))))
        progress.tick()
    out["commit_step_p50_ms"] = p(times, 0.5) * 1000
    out["commit_step_p99_ms"] = p(times, 0.99) * 1000

    table = add_snapshots(catalog, catalog.load_table(("bench", "t1")), 5)
    progress = Progress("load_table", args.loads)
    times = []
    for _ in range(args.loads):
        times.append(timed(lambda: catalog.load_table(("bench", "t1"))))
        progress.tick()
    out["load_table_per_s"] = len(times) / sum(times)

    progress = Progress("tables for listing", LIST_TABLES)
    for i in range(LIST_TABLES):
        catalog.create_table(("listing", f"l{i:03d}"), SCHEMA)
        progress.tick()
    times = [timed(lambda: catalog.list_tables(("listing",))) for _ in range(args.lists)]
    assert len(catalog.list_tables(("listing",))) == LIST_TABLES
    out["list_200_tables_p50_ms"] = p(times, 0.5) * 1000

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
        out[f"commit_at_{point}_snapshots_p50_ms"] = p(times, 0.5) * 1000
        print(f"    commit at ~{point} snapshots: p50 {ms(p(times, 0.5))} ms", flush=True)
    return out


# --- the run --------------------------------------------------------------------------

ROWS = [
    ("create_table/s", "create_table_per_s", "{:.0f}"),
    ("commit step p50 ms", "commit_step_p50_ms", "{:.2f}"),
    ("commit step p99 ms", "commit_step_p99_ms", "{:.2f}"),
    ("load_table/s", "load_table_per_s", "{:.0f}"),
    ("list_tables (200) p50 ms", "list_200_tables_p50_ms", "{:.2f}"),
    *[
        (f"commit at {n} snapshots p50 ms", f"commit_at_{n}_snapshots_p50_ms", "{:.2f}")
        for n in HISTORY_POINTS
    ],
]


def summary(results: dict[str, dict[str, float]]) -> str:
    names = list(results)
    header = ["measure", *names]
    rows = [
        [label, *(fmt.format(results[n][key]) if key in results[n] else "-" for n in names)]
        for label, key, fmt in ROWS
    ]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run with small counts")
    parser.add_argument("--only", choices=["metastore", "sql-sqlite", "sql-postgres"], nargs="*")
    args = parser.parse_args(argv)
    quick = args.quick
    args.tables = 20 if quick else 200
    args.commits = 20 if quick else 100
    args.loads = 50 if quick else 300
    args.lists = 5 if quick else 20
    args.history_commits = 3 if quick else 10
    args.max_snapshots = 100 if quick else 1000
    return args


def run(args: argparse.Namespace) -> int:
    print(f"command: {' '.join([sys.executable, '-m', 'bench.iceberg', *sys.argv[1:]])}")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus; single client, sequential")
    backends: dict[str, Callable[[Path], Any]] = {
        "metastore": metastore_backend,
        "sql-sqlite": sqlite_backend,
        "sql-postgres": postgres_backend,
    }
    results: dict[str, dict[str, float]] = {}
    notes: list[str] = []
    failed = False
    for name, backend in backends.items():
        if args.only and name not in args.only:
            continue
        if name == "sql-postgres" and (why := ensure_postgres()) is not None:
            notes.append(f"sql-postgres skipped: {why}")
            continue
        print(f"\n== {name} ==", flush=True)
        with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as tmp, ExitStack() as stack:
            try:
                catalog = stack.enter_context(backend(Path(tmp)))
                results[name] = workload(catalog, args)
            except Exception as exc:  # report and go on with the other backends
                failed = True
                notes.append(f"{name} failed: {type(exc).__name__}: {exc}")
                print(f"  FAILED: {exc}", flush=True)
    text = summary(results) + "".join(f"\n{note}" for note in notes)
    print("\n" + "=" * 80 + "\n" + text)
    OUT_PATH.parent.mkdir(exist_ok=True)
    OUT_PATH.write_text(
        json.dumps({"args": vars(args), "results": results, "notes": notes}, indent=2)
    )
    print(f"\nwrote {OUT_PATH.relative_to(REPO_ROOT)}")
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
