"""Native API: this node and, in cluster mode, who owns which partition.

Operators (and the web console's cluster page) need to see at a glance which node
owns each partition of the changelog topics, what this node's view has applied and
whether it has caught up, without reading a consumer group from the broker. Everything
here comes from the node's own view: the owners' barriers it has applied name each
partition's latest owner and when it took over. Service admins only: node URLs are
the cluster's topology.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from metastore.cluster.cluster_node import ClusterNode
from metastore.http.typedefs import CLUSTER, LEASER, METASTORE

routes = web.RouteTableDef()

CLUSTER_STATUS = "/api/v1/admin/cluster"


def _partitions(node: ClusterNode) -> list[dict[str, Any]]:
    applied = node.view.applied_offsets()
    routes_ = node.view.routes()
    owned = set(node.owned())
    rows = []
    for partition in range(node.config.partitions):
        barrier = routes_.get(partition)
        rows.append(
            {
                "partition": partition,
                "owner": None if barrier is None else barrier.url,
                "owner-since-ms": None if barrier is None else barrier.created_at_us // 1000,
                "owned-here": partition in owned,
                "applied-offsets": {
                    "refs": applied.get(("refs", partition), -1),
                    "objects": applied.get(("objects", partition), -1),
                },
            }
        )
    return rows


def status(request: web.Request) -> dict[str, Any]:
    """The node's description (blocking reads of the view: call off the event loop)."""
    lease = request.app[LEASER].lease
    node = request.app.get(CLUSTER)
    body: dict[str, Any] = {
        "mode": "embedded" if node is None else "cluster",
        "node": {
            "node-id": lease.node_id if lease is not None else None,
            "writable": request.app[METASTORE].writable,
        },
    }
    if node is None:
        return body
    partitions = _partitions(node)
    nodes: dict[str, list[int]] = {}
    for row in partitions:
        if row["owner"] is not None:
            nodes.setdefault(row["owner"], []).append(row["partition"])
    lag_records, lag_seconds = node.view.lag()
    body["node"] |= {
        "url": node.url,
        "caught-up": node.caught_up.is_set(),
        "view-lag-records": lag_records,
        "view-lag-seconds": round(lag_seconds, 3),
        "owned-partitions": node.owned(),
        "view-dropped": node.store.dropped,
    }
    body["partitions"] = partitions
    body["nodes"] = [{"url": url, "partitions": owned} for url, owned in sorted(nodes.items())]
    return body


@routes.get(CLUSTER_STATUS)
async def get_cluster(request: web.Request) -> web.Response:
    metastore = request.app[METASTORE]
    return web.json_response(await metastore.read(status, request))
