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
from bench.scenarios.iceberg_workload import (
    SCHEMA,
    Cpu,
    NodeTimes,
    histogram_totals,
    in_rounds,
    interleave,
    node_times,
)
from harness.node import NodeProcess
from metastore.util.metrics import NodeMetrics


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
        warmup=2,
        tables=3,
        commits=3,
        loads=3,
        lists=2,
        history_commits=1,
        max_snapshots=1,
        rounds=2,
    )
    a, b = sql("a"), sql("b")
    results, failed = interleave({"a": a, "b": b, "broken": broken}, args)
    assert set(results) == {"a", "b"} and list(failed) == ["broken"]
    assert "NamespaceAlreadyExistsError" in failed["broken"]
    for out in results.values():
        assert {"create_table_per_s", "load_table_per_s", "commit_at_1_snapshots_p50_ms"} <= set(
            out
        )
        assert out["list_200_tables_p50_ms"] > 0
        assert "create_table_server_cpu_ms" not in out  # no node: the client did it all
    printed = capsys.readouterr().out
    # every round of a timed phase on each backend in turn: a1, b1, a2, b2, then the next
    order = [printed.index(f"[{name}: {phase}]") for phase in PHASES for name in ("a", "b")]
    assert order == sorted(order), printed
    # three creates in two rounds: t0 in round 1, t1 and t2 in round 2, each made once
    for catalog in (a, b):
        assert sorted(catalog.list_tables("bench")) == [("bench", f"t{i}") for i in range(3)]


PHASES = (
    "create_table 1/2",
    "create_table 2/2",
    "commit step 1/2",
    "commit step 2/2",
    "load_table 1/2",
    "load_table 2/2",
    "tables for listing",
    "list_tables 1/2",
    "list_tables 2/2",
)


def test_a_count_is_cut_into_even_consecutive_rounds() -> None:
    assert in_rounds(10, 4) == [range(0, 2), range(2, 5), range(5, 7), range(7, 10)]
    assert in_rounds(3, 4) == [range(0, 1), range(1, 2), range(2, 3)]  # never an empty one
    assert in_rounds(5, 1) == [range(0, 5)]
    assert [i for piece in in_rounds(1500, 4) for i in piece] == list(range(1500))


def test_a_node_s_times_add_up_over_the_rounds_of_a_phase(tmp_path: Path) -> None:
    with NodeProcess(tmp_path / "data", log_path=tmp_path / "node.log") as node:
        catalog = RestCatalog("bench", uri=node.url)
        catalog.create_namespace("bench")
        cpu, times = Cpu(4), node_times(catalog, 4)
        assert isinstance(times, NodeTimes)
        per_round, cpu_per_round = [], []
        for first in (0, 2):
            with cpu, times:
                for i in range(first, first + 2):
                    catalog.create_table(("bench", f"t{i}"), SCHEMA)
            per_round.append(dict(times.ms))
            cpu_per_round.append(cpu.ms)
        out: dict[str, float] = {}
        times.into(out, "create_table")
    # after round 1 the means cover two of four creates; round 2 adds its own two
    assert 0 < per_round[0]["request"] < per_round[1]["request"]
    assert out["create_table_node_request_ms"] == per_round[1]["request"]
    assert out["create_table_node_commit_ms"] > 0
    # the client's CPU (a fine clock) grows by round 2's; the node's (a child: clock
    # ticks of 10 ms, which two creates may not fill) never shrinks
    assert 0 < cpu_per_round[0][0] < cpu_per_round[1][0]
    assert 0 <= cpu_per_round[0][1] <= cpu_per_round[1][1]
