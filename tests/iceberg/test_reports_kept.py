"""The metrics reports a node keeps: the last ``keep`` per table, a byte budget over all
tables that drops the tables reported on longest ago first, counts by type."""

from __future__ import annotations

from typing import Any

from metastore.iceberg.reports import MetricsReports
from metastore.util.clock import ManualClock


def _report(n: int, kind: str = "scan-report") -> dict[str, Any]:
    return {"report-type": kind, "n": n}


def _kept(reports: MetricsReports, table: tuple[str, str, int]) -> list[int]:
    return [r["report"]["n"] for r in reports.recent(table)]


def test_the_last_reports_per_table_newest_first() -> None:
    reports = MetricsReports(keep=3, max_bytes=1000, clock=ManualClock())
    a, b = ("t", "c", 1), ("t", "c", 2)
    for n in range(5):
        reports.add(a, _report(n), 10)
    reports.add(b, _report(9, "commit-report"), 10)
    assert _kept(reports, a) == [4, 3, 2]
    assert _kept(reports, b) == [9]
    assert _kept(reports, ("t", "c", 3)) == []
    assert reports.counts == {"scan-report": 5, "commit-report": 1}
    stats = reports.stats()
    assert stats['metastore_iceberg_metrics_reports_total{type="scan-report"}'][2] == 5
    assert stats["metastore_iceberg_metrics_reports_kept_bytes"][2] == 40


def test_the_byte_budget_drops_the_table_reported_on_longest_ago_first() -> None:
    reports = MetricsReports(keep=10, max_bytes=100, clock=ManualClock())
    old, busy = ("t", "c", 1), ("t", "c", 2)
    reports.add(old, _report(1), 40)
    reports.add(busy, _report(2), 40)
    reports.add(busy, _report(3), 40)  # 120 bytes: the old table's report goes
    assert _kept(reports, old) == []
    assert _kept(reports, busy) == [3, 2]
    reports.add(old, _report(4), 40)  # now busy is the one reported on longest ago
    assert _kept(reports, busy) == [3]
    assert _kept(reports, old) == [4]
    reports.add(busy, _report(5), 500)  # larger than the budget: counted, not kept
    assert reports.stats()["metastore_iceberg_metrics_reports_kept_bytes"][2] <= 100
    assert reports.counts["scan-report"] == 5
