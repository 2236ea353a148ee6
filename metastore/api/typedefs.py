"""Typed application state: every shared object lives under one ``web.AppKey``."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from metastore.config import ServerConfig
from metastore.leases import NodeLeaser
from metastore.service import Metastore

CONFIG = web.AppKey("config", ServerConfig)
METASTORE = web.AppKey("metastore", Metastore)
LEASER = web.AppKey("leaser", NodeLeaser)

Stats = Callable[[], dict[str, tuple[str, str, int]]]  # name -> (type, help, value)
STATS: web.AppKey[Stats] = web.AppKey("stats")
