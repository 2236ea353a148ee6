"""A node whose startup fails closes what it had opened: each cleanup context whose
startup finished is cleaned up, in reverse order, before the error leaves ``run``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from metastore.config.server_config import ServerConfig
from metastore.engine.leases import lease_key
from metastore.http.typedefs import LEASER
from metastore.node import server
from metastore.node.app import create_app
from metastore.persistence.rocksdb import RocksDBPersistence


class LateFailure(Exception):
    pass


def test_a_failed_startup_releases_the_lease_and_closes_the_database(tmp_path: Path) -> None:
    config = ServerConfig(data_dir=tmp_path)  # fails before it listens
    app = create_app(config)
    leased: list[int] = []

    async def fails(app: web.Application) -> AsyncIterator[None]:
        lease = app[LEASER].lease  # every context before this one has started
        assert lease is not None
        leased.append(lease.node_id)
        raise LateFailure("a resource after the metastore's could not start")
        yield

    app.cleanup_ctx.append(fails)
    with pytest.raises(LateFailure):
        server.run(app, config)
    assert len(leased) == 1

    # RocksDB locks its directory: this open succeeds only if the node closed it
    persistence = RocksDBPersistence(tmp_path / "rocksdb")
    try:
        assert persistence.get_updateable(lease_key(leased[0])) is None  # released
    finally:
        persistence.close()
