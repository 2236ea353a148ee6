"""Builders shared by the engine's and the service's tests: the real engine on the real
memory backend (their fixtures: ``tests/conftest.py``).

Nothing here is a mock. ``FaultyPersistence`` is a fault injector around the
real ``MemoryPersistence``: it can run a hook just before a write (to let a
"second process" commit in between) or fail the next write with an exception.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hypothesis import settings

from metastore.engine.commits import CommitRequest, EngineLimits, RefAction
from metastore.engine.committer import Committer
from metastore.engine.object_cache import ObjectCache
from metastore.engine.objects import CatalogObjects
from metastore.model.changes import CreateEntity
from metastore.model.codec import Codec, default_codec
from metastore.model.ids import SnowflakeGenerator
from metastore.model.index import IndexLimits
from metastore.model.keys import CATALOG_RECORD, EntityKey, Kind, ObjKey, RefKey
from metastore.model.requirements import Requirement
from metastore.persistence.base import Persistence, RefUpdate, StoredObject
from metastore.persistence.memory import MemoryPersistence
from metastore.util.clock import Clock, SystemClock

# Property tests assert properties, never time: Hypothesis's per-example deadline
# (200 ms by default) is a wall-clock assertion that a loaded 2-core runner can trip.
settings.register_profile("metastore", deadline=None)
settings.load_profile("metastore")

MAIN = RefKey("t1", "c1", "main")
SMALL_INDEX = IndexLimits(embedded_max=2048, stripe_max=4096)


class FaultyPersistence(MemoryPersistence):
    """The memory backend plus faults: a one-shot hook before a write, a one-shot raised
    error, and a gate that holds every write to one ref until the test opens it."""

    def __init__(self) -> None:
        super().__init__()
        self.before_write: Callable[[], None] | None = None
        self.fail_next: BaseException | None = None
        self.gate: tuple[RefKey, threading.Event] | None = None  # writes to the ref wait
        self.blocked = threading.Event()  # set when a write is waiting at the gate
        self.writes = 0

    def write(
        self,
        objects: Sequence[StoredObject],
        ref_update: RefUpdate | None = None,
        deletes: Sequence[ObjKey] = (),
    ) -> None:
        hook, self.before_write = self.before_write, None
        if hook is not None:
            hook()
        error, self.fail_next = self.fail_next, None
        if error is not None:
            raise error
        gate = self.gate
        if gate is not None and ref_update is not None and ref_update.key == gate[0]:
            self.blocked.set()
            assert gate[1].wait(10), "test never released the blocked write"
        super().write(objects, ref_update, deletes)
        self.writes += 1


@dataclass
class Node:
    """One "process": its own snowflake node id, object cache and committer."""

    persistence: Persistence
    committer: Committer
    cache: ObjectCache = field(default_factory=ObjectCache)
    codec: Codec = field(default_factory=default_codec)

    def objects(self, tenant: str = "t1", catalog: str = "c1") -> CatalogObjects:
        return CatalogObjects(self.persistence, self.codec, self.cache, tenant, catalog)


def make_node(
    persistence: Persistence,
    *,
    node_id: int = 1,
    limits: EngineLimits | None = None,
    clock: Clock | None = None,
    sleep: Callable[[float], None] | None = None,
) -> Node:
    codec = default_codec()
    cache = ObjectCache()
    clock = clock or SystemClock()

    def objects(tenant: str, catalog: str) -> CatalogObjects:
        return CatalogObjects(persistence, codec, cache, tenant, catalog)

    committer = Committer(
        persistence,
        codec,
        objects,
        SnowflakeGenerator(node_id, clock),
        clock,
        limits or EngineLimits(index=SMALL_INDEX),
        sleep=sleep or time.sleep,
    )
    return Node(persistence, committer, cache, codec)


def ns_key(*levels: str) -> EntityKey:
    return EntityKey.namespace_key(levels)


def table_key(namespace: tuple[str, ...], name: str) -> EntityKey:
    return EntityKey(Kind.TABLE, namespace, name)


def view_key(namespace: tuple[str, ...], name: str) -> EntityKey:
    return EntityKey(Kind.VIEW, namespace, name)


def create_request(*keys: EntityKey, requirements: tuple[Requirement, ...] = ()) -> CommitRequest:
    return CommitRequest(requirements, tuple(CreateEntity(k) for k in keys), operation="create")


def create_catalog_ref(committer: Committer, ref: RefKey = MAIN) -> int:
    """Create the catalog ref with its record; return the root commit id."""
    request = CommitRequest(
        changes=(CreateEntity(CATALOG_RECORD, {"owner": "test"}),),
        operation="create catalog",
        ref_action=RefAction.CREATE,
    )
    return committer.commit(ref, request).commit_id
