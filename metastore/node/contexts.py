"""The node's resources, one aiohttp cleanup context each.

aiohttp enters the contexts in the order ``metastore.node.app.create_app`` lists
them and, on shutdown, leaves the ones it entered in reverse order: a context's
cleanup runs iff its startup finished, so a node that fails halfway through
starting closes exactly what it opened. Each context reads what it needs from the
``AppKey``s the contexts before it set (``metastore.http.typedefs``) and sets its
own; none refers to anything created after it.

Startup order (cluster mode adds the two marked): the collector's pause timer, the
cluster node (*), the persistence, the commit threads, the HTTP client for forwarded
writes (*), the node-id lease, the commit engine and services, the lease renewals,
the bootstrap records, then identity, the Iceberg services and the authorizer.
Shutdown in reverse drains the lanes before the lease is released and releases it
before the persistence closes.
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

from metastore.catalog.consistency import ConsistencyToken
from metastore.catalog.quotas import TenantEntityLimits, TenantQuotas
from metastore.catalog.service import Metastore
from metastore.cluster.cluster_config import ClusterConfig
from metastore.cluster.cluster_node import ClusterNode
from metastore.cluster.cluster_persistence import KafkaPersistence
from metastore.cluster.topics import ensure_safe
from metastore.config.server_config import ServerConfig
from metastore.engine.commits import EngineLimits
from metastore.engine.committer import Committer
from metastore.engine.lanes import CommitLanes
from metastore.engine.lease_keeper import LeaseKeeper
from metastore.engine.leases import NodeLeaser
from metastore.engine.object_cache import ObjectCache
from metastore.engine.objects import CatalogObjects
from metastore.errors import AlreadyExists, MetastoreError
from metastore.http.shutdown import Shutdown
from metastore.http.typedefs import (
    AUTHORIZER,
    CLUSTER,
    COMMIT_THREADS,
    CONFIG,
    HTTP_CLIENT,
    IDENTITY,
    LEASE_KEEPER,
    LEASER,
    METASTORE,
    METRICS,
    PEERS,
    PENDING,
    PERSISTENCE,
    QUOTAS,
    ROUTING_STATS,
    SCOPES,
    SHUTDOWN,
    STATS,
    STORAGE,
    WRITE_FAILURES,
)
from metastore.model.codec import default_codec
from metastore.model.ids import SnowflakeGenerator
from metastore.model.index import IndexLimits
from metastore.node.bootstrap import bootstrapping
from metastore.node.stats import engine_stats
from metastore.persistence.rocksdb import RocksDBPersistence
from metastore.security.authorizer import Authorizer
from metastore.storage.catalog_storage import CatalogStorage
from metastore.util.clock import SystemClock
from workers.owner import PartitionOwner

log = logging.getLogger(__name__)

Context = Callable[[web.Application], AsyncIterator[None]]
ConsistencyHook = Callable[[str, str], ConsistencyToken | None]


# --- storage ------------------------------------------------------------------------------


def cluster_config(config: ServerConfig) -> ClusterConfig:
    return ClusterConfig(
        bootstrap=config.kafka,
        prefix=config.topic_prefix,
        cluster=config.cluster_id,
        partitions=config.partitions,
        session_timeout_ms=config.session_timeout_ms,
        publish_events=config.publish_events,
        kafka_properties=config.kafka_client_properties,
        broker_profile=config.kafka_broker_profile,
    )


async def collector_pauses_ctx(app: web.Application) -> AsyncIterator[None]:
    """The garbage collector's pauses are timed from the node's first context to its
    last (``metastore.util.collector_pauses``), startup's own collections included."""
    pauses = app[METRICS].collector_pauses
    pauses.install()
    try:
        yield
    finally:
        pauses.uninstall()


async def cluster_ctx(app: web.Application) -> AsyncIterator[None]:
    """Cluster mode: check the topics, catch the view up, join the owners' group
    (blocking: a thread); stopped last, after everything that writes through it.

    The topics are checked before the view is opened (the node checks them again as
    it starts): a node that cannot reach its brokers, or whose topics would lose data,
    leaves nothing on disk, and ``metastore serve`` removes the data directory it made."""
    config = app[CONFIG]
    await asyncio.to_thread(ensure_safe, cluster_config(config))
    config.data_dir.mkdir(parents=True, exist_ok=True)
    node = await asyncio.to_thread(
        ClusterNode,
        cluster_config(config),
        config.data_dir,
        config.url,
        default_codec(),
        SystemClock().now_us,
        PartitionOwner,
        app[METRICS].owner,
    )
    try:
        await asyncio.to_thread(node.start)
        app[CLUSTER] = node
        app[METRICS].watch_view(node.view.lag)
        app[ROUTING_STATS] = {"forwarded": 0, "forward_retries": 0}
        shutdown = app.get(SHUTDOWN)  # absent when the app runs without the server
        if shutdown is not None:  # a view that stops stops the node (``http.shutdown``)
            node.view.on_failure = partial(_view_stopped, shutdown)
            if node.view.failure is not None:  # it stopped before it was watched
                _view_stopped(shutdown, node.view.failure)
        yield
    finally:
        await asyncio.to_thread(node.stop)


def _view_stopped(shutdown: Shutdown, failure: BaseException) -> None:
    shutdown.request(
        f"its view of the log stopped ({failure}): its partitions go to the other nodes; "
        "restart it once the cause is fixed"
    )


async def persistence_ctx(app: web.Application) -> AsyncIterator[None]:
    """RocksDB in the data directory (embedded), or the cluster node's view and owners."""
    config = app[CONFIG]
    node = app.get(CLUSTER)
    if node is not None:
        persistence: RocksDBPersistence | KafkaPersistence = KafkaPersistence(node, app[PEERS])
    else:
        config.data_dir.mkdir(parents=True, exist_ok=True)
        path = config.data_dir / "rocksdb"
        persistence = await asyncio.to_thread(RocksDBPersistence, path, sync=config.fsync)
    app[PERSISTENCE] = persistence
    try:
        yield
    finally:
        try:
            persistence.close()
        except Exception as exc:  # a store failing its writes cannot flush: said, not raised
            log.error("closing the store failed: %s: %s", type(exc).__name__, exc)


async def commit_threads_ctx(app: web.Application) -> AsyncIterator[None]:
    """The threads durable writes and the lease run in.

    A commit batch holds its thread for a whole durable write: a group sync of the
    WAL (embedded; the batches waiting on one sync share it, so more threads mean
    fuller syncs), or a Kafka transaction plus the owner's read-back (cluster), so
    every catalog committing at once needs its own thread there.
    """
    threads = 64 if app[CONFIG].cluster_mode else 16
    executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="commit")
    app[COMMIT_THREADS] = executor
    try:
        yield
    finally:
        executor.shutdown(wait=True)


async def http_client_ctx(app: web.Application) -> AsyncIterator[None]:
    """Cluster mode: the client that forwards writes to their partition's owner."""
    node = app[CLUSTER]
    timeout = aiohttp.ClientTimeout(total=3 * node.config.transaction_timeout_s + 5)
    client = aiohttp.ClientSession(timeout=timeout)
    app[HTTP_CLIENT] = client
    try:
        yield
    finally:
        await client.close()


# --- the node id and the engine -----------------------------------------------------------


async def lease_ctx(app: web.Application) -> AsyncIterator[None]:
    """The node id this node mints ids with, leased until shutdown, and what keeps it
    (``metastore.engine.lease_keeper``)."""
    config, persistence = app[CONFIG], app[PERSISTENCE]
    executor = app[COMMIT_THREADS]
    loop = asyncio.get_running_loop()
    codec, clock = default_codec(), SystemClock()
    leaser = NodeLeaser(persistence, codec, clock, config.url, config.lease_seconds)
    await loop.run_in_executor(executor, leaser.acquire)
    app[LEASER] = leaser
    app[LEASE_KEEPER] = LeaseKeeper(leaser, executor)
    try:
        yield
    finally:
        if isinstance(persistence, KafkaPersistence):
            # releasing is a courtesy (the lease expires anyway): never wait long for
            # an owner of the system partition while the cluster is rebalancing
            persistence.remote_timeout_s = 3.0
        await loop.run_in_executor(executor, leaser.release)


async def engine_ctx(app: web.Application) -> AsyncIterator[None]:
    """The commit engine (lanes over a ``Committer``) and the services over it; the
    lanes drain their batches in flight on shutdown."""
    config, persistence, leaser = app[CONFIG], app[PERSISTENCE], app[LEASER]
    lease = leaser.lease
    assert lease is not None, "lease_ctx acquired it"
    codec, clock = default_codec(), SystemClock()
    ids = SnowflakeGenerator(lease.node_id, clock)
    leaser.mint_with(ids)
    cache = ObjectCache(config.cache_bytes)
    node = app.get(CLUSTER)
    if node is not None:  # objects a sweep deleted, as this node's view applies them
        node.store.on_deleted = cache.discard
    objects = partial(CatalogObjects, persistence, codec, cache)
    quotas = TenantQuotas(persistence, objects, config.quota_defaults())
    limits = EngineLimits(
        index=IndexLimits(config.index_embedded_bytes, config.index_stripe_bytes),
        max_object_bytes=config.max_object_bytes,
        recent_heads=config.recent_heads,
    )
    committer = Committer(
        persistence,
        codec,
        objects,
        ids,
        clock,
        limits,
        entity_limits=TenantEntityLimits(persistence, objects, quotas),
        write_time=app[METRICS].commits.durable_write.observe,
        require_tenant=True,
    )
    lanes = CommitLanes(committer, app[COMMIT_THREADS], metrics=app[METRICS].commits)
    metastore = Metastore(
        persistence,
        codec,
        cache,
        lanes,
        lease=app[LEASE_KEEPER],
        consistency=_consistency(app),
    )
    app[METASTORE] = metastore
    app[WRITE_FAILURES] = committer.write_failures
    app[QUOTAS] = quotas
    metastore.tenant_changed.append(quotas.forget)
    app[STORAGE] = CatalogStorage(metastore, config.node_storage())
    app[STATS] = lambda: engine_stats(app, lanes, committer, cache)
    try:
        yield
    finally:
        await lanes.close()


def _consistency(app: web.Application) -> ConsistencyHook | None:
    """Cluster mode: the token a write's answer carries (its partition's offset in this
    node's view, tagged with its tenant)."""
    node = app.get(CLUSTER)
    if node is None:
        return None
    scopes = app[SCOPES]

    def consistency(tenant: str, catalog: str) -> ConsistencyToken:
        partition = node.partition_of(tenant, catalog)
        return scopes.token(tenant, partition, node.store.offset("refs", partition))

    return consistency


async def renewal_ctx(app: web.Application) -> AsyncIterator[None]:
    """Renew the node-id lease, and lease one again after a loss."""
    renewals = asyncio.create_task(app[LEASE_KEEPER].run())
    try:
        yield
    finally:
        renewals.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await renewals


# --- what a fresh deployment needs ----------------------------------------------------------


async def bootstrap_ctx(app: web.Application) -> AsyncIterator[None]:
    """The default tenant and catalog (``metastore.node.bootstrap``: before serving when
    embedded, in the background in a cluster), and the storage of catalogs from before
    storage was recorded."""
    config, metastore, storage = app[CONFIG], app[METASTORE], app[STORAGE]
    cluster = config.cluster_mode
    recording: asyncio.Task[None] | None = None
    try:
        async with bootstrapping(
            partial(_bootstrap, metastore, storage, config),
            "default tenant and catalog",
            background=cluster,
            pending=app[PENDING],
        ):
            if not cluster:
                await storage.record_missing(retry=False)
            else:  # only each catalog's owner can write: whichever node it is, in time
                recording = asyncio.create_task(_record_storage(storage))
            lease = app[LEASER].lease
            assert lease is not None, "lease_ctx acquired it"
            log.info(
                "%s metastore ready: node id %d, data in %s%s",
                "cluster" if cluster else "embedded",
                lease.node_id,
                config.data_dir,
                f", kafka {config.kafka}" if cluster else f" (fsync={config.fsync})",
            )
            yield
    finally:
        if recording is not None:
            recording.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await recording


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


# --- access -------------------------------------------------------------------------------


async def authorizer_ctx(app: web.Application) -> AsyncIterator[None]:
    """The authorizer (after the metastore and identity): every route's check."""
    app[AUTHORIZER] = Authorizer(app[METASTORE], app[IDENTITY].auth.is_service_admin)
    yield
