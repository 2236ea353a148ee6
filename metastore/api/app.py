"""``create_app(config)``: the embedded metastore node as an aiohttp application.

Every resource is opened in a ``cleanup_ctx`` so it is closed iff it was opened,
in reverse order, on graceful shutdown: the lanes drain their in-flight batches,
the node-id lease is released, RocksDB is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

from metastore.api.middlewares import errors
from metastore.api.routes import setup_routes
from metastore.api.typedefs import CONFIG, LEASER, METASTORE, STATS
from metastore.cache import ObjectCache
from metastore.clock import SystemClock
from metastore.codec import default_codec
from metastore.commits import Committer, EngineLimits
from metastore.config import ServerConfig
from metastore.errors import AlreadyExists
from metastore.iceberg.setup import setup_iceberg
from metastore.ids import SnowflakeGenerator
from metastore.index import IndexLimits
from metastore.lanes import CommitLanes
from metastore.leases import NodeLeaser
from metastore.persistence.rocksdb import RocksDBPersistence
from metastore.service import Metastore

log = logging.getLogger(__name__)


def create_app(config: ServerConfig) -> web.Application:
    app = web.Application(middlewares=[errors], client_max_size=config.max_body_bytes)
    app[CONFIG] = config
    app.cleanup_ctx.append(_metastore_ctx)
    setup_routes(app)
    setup_iceberg(app)
    return app


async def _metastore_ctx(app: web.Application) -> AsyncIterator[None]:
    config = app[CONFIG]
    loop = asyncio.get_running_loop()
    config.data_dir.mkdir(parents=True, exist_ok=True)
    persistence = await loop.run_in_executor(
        None, lambda: RocksDBPersistence(config.data_dir / "rocksdb", sync=config.fsync)
    )
    codec = default_codec()
    clock = SystemClock()
    executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="commit")
    leaser = NodeLeaser(
        persistence, codec, clock, f"{socket.gethostname()}:{os.getpid()}", config.lease_seconds
    )
    try:
        lease = await loop.run_in_executor(executor, leaser.acquire)
        cache = ObjectCache(config.cache_bytes)
        limits = EngineLimits(
            index=IndexLimits(config.index_embedded_bytes, config.index_stripe_bytes),
            max_object_bytes=config.max_object_bytes,
            recent_heads=config.recent_heads,
        )
        metastore: Metastore
        committer = Committer(
            persistence,
            codec,
            lambda tenant, catalog: metastore.objects(tenant, catalog),
            SnowflakeGenerator(lease.node_id, clock),
            clock,
            limits,
        )
        lanes = CommitLanes(committer, executor)
        metastore = Metastore(persistence, codec, cache, lanes)
        app[METASTORE] = metastore
        app[LEASER] = leaser
        app[STATS] = lambda: {
            "metastore_commits_total": ("counter", "commits acknowledged", lanes.commits),
            "metastore_commit_batches_total": ("counter", "durable writes", lanes.batches),
            "metastore_cas_retries_total": (
                "counter",
                "lost compare-and-swaps",
                committer.cas_retries,
            ),
            "metastore_cache_hits_total": ("counter", "object cache hits", cache.hits),
            "metastore_cache_misses_total": ("counter", "object cache misses", cache.misses),
            "metastore_cache_bytes": ("gauge", "bytes of cached objects", cache.size_bytes),
        }
        await _bootstrap(metastore, config)
        renewals = asyncio.create_task(_renew(leaser, metastore, executor))
        log.info(
            "embedded metastore ready: node id %d, data in %s (fsync=%s)",
            lease.node_id,
            config.data_dir,
            config.fsync,
        )
        try:
            yield
        finally:
            renewals.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewals
            await lanes.close()
            await loop.run_in_executor(executor, leaser.release)
    finally:
        executor.shutdown(wait=True)
        persistence.close()


async def _bootstrap(metastore: Metastore, config: ServerConfig) -> None:
    """A fresh node serves a default tenant and catalog, so clients work with no setup."""
    with contextlib.suppress(AlreadyExists):
        await metastore.create_tenant(config.default_tenant, {}, "system")
    with contextlib.suppress(AlreadyExists):
        await metastore.create_catalog(config.default_tenant, config.default_catalog, {}, "system")


async def _renew(leaser: NodeLeaser, metastore: Metastore, executor: ThreadPoolExecutor) -> None:
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(leaser.renew_interval_s)
        if not await loop.run_in_executor(executor, leaser.renew):
            # Another node may now mint IDs with our node id: never write again.
            metastore.writable = False
            log.critical("node-id lease lost: this node is now read-only; restart it")
            return
