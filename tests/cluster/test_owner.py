"""A partition owner on a real broker: barrier, group-committed transactions, fencing."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest

from metastore.cluster import topics
from metastore.cluster.changelog_records import RecordCodec, partition_for
from metastore.cluster.cluster_config import ClusterConfig
from metastore.cluster.view import ViewConsumer, ViewStore, digest
from metastore.errors import CommitStateUnknown, MetastoreError, NotOwner, RefConditionFailed
from metastore.model.codec import default_codec
from metastore.model.keys import ObjKey, RefKey
from metastore.persistence.base import Ref, RefUpdate, StoredObject
from metastore.util.clock import SystemClock
from workers.owner import PartitionOwner

TIMEOUT = 30.0


@pytest.fixture
def config(kafka_bootstrap: str, topic_prefix: str) -> ClusterConfig:
    cfg = ClusterConfig(kafka_bootstrap, prefix=topic_prefix, cluster=topic_prefix, partitions=3)
    topics.create(cfg)
    return cfg


@pytest.fixture
def view(config: ClusterConfig, tmp_path: Path) -> Iterator[ViewConsumer]:
    consumer = ViewConsumer(ViewStore(tmp_path / "view", config), config).start()
    yield consumer
    consumer.stop()
    consumer.store.close()


def _owner(config: ClusterConfig, view: ViewConsumer, partition: int, node: str) -> PartitionOwner:
    owner = PartitionOwner(
        config,
        partition,
        RecordCodec(default_codec(), node),
        view,
        f"http://{node}",
        SystemClock().now_us,
    )
    owner.start()
    assert owner.wait_ready(TIMEOUT), f"owner {node} of partition {partition} never became ready"
    return owner


def _catalog_in(partition: int, partitions: int) -> str:
    return next(
        c for c in (f"c{i}" for i in range(1000)) if partition_for("t", c, partitions) == partition
    )


def _create(key: RefKey, head: int) -> tuple[list[StoredObject], RefUpdate]:
    obj = StoredObject(ObjKey(key.tenant, key.catalog, "commit", head), b"\x01\x00\x01body", 1)
    return [obj], RefUpdate(key, None, Ref(key, head, 1, ()))


def _advance(key: RefKey, old: int, new: int) -> tuple[list[StoredObject], RefUpdate]:
    obj = StoredObject(ObjKey(key.tenant, key.catalog, "commit", new), b"\x01\x00\x01next", 2)
    return [obj], RefUpdate(key, old, Ref(key, new, 2, (old,)))


def _result(future: Future[int]) -> MetastoreError | None:
    try:
        future.result(TIMEOUT)
    except MetastoreError as exc:
        return exc
    return None


def test_owner_writes_are_in_the_view_when_acknowledged(
    config: ClusterConfig, view: ViewConsumer
) -> None:
    owner = _owner(config, view, 0, "n1")
    try:
        key = RefKey("t", _catalog_in(0, config.partitions), "main")
        assert _result(owner.submit(*_create(key, 100))) is None
        # Acknowledged means applied by this node's view: readable at once.
        ref = view.store.get_ref(key)
        assert ref is not None and ref.head == 100
        (obj,) = view.store.get_objects([ObjKey(key.tenant, key.catalog, "commit", 100)])
        assert obj is not None and obj.data == b"\x01\x00\x01body"
        assert owner.epoch == view.store.epoch(0)
    finally:
        owner.stop()


def test_cas_conflict_writes_nothing(config: ClusterConfig, view: ViewConsumer) -> None:
    owner = _owner(config, view, 1, "n1")
    try:
        key = RefKey("t", _catalog_in(1, config.partitions), "main")
        assert _result(owner.submit(*_create(key, 100))) is None
        objects, update = _advance(key, 99, 101)  # wrong expected HEAD
        assert isinstance(_result(owner.submit(objects, update)), RefConditionFailed)
        ref = view.store.get_ref(key)
        assert ref is not None and ref.head == 100
        assert view.store.get_objects([objects[0].key]) == [None]
    finally:
        owner.stop()


def test_concurrent_writes_share_transactions_and_each_gets_its_outcome(
    config: ClusterConfig, view: ViewConsumer
) -> None:
    owner = _owner(config, view, 2, "n1")
    try:
        catalog = _catalog_in(2, config.partitions)
        keys = [RefKey("t", catalog, f"r{i}") for i in range(40)]
        futures = [owner.submit(*_create(key, 1000 + i)) for i, key in enumerate(keys)]
        # One more create of an existing ref in the same burst: refused on its own.
        duplicate = owner.submit(*_create(keys[0], 5))
        assert [_result(f) for f in futures] == [None] * len(keys)
        assert isinstance(_result(duplicate), RefConditionFailed)
        heads = {k: r.head for k in keys if (r := view.store.get_ref(k)) is not None}
        assert heads == {key: 1000 + i for i, key in enumerate(keys)}
    finally:
        owner.stop()


def test_a_new_owner_fences_the_old_one(config: ClusterConfig, view: ViewConsumer) -> None:
    key = RefKey("t", _catalog_in(0, config.partitions), "main")
    old = _owner(config, view, 0, "old")
    try:
        assert _result(old.submit(*_create(key, 100))) is None
        new = _owner(config, view, 0, "new")  # init_transactions fences "old"
        try:
            assert new.epoch > old.epoch
            # The zombie's next write fails (never 200) and leaves no trace in the view.
            zombie = _result(old.submit(*_advance(key, 100, 666)))
            assert isinstance(zombie, CommitStateUnknown | NotOwner), zombie
            assert view.store.get_ref(key).head == 100  # type: ignore[union-attr]
            # The new owner continues the chain.
            assert _result(new.submit(*_advance(key, 100, 101))) is None
            assert view.store.get_ref(key).head == 101  # type: ignore[union-attr]
            assert view.store.routes()[0].node == "new"
        finally:
            new.stop()
    finally:
        old.stop()


def test_replayed_view_equals_live_view(
    config: ClusterConfig, view: ViewConsumer, tmp_path: Path
) -> None:
    owner = _owner(config, view, 0, "n1")
    try:
        key = RefKey("t", _catalog_in(0, config.partitions), "main")
        assert _result(owner.submit(*_create(key, 10))) is None
        for head in range(11, 20):
            assert _result(owner.submit(*_advance(key, head - 1, head))) is None
    finally:
        owner.stop()
    fresh = ViewConsumer(ViewStore(tmp_path / "fresh", config), config).start()
    try:
        for (role, partition), offset in view.applied_offsets().items():
            assert fresh.wait_for_blocking(role, partition, offset, TIMEOUT)
        assert digest(fresh.store) == digest(view.store)
    finally:
        fresh.stop()
        fresh.store.close()
