"""The real commit engine over a persistence, wired as a node wires it.

Tests that read or write a store directly (a stopped node's RocksDB, records an
earlier version left, a fresh database with empty caches) build it here, so they
run the same committer, lanes and service a node runs.
"""

from __future__ import annotations

from concurrent.futures import Executor

from metastore.catalog.service import Metastore
from metastore.engine.commits import EngineLimits
from metastore.engine.committer import Committer
from metastore.engine.lanes import CommitLanes
from metastore.engine.object_cache import ObjectCache
from metastore.model.codec import default_codec
from metastore.model.ids import SnowflakeGenerator
from metastore.persistence.base import Persistence
from metastore.util.clock import SystemClock


def build_engine(
    persistence: Persistence,
    executor: Executor,
    *,
    node_id: int = 1,
    limits: EngineLimits | None = None,
) -> tuple[Metastore, CommitLanes]:
    """The service over ``persistence`` and its lanes (close them when done); commits
    run on ``executor`` and take snowflake ids of ``node_id``."""
    codec, clock = default_codec(), SystemClock()
    holder: list[Metastore] = []
    committer = Committer(
        persistence,
        codec,
        lambda tenant, catalog: holder[0].objects(tenant, catalog),
        SnowflakeGenerator(node_id, clock),
        clock,
        limits if limits is not None else EngineLimits(),
        require_tenant=True,
    )
    lanes = CommitLanes(committer, executor)
    metastore = Metastore(persistence, codec, ObjectCache(), lanes)
    holder.append(metastore)
    return metastore, lanes
