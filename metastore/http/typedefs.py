"""Typed application state: every shared object lives under one ``web.AppKey``.

The cleanup contexts (``metastore.node.contexts``) set them in startup order, each
from the ones set before it; handlers and middlewares only read them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import aiohttp
from aiohttp import web

from metastore.catalog.consistency import TokenScopes
from metastore.catalog.quotas import TenantQuotas
from metastore.catalog.rate import RateLimiter
from metastore.catalog.service import Metastore
from metastore.cluster.cluster_node import ClusterNode
from metastore.cluster.peer_auth import Peers
from metastore.config.server_config import ServerConfig
from metastore.engine.chains import Chains
from metastore.engine.lease_keeper import LeaseKeeper
from metastore.engine.leases import NodeLeaser
from metastore.engine.write_failures import WriteFailures
from metastore.http.documents import ApiDocuments
from metastore.http.shutdown import Shutdown
from metastore.iceberg.services import Iceberg
from metastore.persistence.base import Persistence
from metastore.security.authorizer import Authorizer
from metastore.security.identity import Identity
from metastore.storage.catalog_storage import CatalogStorage
from metastore.util.metrics import NodeMetrics

CONFIG = web.AppKey("config", ServerConfig)
PERSISTENCE: web.AppKey[Persistence] = web.AppKey("persistence")  # RocksDB, or the cluster's
COMMIT_THREADS = web.AppKey("commit_threads", ThreadPoolExecutor)  # durable writes, the lease
LEASER = web.AppKey("leaser", NodeLeaser)
LEASE_KEEPER = web.AppKey("lease_keeper", LeaseKeeper)  # renewals, a lease again after a loss
METASTORE = web.AppKey("metastore", Metastore)
WRITE_FAILURES = web.AppKey("write_failures", WriteFailures)  # the store's (``/health``)
STORAGE = web.AppKey("storage", CatalogStorage)  # every catalog's storage (both APIs)
QUOTAS = web.AppKey("quotas", TenantQuotas)  # each tenant's quota (rate, entity counts)
IDENTITY = web.AppKey("identity", Identity)  # principals, tokens, the auth checks
AUTHORIZER = web.AppKey("authorizer", Authorizer)  # every route's check, listings' filters
ICEBERG = web.AppKey("iceberg", Iceberg)  # the Iceberg REST layer's services
RATES = web.AppKey("rates", RateLimiter)  # every tenant's request bucket on this node
SCOPES = web.AppKey("token_scopes", TokenScopes)  # consistency tokens' tenant tags

Stats = Callable[[], dict[str, tuple[str, str, float]]]  # name -> (type, help, value)
METRICS = web.AppKey("metrics", NodeMetrics)  # the histograms (``metastore.util.metrics``)
API_DOCUMENTS = web.AppKey("api_documents", ApiDocuments)  # OpenAPI documents, built once
STATS: web.AppKey[Stats] = web.AppKey("stats")
# bootstrap steps still running in the background (cluster mode): not ready until empty
PENDING: web.AppKey[set[str]] = web.AppKey("pending")
SHUTDOWN = web.AppKey("shutdown", Shutdown)  # the server's stop, which the node may ask for
# set on shutdown: every open change-feed stream ends (``metastore.native.event_routes``)
FEED_CLOSING = web.AppKey("feed_closing", asyncio.Event)
FEED_CHAINS = web.AppKey("feed_chains", Chains)  # commit ids by sequence, as walked

# cluster mode only
CLUSTER = web.AppKey("cluster", ClusterNode)
HTTP_CLIENT = web.AppKey("http_client", aiohttp.ClientSession)  # forwarded writes
PEERS = web.AppKey("peers", Peers)  # signs and checks node-to-node requests
ROUTING_STATS: web.AppKey[dict[str, int]] = web.AppKey("routing_stats")
