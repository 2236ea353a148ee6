"""The node's Prometheus histograms: what a latency or a size looked like, not just a total.

``/metrics`` has always exposed the engine's running totals (``metastore.node.stats``);
those say how much happened. These say how long it took and how big it was, per
observation: HTTP requests by route template (never the raw path, so the number of
series stays bounded by the route table), commits and their group size, the durable
write under every group, forwarded writes, the owners' Kafka transactions and the
pipeline jobs' task runs, and the garbage collector's pauses
(``metastore.util.collector_pauses``). The view's lag is read when ``/metrics`` is asked,
as are the process's CPU seconds, memory and open files (``process_*``, as any
Prometheus client exposes them).

One ``NodeMetrics`` per app, on its own registry (never prometheus_client's global
one: two nodes in one process, as in the tests, keep their own numbers). An
observation takes a short uncontended lock inside prometheus_client and no I/O, so
it is cheap on the event loop and safe from the commit and owner threads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Histogram, ProcessCollector, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from metastore.util.collector_pauses import CollectorPauses

# seconds: from a cached read (well under a millisecond) to a forward that times out
LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip
# commits per group: one at a time up to the lanes' largest batch (256)
GROUP_BUCKETS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0)
# a pipeline job's run: seconds to hours
JOB_BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 24 * 3600.0)

UNMATCHED_ROUTE = "(unmatched)"  # a request no route matched (404/405): one series for all


@dataclass(frozen=True)
class CommitMetrics:
    """What the commit lanes and the committer observe (``metastore.engine.lanes``, ``commits``)."""

    latency: Histogram  # one commit, from its submission to its answer (queueing included)
    group: Histogram  # commits per durable write
    durable_write: Histogram  # the write of one group: fsync'd RocksDB batch or owner's transaction


@dataclass(frozen=True)
class OwnerMetrics:
    """What a partition owner observes of its Kafka transactions (``workers.owner``)."""

    transactions: Histogram  # by outcome: committed, unknown (aborted), fenced (aborted)


ViewLag = Callable[[], tuple[int, float]]  # (records behind, seconds behind), read at scrape


class NodeMetrics:
    """Every histogram of one node, on the node's own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.http_requests = Histogram(
            "metastore_http_request_duration_seconds",
            "HTTP requests by route template, method and status",
            ("route", "method", "status"),
            registry=self.registry,
            buckets=LATENCY_BUCKETS,
        )
        self.commits = CommitMetrics(
            latency=Histogram(
                "metastore_commit_duration_seconds",
                "commits from submission to answer, by outcome (committed or failed)",
                ("outcome",),
                registry=self.registry,
                buckets=LATENCY_BUCKETS,
            ),
            group=Histogram(
                "metastore_commit_group_commits",
                "commits per group commit (one durable write)",
                registry=self.registry,
                buckets=GROUP_BUCKETS,
            ),
            durable_write=Histogram(
                "metastore_durable_write_duration_seconds",
                "one group's durable write: the fsync'd RocksDB batch (embedded) or the "
                "owner's Kafka transaction and read-back (cluster)",
                registry=self.registry,
                buckets=LATENCY_BUCKETS,
            ),
        )
        self.forwards = Histogram(
            "metastore_forward_duration_seconds",
            "writes forwarded to their partition's owner, by outcome "
            "(answered, retried: not the owner or unreachable, unknown: no answer)",
            ("outcome",),
            registry=self.registry,
            buckets=LATENCY_BUCKETS,
        )
        self.owner = OwnerMetrics(
            transactions=Histogram(
                "metastore_owner_transaction_duration_seconds",
                "the partition owners' Kafka transactions, by outcome "
                "(committed; unknown and fenced are aborts)",
                ("outcome",),
                registry=self.registry,
                buckets=LATENCY_BUCKETS,
            )
        )
        self.job_runs = Histogram(
            "metastore_job_run_duration_seconds",
            "pipeline job runs (gc, maintain) whose task this node recorded as done, by job: "
            "from the task's acquisition to its release (the jobs run in their own processes)",
            ("job",),
            registry=self.registry,
            buckets=JOB_BUCKETS,
        )
        self.collector_pauses = CollectorPauses()  # counts once the app installs it
        self.registry.register(self.collector_pauses)
        ProcessCollector(registry=self.registry)

    def watch_view(self, lag: ViewLag) -> None:
        """Cluster mode: expose the view's lag, read from ``lag`` at every scrape."""
        self.registry.register(_ViewLagCollector(lag))

    def exposition(self) -> bytes:
        """The Prometheus text format of every histogram (and the view's lag)."""
        return generate_latest(self.registry)


class _ViewLagCollector(Collector):
    def __init__(self, lag: ViewLag) -> None:
        self._lag = lag

    def collect(self) -> Iterator[Metric]:
        records, seconds = self._lag()
        yield GaugeMetricFamily(
            "metastore_view_lag_records",
            "changelog records the brokers hold that this node's view has not applied",
            value=records,
        )
        yield GaugeMetricFamily(
            "metastore_view_lag_seconds",
            "how far behind the view is: the age of the newest record it applied while "
            "records are waiting, 0 when it has applied everything",
            value=seconds,
        )
