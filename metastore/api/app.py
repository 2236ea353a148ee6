"""``create_app(config)``: the embedded metastore node as an aiohttp application.

Every resource is opened in a ``cleanup_ctx`` so it is closed iff it was opened,
in reverse order, on graceful shutdown: the lanes drain their in-flight batches,
the node-id lease is released, RocksDB is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Middleware

from metastore.api import internal
from metastore.api.access import setup_authz
from metastore.api.bootstrap import bootstrapping
from metastore.api.identity import setup_identity
from metastore.api.middlewares import authenticate, errors, read_body
from metastore.api.peers import authenticate_peers, peers_from_config
from metastore.api.routes import setup_routes
from metastore.api.routing import route_writes
from metastore.api.tenancy import SCOPES, setup_tenancy
from metastore.api.typedefs import (
    CLUSTER,
    CONFIG,
    HTTP_CLIENT,
    LEASER,
    METASTORE,
    PEERS,
    PENDING,
    QUOTAS,
    ROUTING_STATS,
    STATS,
    STORAGE,
)
from metastore.cache import ObjectCache
from metastore.catalog_storage import CatalogStorage, NodeStorage
from metastore.clock import SystemClock
from metastore.cluster.config import ClusterConfig
from metastore.cluster.node import ClusterNode
from metastore.cluster.persistence import KafkaPersistence
from metastore.codec import Codec, default_codec
from metastore.commits import Committer, EngineLimits
from metastore.config import ServerConfig
from metastore.consistency import ConsistencyToken
from metastore.errors import AlreadyExists, MetastoreError
from metastore.iceberg.context import ICEBERG
from metastore.iceberg.setup import setup_iceberg
from metastore.ids import SnowflakeGenerator
from metastore.index import IndexLimits
from metastore.lanes import CommitLanes
from metastore.leases import NodeLeaser
from metastore.persistence.base import Persistence
from metastore.persistence.rocksdb import RocksDBPersistence
from metastore.quotas import TenantEntityLimits, TenantQuotas, quota_defaults
from metastore.service import Metastore
from metastore.store import CatalogObjects

log = logging.getLogger(__name__)

ConsistencyHook = Callable[[str, str], ConsistencyToken | None]


def create_app(config: ServerConfig) -> web.Application:
    middlewares: list[Middleware] = [errors, read_body]
    if config.cluster_mode:
        # node requests are proven (cluster secret, mTLS) before anything acts on them
        middlewares += [authenticate_peers, route_writes]
    middlewares.append(authenticate)  # after the routing: a forwarded write is checked at its owner
    app = web.Application(middlewares=middlewares, client_max_size=config.max_body_bytes)
    app[CONFIG] = config
    if config.cluster_mode:
        app[PEERS] = peers_from_config(config)
    app[PENDING] = set()
    app.cleanup_ctx.append(_metastore_ctx)
    setup_identity(app)
    setup_routes(app)
    if config.cluster_mode:
        app.add_routes(internal.routes)
    setup_iceberg(app)
    setup_tenancy(app)  # after authentication: the tenant's tokens and request rate
    setup_authz(app)  # after authentication: every route checked before its handler
    return app


def cluster_config(config: ServerConfig) -> ClusterConfig:
    return ClusterConfig(
        bootstrap=config.kafka,
        prefix=config.topic_prefix,
        cluster=config.cluster_id,
        partitions=config.partitions,
        session_timeout_ms=config.session_timeout_ms,
        kafka_properties=config.kafka_client_properties,
    )


async def _open_cluster(
    app: web.Application, codec: Codec, clock: SystemClock
) -> tuple[Persistence, ConsistencyHook, ClusterNode]:
    """Check the topics, catch the view up, join the owners' group (blocking: a thread)."""
    config = app[CONFIG]
    node = await asyncio.to_thread(
        ClusterNode, cluster_config(config), config.data_dir, config.url, codec, clock.now_us
    )
    try:
        await asyncio.to_thread(node.start)
    except BaseException:
        await asyncio.to_thread(node.stop)
        raise
    app[CLUSTER] = node
    app[ROUTING_STATS] = {"forwarded": 0, "forward_retries": 0}

    scopes = app[SCOPES]

    def consistency(tenant: str, catalog: str) -> ConsistencyToken:
        partition = node.partition_of(tenant, catalog)
        return ConsistencyToken(partition, node.store.offset("refs", partition), scopes.of(tenant))

    return KafkaPersistence(node, app[PEERS]), consistency, node


async def _metastore_ctx(app: web.Application) -> AsyncIterator[None]:
    config = app[CONFIG]
    loop = asyncio.get_running_loop()
    config.data_dir.mkdir(parents=True, exist_ok=True)
    codec = default_codec()
    clock = SystemClock()
    persistence: Persistence
    consistency: ConsistencyHook | None = None
    node: ClusterNode | None = None
    if config.cluster_mode:
        persistence, consistency, node = await _open_cluster(app, codec, clock)
    else:
        persistence = await loop.run_in_executor(
            None, lambda: RocksDBPersistence(config.data_dir / "rocksdb", sync=config.fsync)
        )
    # A commit batch holds its thread for a whole durable write: an fsync (embedded), or
    # a Kafka transaction plus the owner's read-back (cluster), so every catalog
    # committing at once needs its own thread there.
    threads = 64 if node is not None else 4
    executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="commit")
    leaser = NodeLeaser(persistence, codec, clock, config.url, config.lease_seconds)
    client: aiohttp.ClientSession | None = None
    try:
        lease = await loop.run_in_executor(executor, leaser.acquire)
        cache = ObjectCache(config.cache_bytes)
        limits = EngineLimits(
            index=IndexLimits(config.index_embedded_bytes, config.index_stripe_bytes),
            max_object_bytes=config.max_object_bytes,
            recent_heads=config.recent_heads,
        )
        metastore: Metastore

        def objects(tenant: str, catalog: str) -> CatalogObjects:
            return metastore.objects(tenant, catalog)

        quotas = TenantQuotas(persistence, objects, quota_defaults(config))
        committer = Committer(
            persistence,
            codec,
            objects,
            SnowflakeGenerator(lease.node_id, clock),
            clock,
            limits,
            entity_limits=TenantEntityLimits(persistence, objects, quotas),
        )
        lanes = CommitLanes(committer, executor)
        metastore = Metastore(persistence, codec, cache, lanes, consistency=consistency)
        app[METASTORE] = metastore
        app[QUOTAS] = quotas
        storage = CatalogStorage(metastore, NodeStorage.of(config))
        app[STORAGE] = storage
        app[LEASER] = leaser
        app[STATS] = lambda: _stats(app, lanes, committer, cache)
        if node is not None:
            client = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=3 * node.config.transaction_timeout_s + 5)
            )
            app[HTTP_CLIENT] = client
        renewals = asyncio.create_task(_renew(leaser, metastore, executor))
        recording: asyncio.Task[None] | None = None
        try:
            async with bootstrapping(
                partial(_bootstrap, metastore, storage, config),
                "default tenant and catalog",
                background=node is not None,
                pending=app[PENDING],
            ):
                if node is None:
                    await storage.record_missing(retry=False)
                else:  # only each catalog's owner can write: whichever node it is, in time
                    recording = asyncio.create_task(_record_storage(storage))
                log.info(
                    "%s metastore ready: node id %d, data in %s%s",
                    "cluster" if node is not None else "embedded",
                    lease.node_id,
                    config.data_dir,
                    f", kafka {config.kafka}" if node is not None else f" (fsync={config.fsync})",
                )
                yield
        finally:
            for task in (renewals, recording):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            await lanes.close()
            if isinstance(persistence, KafkaPersistence):
                # releasing is a courtesy (the lease expires anyway): never wait long for
                # an owner of the system partition while the cluster is rebalancing
                persistence.remote_timeout_s = 3.0
            await loop.run_in_executor(executor, leaser.release)
    finally:
        if client is not None:
            await client.close()
        executor.shutdown(wait=True)
        persistence.close()
        if node is not None:
            await asyncio.to_thread(node.stop)


def _stats(
    app: web.Application, lanes: CommitLanes, committer: Committer, cache: ObjectCache
) -> dict[str, tuple[str, str, int]]:
    stats = {
        "metastore_commits_total": ("counter", "commits acknowledged", lanes.commits),
        "metastore_commit_batches_total": ("counter", "durable writes", lanes.batches),
        "metastore_cas_retries_total": ("counter", "lost compare-and-swaps", committer.cas_retries),
        "metastore_cache_hits_total": ("counter", "object cache hits", cache.hits),
        "metastore_cache_misses_total": ("counter", "object cache misses", cache.misses),
        "metastore_cache_bytes": ("gauge", "bytes of cached objects", cache.size_bytes),
    }
    iceberg = app.get(ICEBERG)
    if iceberg is not None:
        stats |= iceberg.tables.purges.stats()
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


async def _bootstrap(metastore: Metastore, storage: CatalogStorage, config: ServerConfig) -> None:
    """A fresh deployment serves a default tenant and catalog, so clients need no setup;
    the default catalog's storage is the node's warehouse settings."""
    tenant, catalog = config.default_tenant, config.default_catalog
    with contextlib.suppress(AlreadyExists):
        await metastore.create_tenant(tenant, {}, "system")
    with contextlib.suppress(AlreadyExists):
        seed = storage.create_changes(storage.seed(tenant, catalog))
        await metastore.create_catalog(tenant, catalog, {}, "system", extra=seed)


async def _record_storage(storage: CatalogStorage) -> None:
    """Cluster mode: record the storage of catalogs from before storage was recorded
    (they read as their seed meanwhile, so a failure here costs nothing but the log)."""
    try:
        written = await storage.record_missing(retry=True)
    except MetastoreError as exc:
        log.warning("could not record the storage of older catalogs: %s", exc.message)
        return
    if written:
        log.info("recorded the storage of %d catalogs created before storage was recorded", written)


async def _renew(leaser: NodeLeaser, metastore: Metastore, executor: ThreadPoolExecutor) -> None:
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(leaser.renew_interval_s)
        if not await loop.run_in_executor(executor, leaser.renew):
            # Another node may now mint IDs with our node id: never write again.
            metastore.writable = False
            log.critical("node-id lease lost: this node is now read-only; restart it")
            return
