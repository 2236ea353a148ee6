"""Metrics reports: what engines tell the catalog about their scans and commits.

An Iceberg client that finds ``POST .../tables/{table}/metrics`` among the
``/v1/config`` endpoints sends a ``ScanReport`` after planning a scan and a
``CommitReport`` after a commit (the Java client does; engines on it, Spark, Flink,
Trino, do it by default). They are telemetry: how many files and bytes a scan
planned, how long it took, what a commit added. This node keeps them in memory:

- **Counted** per report type for ``/metrics``
  (``metastore_iceberg_metrics_reports_total{type="scan-report"}``), like every
  counter of the node: per node, from its start.
- **The last ones per table** (``KEEP``, 20, newest first) for the native API
  (``GET .../tables/{name}/metrics-reports``), keyed by the table's entity id, so a
  renamed table keeps its reports and a table created again under a dropped one's
  name starts with none. Memory is bounded: at most ``MAX_BYTES`` of report bodies
  over all tables, the reports of the tables reported on longest ago going first.

Why not durable: a report arrives with every scan of every engine, far more often
than any change to the catalog; writing each one as a commit would make reads cost
what writes cost and fill the changelog with telemetry that loses its worth within
minutes. Losing the recent reports with a restart loses nothing the catalog's state
depends on; whoever needs them for long scrapes ``/metrics`` or reads them as they
come. In a cluster each node keeps the reports it received itself.

Used on the event loop only (the handlers and ``/metrics``): no lock.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from dataclasses import dataclass
from typing import Any

from metastore.util.clock import Clock, SystemClock

KEEP = 20  # reports kept per table
MAX_BYTES = 16 * 1024 * 1024  # report bodies kept in all, over every table
REPORT_TYPES = ("scan-report", "commit-report")

TableId = tuple[str, str, int]  # tenant, catalog, the table's entity id


@dataclass(frozen=True, slots=True)
class Received:
    """One report as this node received it."""

    received_at_ms: int
    report: dict[str, Any]
    size: int  # the body's bytes, what it counts against MAX_BYTES

    def render(self) -> dict[str, Any]:
        return {"received-at-ms": self.received_at_ms, "report": self.report}


class MetricsReports:
    """The reports this node received: counts by type, the last ``keep`` per table."""

    def __init__(
        self, keep: int = KEEP, max_bytes: int = MAX_BYTES, clock: Clock | None = None
    ) -> None:
        self._keep = keep
        self._max_bytes = max_bytes
        self._clock = clock or SystemClock()
        self._tables: OrderedDict[TableId, deque[Received]] = OrderedDict()  # oldest first
        self._bytes = 0
        self.counts: Counter[str] = Counter()

    def add(self, table: TableId, report: dict[str, Any], size: int) -> None:
        """Count and keep a report (``report`` is schema-checked: its type is known)."""
        self.counts[report["report-type"]] += 1
        kept = self._tables.pop(table, None) or deque()
        self._tables[table] = kept  # now the most recently reported table
        if len(kept) == self._keep:
            self._bytes -= kept.popleft().size
        kept.append(Received(self._clock.now_us() // 1000, report, size))
        self._bytes += size
        while self._bytes > self._max_bytes:
            oldest_table, reports = next(iter(self._tables.items()))
            self._bytes -= reports.popleft().size
            if not reports:
                del self._tables[oldest_table]

    def recent(self, table: TableId) -> list[dict[str, Any]]:
        """The table's kept reports, newest first."""
        return [received.render() for received in reversed(self._tables.get(table, ()))]

    def stats(self) -> dict[str, tuple[str, str, int]]:
        help_text = "Iceberg metrics reports received, by report type"
        stats = {
            f'metastore_iceberg_metrics_reports_total{{type="{kind}"}}': (
                "counter",
                help_text,
                self.counts[kind],
            )
            for kind in REPORT_TYPES
        }
        stats["metastore_iceberg_metrics_reports_kept_bytes"] = (
            "gauge",
            "bytes of metrics reports kept for the native API",
            self._bytes,
        )
        return stats
