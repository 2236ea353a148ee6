"""The collector's pause histogram (``metastore.util.collector_pauses``): every collection
while installed, by generation, in cumulative buckets; nothing before or after."""

from __future__ import annotations

import gc

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from metastore.util.collector_pauses import NAME, CollectorPauses
from metastore.util.metrics import NodeMetrics


def _series(pauses: CollectorPauses) -> dict[tuple[str, str, str], float]:
    """(sample name, generation, le) -> value, as a scraper parses the exposition."""
    registry = CollectorRegistry()
    registry.register(pauses)
    text = generate_latest(registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, sample.labels["generation"], sample.labels.get("le", ""))
            out[key] = sample.value
    return out


def test_counts_each_collection_by_generation_only_while_installed() -> None:
    pauses = CollectorPauses()
    gc.disable()  # only the collections asked for below: none started by allocation
    try:
        gc.collect(0)  # not installed yet
        assert pauses.totals() == [(0, 0.0)] * 3
        pauses.install()
        pauses.install()  # twice is once
        try:
            kept = [[i] for i in range(50_000)]  # something for the full collections to walk
            gc.collect(0)
            gc.collect(2)
            gc.collect(2)
        finally:
            pauses.uninstall()
        gc.collect(2)  # uninstalled: not counted
    finally:
        gc.enable()
    young, middle, full = pauses.totals()
    assert (young[0], middle[0], full[0]) == (1, 0, 2), pauses.totals()
    assert full[1] > 0 and middle[1] == 0.0
    assert len(kept) == 50_000


def test_the_exposition_is_a_cumulative_histogram_per_generation() -> None:
    pauses = CollectorPauses(buckets=(1e-9, 10.0))  # below and above any real pause
    pauses.install()
    gc.disable()
    try:
        gc.collect(1)
        gc.collect(2)
    finally:
        gc.enable()
        pauses.uninstall()
    series = _series(pauses)
    for generation in ("1", "2"):
        count = series[(f"{NAME}_count", generation, "")]
        assert count == 1
        assert series[(f"{NAME}_bucket", generation, "1e-09")] == 0  # nothing that fast
        assert series[(f"{NAME}_bucket", generation, "10.0")] == count
        assert series[(f"{NAME}_bucket", generation, "+Inf")] == count
        assert 0 < series[(f"{NAME}_sum", generation, "")] < 10.0 * count
    assert series[(f"{NAME}_count", "0", "")] == pauses.totals()[0][0]


def test_a_pause_above_every_bound_is_only_in_the_last_bucket() -> None:
    pauses = CollectorPauses(buckets=(1e-9, 2e-9))
    pauses.install()
    gc.disable()
    try:
        gc.collect(2)
    finally:
        gc.enable()
        pauses.uninstall()
    series = _series(pauses)
    assert series[(f"{NAME}_bucket", "2", "2e-09")] == 0
    assert series[(f"{NAME}_bucket", "2", "+Inf")] == 1


def test_a_node_registry_exposes_the_pauses_and_the_process() -> None:
    metrics = NodeMetrics()
    metrics.collector_pauses.install()
    gc.disable()
    try:
        gc.collect(2)
    finally:
        gc.enable()
        metrics.collector_pauses.uninstall()
    families = {f.name: f for f in text_string_to_metric_families(metrics.exposition().decode())}
    full = [
        s
        for s in families[NAME].samples
        if s.name == f"{NAME}_count" and s.labels["generation"] == "2"
    ]
    assert [s.value for s in full] == [1.0]
    assert families["process_cpu_seconds"].samples[0].value > 0
    assert families["process_resident_memory_bytes"].samples[0].value > 0
    assert families["process_open_fds"].samples[0].value > 0


def test_each_pause_lands_in_the_first_bucket_that_holds_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the clock read at each collection's start and stop: pauses of 0.2 ms, 3 ms, 0.5 s
    readings = iter([10.0, 10.0002, 20.0, 20.003, 30.0, 30.5])
    monkeypatch.setattr("metastore.util.collector_pauses.perf_counter", lambda: next(readings))
    pauses = CollectorPauses()
    pauses.install()
    gc.disable()
    try:
        for _ in range(3):
            gc.collect(0)
    finally:
        gc.enable()
        pauses.uninstall()
    series = _series(pauses)
    buckets = {
        le: v for (name, gen, le), v in series.items() if name.endswith("_bucket") and gen == "0"
    }
    assert buckets["0.0001"] == 0
    assert buckets["0.00025"] == 1
    assert buckets["0.0025"] == 1
    assert buckets["0.005"] == 2
    assert buckets["0.25"] == 2
    assert buckets["0.5"] == 3  # a bound holds a pause equal to it
    assert buckets["+Inf"] == 3
    assert series[(f"{NAME}_sum", "0", "")] == pytest.approx(0.5032, abs=1e-6)
