"""The concurrent appenders benchmark's checks and its rows in the summary table
(``bench.scenarios.iceberg_appenders``)."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from bench.scenarios.iceberg_appenders import appenders, chain_valid, summary_rows
from bench.scenarios.iceberg_workload import SCHEMA
from bench.summary import at_least, at_most

RUN = {"appends_per_s": 24.0, "retries": 0.0, "failures": 0.0, "errors": 0.0}


def test_summary_rows_hold_the_targets() -> None:
    rows = summary_rows(
        {
            "metastore rebase on": {**RUN, "rows_ok": 1.0, "chain_ok": 1.0, "server_cpu_ms": 14.0},
            "metastore rebase off": {**RUN, "appends_per_s": 3.0},
            "sql-sqlite": {**RUN, "appends_per_s": 2.0},
        }
    )
    by_measure = {row.measure: row for row in rows}
    ratio = by_measure["16 appenders: appends/s rebase on vs sql-sqlite"]
    assert ratio.ratio == 12.0 and ratio.target == at_least(10.0)
    off = by_measure["16 appenders: appends/s rebase off vs sql-sqlite"]
    assert off.ratio == 1.5 and off.target is None  # reported only
    assert by_measure["rebase on: client retries (409s)"].target == at_most(0)
    assert by_measure["rebase on: failed appends (gave up or error)"].target == at_most(0)
    assert by_measure["rebase on: every row once, chain valid (1 = yes)"].ratio == 1.0
    assert by_measure["rebase on: node CPU per append"].figure.value == 14.0
    assert summary_rows({"sql-sqlite": RUN}) == []  # nothing to compare


def test_chain_valid_counts_every_snapshot_once(tmp_path: Path) -> None:
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=tmp_path.as_uri())
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", SCHEMA)
    for n in range(3):
        table.append(pa.table({"id": pa.array([n], pa.int64()), "name": pa.array(["x"])}))
    assert chain_valid(table, 3)
    assert not chain_valid(table, 2)  # an append acknowledged twice, or a snapshot too many


def test_a_run_reports_how_busy_the_appenders_process_was(tmp_path: Path) -> None:
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=tmp_path.as_uri())
    result = appenders(catalog, "busy", {}, seconds=0.5, clients=2)
    assert result["appends"] >= 1 and result["rows_ok"] == 1.0 and result["chain_ok"] == 1.0
    # the process's CPU over the run's time: Arrow's own threads work outside the
    # interpreter's lock, so it may pass one core, never the machine's
    assert 0 < result["client_cores"] <= (os.cpu_count() or 1) * 1.05, result
    assert result["client_cpu_ms"] == pytest.approx(
        result["client_cores"] * result["seconds"] * 1000 / result["appends"]
    )
