"""GC deletions through the partition owner on the test broker: tombstones in the same
transaction as the ref record, applied by every view."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from metastore.cluster import topics
from metastore.cluster.changelog_records import RecordCodec, partition_for
from metastore.cluster.cluster_config import ClusterConfig
from metastore.cluster.view import ViewConsumer, ViewStore, digest
from metastore.errors import RefConditionFailed
from metastore.model.codec import default_codec
from metastore.model.keys import ObjKey, RefKey
from metastore.persistence.base import Ref, RefUpdate, StoredObject
from metastore.util.clock import SystemClock
from workers.owner import PartitionOwner

TIMEOUT = 30.0


@pytest.fixture
def config(kafka_bootstrap: str, topic_prefix: str) -> ClusterConfig:
    cfg = ClusterConfig(kafka_bootstrap, prefix=topic_prefix, cluster=topic_prefix, partitions=2)
    topics.create(cfg)
    return cfg


@pytest.fixture
def view(config: ClusterConfig, tmp_path: Path) -> Iterator[ViewConsumer]:
    consumer = ViewConsumer(ViewStore(tmp_path / "view", config), config).start()
    yield consumer
    consumer.stop()
    consumer.store.close()


@pytest.fixture
def owner(config: ClusterConfig, view: ViewConsumer) -> Iterator[PartitionOwner]:
    owner = PartitionOwner(
        config, 0, RecordCodec(default_codec(), "n1"), view, "http://n1", SystemClock().now_us
    )
    owner.start()
    assert owner.wait_ready(TIMEOUT)
    yield owner
    owner.stop()


def _key(config: ClusterConfig) -> RefKey:
    catalog = next(
        c for c in (f"c{i}" for i in range(1000)) if partition_for("t", c, config.partitions) == 0
    )
    return RefKey("t", catalog, "main")


def _obj(key: RefKey, oid: int, data: bytes = b"\x01\x00\x01piece") -> StoredObject:
    return StoredObject(ObjKey(key.tenant, key.catalog, "metadata_piece", oid), data, oid)


def _move(key: RefKey, old: int | None, new: int) -> RefUpdate:
    return RefUpdate(key, old, Ref(key, new, new, () if old is None else (old,)))


def _ok(owner: PartitionOwner, *args: object) -> None:
    owner.submit(*args).result(TIMEOUT)  # type: ignore[arg-type]


def test_tombstones_commit_with_the_ref_and_every_view_applies_them(
    config: ClusterConfig, view: ViewConsumer, owner: PartitionOwner, tmp_path: Path
) -> None:
    key = _key(config)
    piece, other = _obj(key, 1), _obj(key, 2)
    _ok(owner, [piece, other], _move(key, None, 10))
    # a lost CAS deletes nothing
    with pytest.raises(RefConditionFailed):
        _ok(owner, [], _move(key, 9, 11), [piece.key])
    assert view.store.get_objects([piece.key]) == [piece]

    _ok(owner, [], _move(key, 10, 11), [piece.key])  # acknowledged = applied here
    assert view.store.get_objects([piece.key, other.key]) == [None, other]

    # a commit that references it again writes it again, after the tombstone
    _ok(owner, [piece], _move(key, 11, 12))
    assert view.store.get_objects([piece.key]) == [piece]
    # deleted and written by one write: stays
    _ok(owner, [other], _move(key, 12, 13), [other.key])
    assert view.store.get_objects([other.key]) == [other]
    _ok(owner, [], _move(key, 13, 14), [piece.key])

    fresh = ViewConsumer(ViewStore(tmp_path / "fresh", config), config).start()
    try:
        for (role, partition), offset in view.applied_offsets().items():
            assert fresh.wait_for_blocking(role, partition, offset, TIMEOUT)
        assert fresh.store.get_objects([piece.key, other.key]) == [None, other]
        assert digest(fresh.store) == digest(view.store)
    finally:
        fresh.stop()
        fresh.store.close()
