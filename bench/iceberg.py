"""The same PyIceberg workload against this service and against PyIceberg's ``SqlCatalog``.

Backends, side by side in one run:

- ``metastore``: an embedded node (child process, fsync on) through ``RestCatalog``;
- ``sql-sqlite``: ``SqlCatalog`` on a SQLite file;
- ``sql-postgres``: ``SqlCatalog`` on PostgreSQL from Debian's ``postgresql`` package,
  a private cluster started here as a child process on a loopback port in a temp
  directory (installed with apt-get when missing and running as root; skipped with a
  note otherwise).

(``bench/scenarios/iceberg_backends.py``.)

Every backend writes its table files to a local ``file://`` warehouse. Measured,
single client, sequential, after a warm-up that is not measured (30 creates, commit
steps and loads), each phase on every backend in turn before the next phase:

1. create_table/s (``--tables`` tables);
2. the catalog commit step: ``catalog.commit_table`` of one set-properties update;
3. load_table/s of a table with a few snapshots;
4. list_tables latency for a namespace of 200 tables;
5. commit latency when the table has 1, 100 and 1,000 snapshots: one metadata-only
   append (add-snapshot + set main) guarded by ``assert-ref-snapshot-id``; the
   history is built with the same commits, 100 snapshots per commit.

(``bench/scenarios/iceberg_workload.py``.)

5b. the REST client's floor: creates, commit steps and loads of PyIceberg's
   ``RestCatalog`` against the node's own answers replayed from memory
   (``bench.floor_app``), side by side with ``SqlCatalog`` on SQLite and the node: the
   least any REST catalog could take for them through that client
   (``bench/scenarios/client_floor.py``; ``--skip-floor`` leaves it out).

6. concurrent appenders: 16 PyIceberg clients appending to one table for
   ``--append-seconds`` (appends/s, client retries, failures, every row once),
   against this service with ``metastore.commit.rebase-appends`` on and off and
   against each ``SqlCatalog``, and one client alone for scale; threads of this
   process, or processes with ``--append-processes``; each append loads the table
   first (on REST with PyIceberg's ``snapshot-loading-mode=refs``), or with
   ``--append-hold-table`` each client keeps its table between appends; the client's
   and the node's CPU per append (``bench/scenarios/iceberg_appenders.py``).

Run from the repo root: ``.venv/bin/python -m bench.iceberg [--quick]``; the summary
is also written to ``.bench/iceberg.json``. Never asserts; exit 1 on an error.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

from pyiceberg.catalog import Catalog

from bench import summary
from bench.load import children_cpu
from bench.report import command_line, save_report
from bench.scenarios import client_floor, iceberg_appenders, iceberg_workload
from bench.scenarios.iceberg_backends import BACKENDS, ensure_postgres
from bench.scenarios.iceberg_workload import OURS, PINNED

REPO_ROOT = Path(__file__).resolve().parents[1]
OUT_PATH = REPO_ROOT / ".bench" / "iceberg.json"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run with small counts")
    parser.add_argument("--only", choices=list(BACKENDS), nargs="*")
    parser.add_argument("--append-seconds", type=float, help="concurrent appenders' run time")
    parser.add_argument(
        "--appenders-only", action="store_true", help="only the concurrent appenders scenario"
    )
    parser.add_argument(
        "--append-processes",
        action="store_true",
        help="run each appender in its own process (default: threads of this process)",
    )
    parser.add_argument(
        "--append-hold-table",
        action="store_true",
        help="each appender keeps its table between appends (default: loads it before each)",
    )
    parser.add_argument(
        "--skip-appenders", action="store_true", help="no concurrent appenders scenario"
    )
    parser.add_argument(
        "--skip-floor", action="store_true", help="no run of the REST client's floor"
    )
    args = parser.parse_args(argv)
    quick = args.quick
    # long enough that a hiccup of this machine moves a figure little: 300 loads took
    # about a second, and one run's load_table/s was half the next run's minutes later
    args.warmup = 3 if quick else 30  # creates, commit steps and loads, not measured
    args.tables = 20 if quick else 400
    args.commits = 20 if quick else 300
    args.loads = 50 if quick else 1500
    args.lists = 5 if quick else 200
    # the timed phases in rounds, the backends taking turns (``iceberg_workload``)
    args.rounds = 2 if quick else 4
    args.history_commits = 3 if quick else 20
    args.max_snapshots = 100 if quick else 1000
    if args.append_seconds is None:
        args.append_seconds = 5.0 if quick else 20.0
    return args


def run(args: argparse.Namespace) -> int:
    print(f"command: {command_line('bench.iceberg')}")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus; single client, sequential")
    results: dict[str, dict[str, float]] = {}
    appends: dict[str, dict[str, float]] = {}
    floor: dict[str, dict[str, float]] = {}
    notes: list[str] = []
    failed = False
    catalogs: dict[str, Catalog] = {}
    with ExitStack() as stack:
        for name, backend in BACKENDS.items():
            if args.only and name not in args.only:
                continue
            if name == "sql-postgres" and (why := ensure_postgres()) is not None:
                notes.append(f"sql-postgres skipped: {why}")
                continue
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix=f"bench-{name}-"))
            try:
                catalogs[name] = stack.enter_context(backend(Path(tmp)))
            except Exception as exc:  # report and go on with the other backends
                failed = True
                notes.append(f"{name} failed to start: {type(exc).__name__}: {exc}")
        print(f"backends: {', '.join(catalogs)}; each phase runs on each in turn", flush=True)
        if not args.appenders_only:
            results, failures = iceberg_workload.interleave(catalogs, args)
            failed = failed or bool(failures)
            notes += [f"{name} failed: {why}" for name, why in failures.items()]
        if not (args.appenders_only or args.skip_floor) and OURS in catalogs:
            print("\n== the REST client's floor ==", flush=True)
            try:
                floor = _floor(catalogs, stack.enter_context(tempfile.TemporaryDirectory()), args)
            except Exception as exc:  # report and go on with the appenders
                failed = True
                notes.append(f"client floor failed: {type(exc).__name__}: {exc}")
                print(f"  FAILED: {exc}", flush=True)
        for name, catalog in catalogs.items():
            if args.skip_appenders:
                break
            if name == PINNED:  # their rate is the clients' (README), pinned node or not
                continue
            print(f"\n== {name}: concurrent appenders ==", flush=True)
            try:
                appends.update(_appenders(name, catalog, args))
            except Exception as exc:  # report and go on with the other backends
                failed = True
                notes.append(f"{name} appenders failed: {type(exc).__name__}: {exc}")
                print(f"  FAILED: {exc}", flush=True)
    text = "\n".join(iceberg_workload.section(results) if results else [])
    if floor:
        text += "\n\n" + "\n".join(client_floor.section(floor))
    if appends:
        text += "\n\n" + "\n".join(iceberg_appenders.section(appends))
    text += "".join(f"\n{n}" for n in notes)
    print("\n" + "=" * 80 + "\n" + text)
    save_report(
        OUT_PATH,
        REPO_ROOT,
        {
            "args": vars(args),
            "results": results,
            "floor": floor,
            "appenders": appends,
            "notes": notes,
        },
    )
    if results:
        summary.contribute("iceberg", iceberg_workload.summary_rows(results), quick=args.quick)
    if floor:
        rows = client_floor.summary_rows(floor, OURS, iceberg_workload.TARGET_BASE)
        summary.contribute("iceberg floor", rows, quick=args.quick)
    if appends:
        rows = iceberg_appenders.summary_rows(appends)
        summary.contribute("appenders", rows, quick=args.quick)
    return 1 if failed else 0


def _floor(
    catalogs: dict[str, Catalog], work: str, args: argparse.Namespace
) -> dict[str, dict[str, float]]:
    """The floor beside this service's node and ``SqlCatalog`` on SQLite (the target's
    base), when they ran."""
    beside = {n: catalogs[n] for n in (OURS, iceberg_workload.TARGET_BASE) if n in catalogs}
    return client_floor.run(beside, catalogs[OURS].properties["uri"], Path(work), args)


def _appenders(
    name: str, catalog: Catalog, args: argparse.Namespace
) -> dict[str, dict[str, float]]:
    """The concurrent appenders on this backend: on this service, rebase on and off, and
    one client alone (with the node's CPU per append, when the appenders are threads)."""
    seconds, processes, fresh = (
        args.append_seconds,
        args.append_processes,
        not args.append_hold_table,
    )
    rest = name == "metastore"
    client = iceberg_appenders.FRESH_REST_PROPERTIES if rest and fresh else {}
    server_cpu = children_cpu if rest and not processes else None

    def run(table: str, properties: dict[str, str], clients: int = 16) -> dict[str, float]:
        return iceberg_appenders.appenders(
            catalog,
            table,
            properties,
            seconds,
            clients,
            processes=processes,
            fresh=fresh,
            client_properties=client,
            server_cpu=server_cpu,
        )

    if name != "metastore":
        return {name: run("hot", {})}
    on = {iceberg_appenders.REBASE: "true"}
    return {
        "metastore rebase on": run("rebase_on", on),
        "metastore rebase off": run("rebase_off", {iceberg_appenders.REBASE: "false"}),
        "metastore 1 client": run("alone", on, 1),
    }


def main(argv: Sequence[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
