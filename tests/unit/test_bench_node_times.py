"""The PyIceberg benchmark's single-client workload (``bench.scenarios.iceberg_workload``):
where an operation's time goes on the node, read from its ``/metrics`` (``NodeTimes``),
and the phases run on every backend in turn (``interleave``)."""

from __future__ import annotations

import argparse
import gc
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog

from bench.load import metric_values
from bench.scenarios.embedded_writes import collector_seconds
from bench.scenarios.iceberg_workload import SCHEMA, histogram_totals, interleave, node_times
from harness.node import NodeProcess
from metastore.metrics import NodeMetrics


def test_totals_add_every_label_set_and_only_the_named_histograms() -> None:
    registry = CollectorRegistry()
    requests = Histogram(
        "metastore_http_request_duration_seconds", "r", ("route", "method"), registry=registry
    )
    requests.labels("/v1/{prefix}/namespaces/{namespace}/tables", "POST").observe(0.004)
    requests.labels("/v1/{prefix}/a b", "GET").observe(0.002)  # a space in a label value
    Histogram("metastore_commit_duration_seconds", "c", registry=registry).observe(0.0015)
    Histogram("metastore_other_duration_seconds", "o", registry=registry).observe(9.0)
    totals = histogram_totals(generate_latest(registry).decode())
    assert totals["request"][1] == 2 and abs(totals["request"][0] - 0.006) < 1e-9
    assert totals["commit"] == (0.0015, 1.0)
    assert totals["durable write"] == (0.0, 0.0)  # absent: nothing, not someone else's
    assert totals["collector"] == (0.0, 0.0)


def test_the_collector_s_pauses_are_read_over_every_generation() -> None:
    metrics = NodeMetrics()
    metrics.collector_pauses.install()
    gc.disable()  # only these collections
    try:
        gc.collect(0)
        gc.collect(2)
    finally:
        gc.enable()
        metrics.collector_pauses.uninstall()
    text = metrics.exposition().decode()
    paused = sum(seconds for _, seconds in metrics.collector_pauses.totals())
    assert paused > 0
    read, collections = histogram_totals(text)["collector"]
    assert read == pytest.approx(paused) and collections == 2.0
    assert collector_seconds(metric_values(text)) == pytest.approx(paused)
    assert collector_seconds({"metastore_gc_pause_seconds_count": 2.0}) == 0.0


def test_a_node_splits_each_create_into_request_commit_and_durable_write(
    tmp_path: Path,
) -> None:
    with NodeProcess(tmp_path / "data", log_path=tmp_path / "node.log") as node:
        catalog = RestCatalog("bench", uri=node.url)
        catalog.create_namespace("bench")
        with node_times(catalog, 4) as times:
            for i in range(4):
                catalog.create_table(("bench", f"t{i}"), SCHEMA)
        out: dict[str, float] = {}
        times.into(out, "create_table")
    request, commit, write = (
        out[f"create_table_node_{part}_ms"] for part in ("request", "commit", "durable_write")
    )
    # each create is one request holding one commit holding one fsync'd write
    assert request > commit > write > 0, out
    # four creates may or may not fill the young generation: a pause, if any, is shorter
    assert 0 <= out["create_table_node_collector_ms"] < request, out


def test_a_catalog_without_a_node_records_nothing(tmp_path: Path) -> None:
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=tmp_path.as_uri())
    catalog.create_namespace("bench")
    with node_times(catalog, 1) as times:
        catalog.create_table(("bench", "t"), SCHEMA)
    out: dict[str, float] = {}
    times.into(out, "create_table")
    assert out == {}


def test_each_phase_runs_on_every_backend_before_the_next_and_a_failure_stops_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def sql(name: str) -> SqlCatalog:
        (tmp_path / name).mkdir()
        return SqlCatalog(
            name, uri=f"sqlite:///{tmp_path / name / 'c.db'}", warehouse=(tmp_path / name).as_uri()
        )

    broken = sql("broken")
    broken.create_namespace("listing")  # the workload's second namespace: it fails there
    args = argparse.Namespace(
        warmup=2, tables=3, commits=3, loads=3, lists=2, history_commits=1, max_snapshots=1
    )
    results, failed = interleave({"a": sql("a"), "b": sql("b"), "broken": broken}, args)
    assert set(results) == {"a", "b"} and list(failed) == ["broken"]
    assert "NamespaceAlreadyExistsError" in failed["broken"]
    for out in results.values():
        assert {"create_table_per_s", "load_table_per_s", "commit_at_1_snapshots_p50_ms"} <= set(
            out
        )
        assert "create_table_server_cpu_ms" not in out  # no node: the client did it all
    printed = capsys.readouterr().out
    order = [printed.index(f"[{name}: {phase}]") for phase in PHASES for name in ("a", "b")]
    assert order == sorted(order), printed


PHASES = ("create_table", "commit step", "load_table", "tables for listing")
