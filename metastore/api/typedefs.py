"""Typed application state: every shared object lives under one ``web.AppKey``."""

from __future__ import annotations

from collections.abc import Callable

import aiohttp
from aiohttp import web

from metastore.catalog_storage import CatalogStorage
from metastore.cluster.node import ClusterNode
from metastore.cluster.peer_auth import Peers
from metastore.config import ServerConfig
from metastore.leases import NodeLeaser
from metastore.quotas import TenantQuotas
from metastore.security.identity import Identity
from metastore.service import Metastore

CONFIG = web.AppKey("config", ServerConfig)
METASTORE = web.AppKey("metastore", Metastore)
LEASER = web.AppKey("leaser", NodeLeaser)
IDENTITY = web.AppKey("identity", Identity)  # principals, tokens, the auth checks
STORAGE = web.AppKey("storage", CatalogStorage)  # every catalog's storage (both APIs)
QUOTAS = web.AppKey("quotas", TenantQuotas)  # each tenant's quota (rate, entity counts)

Stats = Callable[[], dict[str, tuple[str, str, int]]]  # name -> (type, help, value)
STATS: web.AppKey[Stats] = web.AppKey("stats")
# bootstrap steps still running in the background (cluster mode): not ready until empty
PENDING: web.AppKey[set[str]] = web.AppKey("pending")

# cluster mode only
CLUSTER = web.AppKey("cluster", ClusterNode)
HTTP_CLIENT = web.AppKey("http_client", aiohttp.ClientSession)  # forwarded writes
PEERS = web.AppKey("peers", Peers)  # signs and checks node-to-node requests
ROUTING_STATS: web.AppKey[dict[str, int]] = web.AppKey("routing_stats")
