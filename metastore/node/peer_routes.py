"""Node-to-node endpoints (cluster mode only): not part of the public API.

The server side of ``metastore.cluster.protocol``, which defines the paths and
the bodies; ``metastore.http.peers`` has checked the calling node's signature
before a handler here runs.

``POST /internal/v1/updateables`` runs a compare-and-swap on an updateable object
(a node-id lease) at the owner of its partition: a starting node must lease its
snowflake node id before it can serve, and it may not own the system partition.
Only the owner answers; any other node answers 503 ``NotOwnerException``.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from metastore.cluster import protocol
from metastore.cluster.changelog_records import Role
from metastore.cluster.cluster_node import ClusterNode
from metastore.cluster.view import digest
from metastore.errors import NotOwner, RefConditionFailed
from metastore.http.typedefs import CLUSTER
from metastore.http.validation import body_of

routes = web.RouteTableDef()


@routes.post(protocol.UPDATEABLES_PATH)
async def cas_updateable(request: web.Request) -> web.Response:
    node = request.app[CLUSTER]
    cas = protocol.UpdateableCas.decode(body_of(request))
    partition = node.partition_of(cas.key.tenant, cas.key.catalog)
    owner = node.local_owner(partition)
    if owner is None or not owner.ready:
        raise NotOwner(f"{node.url} does not own partition {partition}", partition)
    try:
        await asyncio.wrap_future(owner.submit_updateable(cas.key, cas.expected, cas.new))
    except RefConditionFailed:
        return web.json_response(protocol.cas_answer(False))
    return web.json_response(protocol.cas_answer(True))


@routes.get(protocol.VIEW_PATH)
async def view_state(request: web.Request) -> web.Response:
    """This node's view: applied offsets, dropped records and a digest of its data.

    The digest reads the whole view (a maintenance and test aid, not for hot paths);
    two nodes at the same offsets must report the same digest."""
    node = request.app[CLUSTER]
    offsets, fingerprint = await asyncio.to_thread(_offsets_and_digest, node)
    body = {
        "offsets": {f"{role}/{p}": o for (role, p), o in sorted(offsets.items())},
        "digest": fingerprint,
        "dropped": node.store.dropped,
        "owned-partitions": node.owned(),
    }
    return web.json_response(body)


def _offsets_and_digest(node: ClusterNode) -> tuple[dict[tuple[Role, int], int], str]:
    """Offsets and digest from one consistent moment: retried while records arrive."""
    while True:
        before = node.store.offsets()
        fingerprint = digest(node.store)
        if node.store.offsets() == before:
            return before, fingerprint
