"""The counters ``/metrics`` exposes: the engine's, the Iceberg purges', the cluster's."""

from __future__ import annotations

from aiohttp import web

from metastore.engine.committer import Committer
from metastore.engine.lanes import CommitLanes
from metastore.engine.object_cache import ObjectCache
from metastore.http.typedefs import CLUSTER, ICEBERG, LEASER, METASTORE, PERSISTENCE, ROUTING_STATS
from metastore.native.gc_routes import gc_stats
from metastore.persistence.rocksdb import RocksDBPersistence


def engine_stats(
    app: web.Application, lanes: CommitLanes, committer: Committer, cache: ObjectCache
) -> dict[str, tuple[str, str, float]]:
    """Name -> (type, help, value), read when ``/metrics`` is asked (the Iceberg services
    and the cluster node are read then: both are set once the node has started)."""
    stats: dict[str, tuple[str, str, float]] = {
        "metastore_commits_total": ("counter", "commits acknowledged", lanes.commits),
        "metastore_commit_batches_total": (
            "counter",
            "commit batches: one ref's commits under one compare-and-swap",
            lanes.batches,
        ),
        "metastore_cas_retries_total": ("counter", "lost compare-and-swaps", committer.cas_retries),
        "metastore_write_failures_total": (
            "counter",
            "durable writes the store failed (their commits' outcome unknown)",
            committer.write_failures.total,
        ),
        "metastore_cache_hits_total": ("counter", "object cache hits", cache.hits),
        "metastore_cache_misses_total": ("counter", "object cache misses", cache.misses),
        "metastore_cache_bytes": ("gauge", "bytes of cached objects", cache.size_bytes),
    }
    leaser = app.get(LEASER)
    if leaser is not None:
        stats["metastore_node_id_lease_seconds"] = (
            "gauge",
            "seconds this node may still mint ids without a renewal (0: it writes nothing)",
            round(leaser.writes_for_s(), 3),
        )
        stats["metastore_node_id_leases_lost_total"] = (
            "counter",
            "node-id leases lost (another is leased at once: see the logs)",
            leaser.lost,
        )
    persistence = app.get(PERSISTENCE)
    if isinstance(persistence, RocksDBPersistence):  # embedded, --fsync: the group syncs
        syncs = ("counter", "WAL fsyncs made for commits", persistence.syncs)
        stats["metastore_wal_syncs_total"] = syncs
    metastore = app.get(METASTORE)
    if metastore is not None:
        stats |= gc_stats(metastore)
        stats["metastore_point_reads_on_loop_total"] = (
            "counter",
            "point reads answered on the event loop from memory",
            metastore.point_reads_on_loop,
        )
        stats["metastore_point_reads_in_thread_total"] = (
            "counter",
            "point reads run in a worker thread: memory lacked what they needed",
            metastore.point_reads_in_thread,
        )
    iceberg = app.get(ICEBERG)
    if iceberg is not None:
        stats |= iceberg.tables.purges.stats()
        stats |= iceberg.reports.stats()
    node = app.get(CLUSTER)
    if node is not None:
        routing = app[ROUTING_STATS]
        view = node.view.stats
        stats |= {
            "metastore_view_records_total": (
                "counter",
                "changelog records consumed",
                view.consumed,
            ),
            "metastore_view_dropped_total": (
                "counter",
                "changelog records the view dropped (stale epoch or HEAD)",
                node.store.dropped,
            ),
            "metastore_owned_partitions": ("gauge", "partitions this node owns", len(node.owned())),
            "metastore_forwarded_total": ("counter", "writes forwarded", routing["forwarded"]),
            "metastore_forward_retries_total": (
                "counter",
                "forwards retried (not owner / unreachable)",
                routing["forward_retries"],
            ),
        }
    return stats
