"""The view every node keeps, against each real broker: Apache Kafka, and Tansu, which
hands aborted records to read_committed readers and reports wrong high watermarks (the
view must be right on both).

Records are written the way a partition owner writes them: transactionally, the
objects first (flushed, so their offsets are known), then the ref record that
names the objects offset it depends on. Every wait is on a real condition (an
applied offset, a count of waiting records) with a bound.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from harness.kafka import wait_listed
from metastore.cluster.changelog_records import (
    Barrier,
    Produced,
    RecordCodec,
    RefRecord,
    Role,
    UpdateableRecord,
    partition_for,
)
from metastore.cluster.cluster_config import ClusterConfig
from metastore.cluster.replay import ReplayError, replay, wipe_view
from metastore.cluster.view import ReadOnlyView, ViewConsumer, ViewError, ViewStore, digest
from metastore.model.codec import default_codec
from metastore.model.keys import ObjKey, RefKey
from metastore.persistence.base import Ref, StoredObject, UpdateableObject
from metastore.persistence.rocksdb import RocksDBPersistence

PARTITIONS = 4
TENANT = "acme"
TIMEOUT = 20.0
BROKERS = ("kafka", "tansu")


def catalog_in(partition: int, n: int = 0) -> str:
    """The n-th catalog name of TENANT that lives in ``partition``."""
    found = [
        f"cat{i}" for i in range(1000) if partition_for(TENANT, f"cat{i}", PARTITIONS) == partition
    ]
    return found[n]


def obj(catalog: str, oid: int, data: bytes | None = None) -> StoredObject:
    return StoredObject(ObjKey(TENANT, catalog, "commit", oid), data or b"v%d" % oid, 1000 + oid)


def ref(catalog: str, head: int, *recent: int, name: str = "main") -> Ref:
    return Ref(RefKey(TENANT, catalog, name), head, 2000 + head, tuple(recent))


class Writer:
    """A transactional producer writing the records an owner would write."""

    def __init__(self, config: ClusterConfig, name: str) -> None:
        self.config = config
        self.codec = RecordCodec(default_codec(), node=name)
        self.producer = Producer(
            {
                **config.common(),
                "transactional.id": f"{config.prefix}.{name}",
                "enable.idempotence": True,
            }
        )
        self.producer.init_transactions(TIMEOUT)

    def _produce(self, records: list[Produced], partition: int) -> list[int]:
        offsets: list[int] = []
        errors: list[KafkaError] = []

        def done(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                offsets.append(msg.offset())

        for record in records:
            topic = self.config.refs_topic if record.topic == "refs" else self.config.objects_topic
            self.producer.produce(
                topic,
                key=record.key,
                value=record.value,
                partition=partition,
                headers=list[tuple[str, str | bytes | None]](record.headers),  # invariance
                on_delivery=done,
            )
        assert self.producer.flush(TIMEOUT) == 0
        assert not errors, errors
        return offsets

    def txn(self, partition: int, *records: Produced, abort: bool = False) -> list[int]:
        self.producer.begin_transaction()
        offsets = self._produce(list(records), partition)
        self._end(abort)
        return offsets

    def commit(
        self,
        catalog: str,
        expected: int | None,
        new: Ref | None,
        objects: Sequence[StoredObject] = (),
        *,
        epoch: int = -1,
        abort: bool = False,
        objects_offset: int | None = None,
    ) -> tuple[list[int], int]:
        """Objects then one ref CAS in one transaction; (object offsets, ref offset)."""
        partition = partition_for(TENANT, catalog, PARTITIONS)
        self.producer.begin_transaction()
        obj_offsets = self._produce([self.codec.object(o, epoch) for o in objects], partition)
        if objects_offset is None:
            objects_offset = max(obj_offsets) + 1 if obj_offsets else 0
        key = RefKey(TENANT, catalog, "main") if new is None else new.key
        record = RefRecord(key, expected, new, epoch, objects_offset)
        (ref_offset,) = self._produce([self.codec.ref(record)], partition)
        self._end(abort)
        return obj_offsets, ref_offset

    def barrier(self, partition: int, nonce: str) -> tuple[int, int]:
        """A new owner's barrier in both topics; (refs offset = epoch, objects offset)."""
        b = Barrier("node-x", f"http://node-x/{nonce}", nonce, 5)
        self.producer.begin_transaction()
        (refs,) = self._produce([self.codec.barrier(b, "refs")], partition)
        (objects,) = self._produce([self.codec.barrier(b, "objects")], partition)
        self._end(False)
        return refs, objects

    def _end(self, abort: bool) -> None:
        if abort:
            self.producer.abort_transaction(TIMEOUT)
        else:
            self.producer.commit_transaction(TIMEOUT)


def create_topics(config: ClusterConfig) -> None:
    admin = AdminClient(config.common())
    compact = {"cleanup.policy": "compact"}
    topics = [
        NewTopic(name, config.partitions, config.replication_factor, config=compact)
        for name in (config.refs_topic, config.objects_topic)
    ]
    for future in admin.create_topics(topics, operation_timeout=TIMEOUT).values():
        future.result(timeout=TIMEOUT)
    wait_listed(admin, [t.topic for t in topics])


def wait_until(condition: Callable[[], bool], timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


@pytest.fixture(params=BROKERS)
def broker(request: pytest.FixtureRequest) -> str:
    """The broker's name; its bootstrap is ``kafka_bootstrap`` or ``tansu_bootstrap``."""
    return str(request.param)


@pytest.fixture
def aborted_visible(broker: str) -> bool:
    """Tansu hands aborted records to read_committed readers; Apache Kafka does not."""
    return broker == "tansu"


@pytest.fixture
def config(broker: str, request: pytest.FixtureRequest, topic_prefix: str) -> ClusterConfig:
    bootstrap = str(request.getfixturevalue(f"{broker}_bootstrap"))
    config = ClusterConfig(
        bootstrap,
        prefix=topic_prefix,
        cluster=topic_prefix,
        partitions=PARTITIONS,
        broker_profile="tansu" if broker == "tansu" else "kafka",
    )
    create_topics(config)
    return config


@pytest.fixture
def writer(config: ClusterConfig) -> Iterator[Writer]:
    writer = Writer(config, "w1")
    yield writer
    writer.producer.flush(5)


@pytest.fixture
def live(tmp_path: Path, config: ClusterConfig) -> Iterator[ViewConsumer]:
    store = ViewStore(tmp_path / "live", config)
    consumer = ViewConsumer(store, config).start()
    yield consumer
    consumer.stop()
    store.close()


def caught_up(view: ViewConsumer, role: Role, partition: int, offset: int) -> None:
    """Wait until ``view`` applied role[partition] through ``offset`` (inclusive)."""
    assert view.wait_for_blocking(role, partition, offset + 1, TIMEOUT)


# --- the rules --------------------------------------------------------------------------


def test_commits_apply_objects_refs_and_updateables(writer: Writer, live: ViewConsumer) -> None:
    store = live.store
    cats = [catalog_in(0), catalog_in(2)]
    last_ref: dict[str, int] = {}
    for cat in cats:
        expected = None
        for head in (1, 2, 3):
            recent = tuple(range(head - 1, 0, -1))
            objs = [obj(cat, head * 10), obj(cat, head * 10 + 1)]
            _, last_ref[cat] = writer.commit(cat, expected, ref(cat, head, *recent), objs)
            expected = head
    p0 = partition_for(TENANT, cats[0], PARTITIONS)
    ukey = ObjKey(TENANT, cats[0], "lease", 1)
    upd = [
        UpdateableRecord(ukey, None, UpdateableObject(ukey, b"a", "t1"), -1),
        UpdateableRecord(ukey, "t1", UpdateableObject(ukey, b"b", "t2"), -1),
        UpdateableRecord(ukey, "nope", UpdateableObject(ukey, b"c", "t3"), -1),  # dropped
    ]
    (*_, last_upd) = writer.txn(p0, *(writer.codec.updateable(u) for u in upd))
    caught_up(live, "objects", p0, last_upd)
    for cat in cats:
        p = partition_for(TENANT, cat, PARTITIONS)
        caught_up(live, "refs", p, last_ref[cat])
        assert store.get_ref(RefKey(TENANT, cat, "main")) == ref(cat, 3, 2, 1)
        keys = [obj(cat, oid).key for oid in (10, 11, 20, 21, 30, 31)]
        assert store.get_objects(keys) == [obj(cat, k.id) for k in keys]
    assert [r.key.catalog for r in store.scan_refs(TENANT)] == sorted(cats)
    assert store.get_updateable(ukey) == UpdateableObject(ukey, b"b", "t2")
    assert store.dropped == 1
    with pytest.raises(ReadOnlyView):
        store.write([obj(cats[0], 99)])
    with pytest.raises(ReadOnlyView):
        store.cas_updateable(ukey, "t2", None)


def test_aborted_stale_and_conflicting_records_are_dropped(
    writer: Writer, live: ViewConsumer, aborted_visible: bool
) -> None:
    store = live.store
    cat = catalog_in(1)
    p = partition_for(TENANT, cat, PARTITIONS)
    writer.commit(cat, None, ref(cat, 1), [obj(cat, 1)])
    # Aborted, and not extending the chain: a broker may deliver it, the view drops it.
    writer.commit(cat, 999, ref(cat, 2, 999), [obj(cat, 2)], abort=True)
    epoch, objects_barrier = writer.barrier(p, "n1")
    # A zombie's record: extends the chain but its epoch is older than the barrier.
    writer.commit(cat, 1, ref(cat, 5, 1), [obj(cat, 5)], epoch=-1)
    # The same id with other bytes: the first stays.
    writer.commit(cat, 1, ref(cat, 6, 1), [obj(cat, 1, b"other"), obj(cat, 6)], epoch=epoch)
    ukey = ObjKey(TENANT, cat, "lease", 7)
    fresh = UpdateableRecord(ukey, None, UpdateableObject(ukey, b"x", "t1"), epoch)
    stale = UpdateableRecord(ukey, "t1", UpdateableObject(ukey, b"y", "t2"), epoch - 1)
    (_, last) = writer.txn(p, writer.codec.updateable(fresh), writer.codec.updateable(stale))
    _, last_ref = writer.commit(cat, 6, ref(cat, 7, 6, 1), [obj(cat, 7)], epoch=epoch)
    caught_up(live, "refs", p, last_ref)
    caught_up(live, "objects", p, last)

    assert store.get_ref(RefKey(TENANT, cat, "main")) == ref(cat, 7, 6, 1)
    assert store.get_objects([obj(cat, 1).key]) == [obj(cat, 1)]
    assert store.get_updateable(ukey) == UpdateableObject(ukey, b"x", "t1")
    # stale ref, conflicting object, stale updateable (+ the aborted ref where visible)
    assert store.dropped == 3 + (1 if aborted_visible else 0)
    assert live.barrier_seen(p, "n1") == (epoch, objects_barrier)
    assert live.barrier_seen(p, "n2") is None
    assert store.epoch(p) == epoch
    assert live.routes()[p].url == "http://node-x/n1"


def test_a_compacted_log_replays_and_deleted_refs_stay_deleted(
    writer: Writer, live: ViewConsumer
) -> None:
    """After compaction a ref's first surviving record expects a HEAD whose record is
    gone; the view applies it. A deletion leaves a marker, so a stale record cannot
    bring a deleted ref back, and only a re-creation passes it."""
    store = live.store
    cat, other = catalog_in(3), catalog_in(3, 1)
    p = partition_for(TENANT, cat, PARTITIONS)
    # as compaction leaves it: the records for HEADs 1..41 of `cat` are gone
    writer.commit(cat, 41, ref(cat, 42, 41), [obj(cat, 42)])
    writer.commit(other, None, ref(other, 1), [obj(other, 1)])
    writer.commit(other, 1, None)  # deleted
    writer.commit(other, 1, ref(other, 2, 1), [obj(other, 2)])  # stale: expects the old HEAD
    _, last = writer.commit(other, None, ref(other, 3), [obj(other, 3)])  # re-created
    caught_up(live, "refs", p, last)
    assert store.get_ref(RefKey(TENANT, cat, "main")) == ref(cat, 42, 41)
    assert store.get_ref(RefKey(TENANT, other, "main")) == ref(other, 3)
    assert store.dropped == 1


def test_ref_waits_until_its_objects_arrive(tmp_path: Path, config: ClusterConfig) -> None:
    writer = Writer(config, "w-wait")
    cat = catalog_in(3)
    other = catalog_in(3, 1)
    p = partition_for(TENANT, cat, PARTITIONS)
    store = ViewStore(tmp_path / "view", config)
    # refs first: objects[p] is empty, this ref needs it applied up to offset 3
    writer.commit(cat, None, ref(cat, 1), objects_offset=3)
    writer.commit(other, None, ref(other, 7), objects_offset=0)  # waits behind it
    _, last_ref = writer.commit(cat, 1, ref(cat, 2, 1), objects_offset=0)
    # started once all three are in the log, so its first fetch holds them all: started
    # before, a slow machine let it fetch them one by one, and past the first waiting
    # one (max_waiting=1) it paused refs[p] with the third not read
    live = ViewConsumer(store, config, max_waiting=1).start()  # pauses refs[p] while waiting
    try:
        wait_until(lambda: store.waiting().get(p) == 3)
        assert store.get_ref(RefKey(TENANT, cat, "main")) is None
        assert store.get_ref(RefKey(TENANT, other, "main")) is None
        assert store.offset("refs", p) == 0

        offsets = writer.txn(p, *(writer.codec.object(obj(cat, i), -1) for i in (1, 2, 3)))
        assert offsets == [0, 1, 2]
        caught_up(live, "refs", p, last_ref)
        assert store.get_ref(RefKey(TENANT, cat, "main")) == ref(cat, 2, 1)
        assert store.get_ref(RefKey(TENANT, other, "main")) == ref(other, 7)
        assert store.waiting() == {}

        _, after = writer.commit(other, 7, ref(other, 8, 7), objects_offset=0)  # resumed
        caught_up(live, "refs", p, after)
        assert store.get_ref(RefKey(TENANT, other, "main")) == ref(other, 8, 7)
        assert store.dropped == 0
    finally:
        live.stop()
        store.close()


async def test_async_wait_for_does_not_block_the_loop(writer: Writer, live: ViewConsumer) -> None:
    cat = catalog_in(0)
    p = partition_for(TENANT, cat, PARTITIONS)
    assert not await live.wait_for("refs", p, 1, timeout=0.2)  # nothing written yet
    waiting = asyncio.ensure_future(live.wait_for("refs", p, 1, timeout=TIMEOUT))
    ticks = 0
    while ticks < 5:  # the loop runs while the wait is pending
        await asyncio.sleep(0.01)
        ticks += 1
    assert not waiting.done()
    await asyncio.to_thread(writer.commit, cat, None, ref(cat, 1), [obj(cat, 1)])
    assert await waiting
    assert live.store.get_ref(RefKey(TENANT, cat, "main")) == ref(cat, 1)


# --- restart and replay -------------------------------------------------------------------


def test_restart_resumes_from_stored_offsets(
    tmp_path: Path, config: ClusterConfig, writer: Writer
) -> None:
    cats = [catalog_in(p) for p in range(PARTITIONS)]
    path = tmp_path / "view"
    store = ViewStore(path, config)
    first = ViewConsumer(store, config).start()
    for cat in cats:
        _, last = writer.commit(cat, None, ref(cat, 1), [obj(cat, 1), obj(cat, 2)])
        caught_up(first, "refs", partition_for(TENANT, cat, PARTITIONS), last)
    assert first.stats.consumed == 3 * len(cats)
    first.stop()
    store.close()

    tail: dict[int, int] = {}
    for cat in cats:
        _, tail[partition_for(TENANT, cat, PARTITIONS)] = writer.commit(
            cat, 1, ref(cat, 2, 1), [obj(cat, 3)]
        )
    with pytest.raises(ViewError):
        ViewStore(path, ClusterConfig(config.bootstrap, prefix="other", partitions=PARTITIONS))
    store = ViewStore(path, config)
    second = ViewConsumer(store, config).start()
    try:
        for p, last in tail.items():
            caught_up(second, "refs", p, last)
        assert second.stats.consumed == 2 * len(cats)  # the tail only, not from offset 0
        for cat in cats:
            assert store.get_ref(RefKey(TENANT, cat, "main")) == ref(cat, 2, 1)
        live_digest = digest(store)
    finally:
        second.stop()
        store.close()
    rebuilt = replay(config, tmp_path / "rebuilt", progress=False)
    assert rebuilt.consumed == 5 * len(cats)
    assert rebuilt.digest == live_digest


def test_live_view_and_replays_agree(
    tmp_path: Path, config: ClusterConfig, writer: Writer, live: ViewConsumer
) -> None:
    a, b = catalog_in(0), catalog_in(1)
    pa, pb = (partition_for(TENANT, c, PARTITIONS) for c in (a, b))
    last: dict[tuple[Role, int], int] = {}

    def note(role: Role, p: int, offsets: list[int] | int) -> None:
        values = [offsets] if isinstance(offsets, int) else offsets
        if values:
            last[(role, p)] = max([*values, last.get((role, p), -1)])

    objs, r = writer.commit(a, None, ref(a, 1), [obj(a, 1), obj(a, 2)])
    note("objects", pa, objs)
    note("refs", pa, r)
    _, r = writer.commit(a, 1, ref(a, 9, 1), [obj(a, 9)], abort=True)
    note("refs", pa, r)  # aborted: on Tansu consumed (and dropped), on Kafka skipped
    epoch, ob = writer.barrier(pb, "nb")
    note("refs", pb, epoch)
    note("objects", pb, ob)
    objs, r = writer.commit(b, None, ref(b, 1), [obj(b, 1)], epoch=epoch)
    note("objects", pb, objs)
    note("refs", pb, r)
    _, r = writer.commit(b, 1, ref(b, 2, 1), [obj(b, 2)], epoch=-1)  # stale: dropped
    note("refs", pb, r)
    ukey = ObjKey(TENANT, a, "lease", 1)
    up = UpdateableRecord(ukey, None, UpdateableObject(ukey, b"u", "t1"), -1)
    note("objects", pa, writer.txn(pa, writer.codec.updateable(up)))
    objs, r = writer.commit(a, 1, ref(a, 2, 1), [obj(a, 3)])
    note("objects", pa, objs)
    note("refs", pa, r)
    for (role, p), offset in last.items():  # the last of each is a committed record
        caught_up(live, role, p, offset)
    live_digest = digest(live.store)

    first = replay(config, tmp_path / "a", progress=False)
    assert first.digest == live_digest
    assert first.dropped == live.store.dropped

    def cli(*extra: str) -> tuple[str, str]:
        done = subprocess.run(
            [
                sys.executable, "-m", "metastore", "replay",
                "--kafka", config.bootstrap, "--prefix", config.prefix,
                "--partitions", str(PARTITIONS), "--data-dir", str(tmp_path / "b"), *extra,
            ],
            capture_output=True, text=True, timeout=120, check=False,
            env={**os.environ, "METASTORE_BROKER_PROFILE": config.broker_profile},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        match = re.search(r"^digest: ([0-9a-f]{64})$", done.stdout, re.MULTILINE)
        assert match, done.stdout
        return match[1], done.stdout

    second, out = cli("--fresh")
    assert second == live_digest
    assert "records/s" in out
    again, out = cli()  # resumes: nothing new to read, same state
    assert again == live_digest
    assert out.startswith("replayed 0 records")
    assert cli("--fresh", "--no-progress")[0] == live_digest


def test_wipe_refuses_what_is_not_a_view(tmp_path: Path) -> None:
    embedded = RocksDBPersistence(tmp_path / "embedded")
    embedded.close()
    with pytest.raises(ReplayError):
        wipe_view(tmp_path / "embedded")
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "notes.txt").write_text("mine")
    with pytest.raises(ReplayError):
        wipe_view(tmp_path / "plain")
    assert (tmp_path / "plain" / "notes.txt").exists()


# --- where the end of the log is ----------------------------------------------------------


def test_the_view_reaches_the_end_only_after_reading_what_the_brokers_hold(
    tmp_path: Path, config: ClusterConfig, writer: Writer
) -> None:
    """A node joins the owners' group once its view ``reached_end``: every partition
    read up to the end a fetch response reported, not merely idle."""
    catalogs = [catalog_in(p) for p in range(PARTITIONS)]
    written = {c: writer.commit(c, None, ref(c, 1), [obj(c, 1)]) for c in catalogs}
    store = ViewStore(tmp_path / "view", config)
    view = ViewConsumer(store, config).start()
    try:
        wait_until(lambda: view.reached_end)
        for catalog, (_, ref_offset) in written.items():
            partition = partition_for(TENANT, catalog, PARTITIONS)
            assert store.offset("refs", partition) > ref_offset  # everything written is in
            assert store.get_ref(RefKey(TENANT, catalog, "main")) is not None
    finally:
        view.stop()
        store.close()


def test_a_replay_out_of_time_says_where_it_stopped(
    tmp_path: Path, config: ClusterConfig, writer: Writer
) -> None:
    writer.commit(catalog_in(0), None, ref(catalog_in(0), 1), [obj(catalog_in(0), 1)])
    # no time at all, and an idle window it cannot reach: it stops after its first poll
    with pytest.raises(ReplayError) as raised:
        replay(config, tmp_path / "view", progress=False, timeout_s=0.0, idle_s=60.0)
    message = str(raised.value)
    assert message.startswith("not caught up before the timeout (")
    assert re.search(
        r"\[\d+\]: (no fetch response yet|at \d+, high watermark \d+)"
        r"|every partition at its reported end, idle under 60.0 s",
        message,
    ), message


def test_a_view_that_hears_no_broker_never_reaches_the_end(tmp_path: Path) -> None:
    """Idle because nothing answers is not caught up (a node would otherwise join the
    group with an empty view)."""
    config = ClusterConfig("127.0.0.1:1", prefix="nobroker", partitions=PARTITIONS)
    store = ViewStore(tmp_path / "view", config)
    view = ViewConsumer(store, config).start()
    try:
        idle_since = view.stats.last_record_at
        wait_until(lambda: time.monotonic() - idle_since > 1.0)  # idle long past a node's window
        assert not view.reached_end
    finally:
        view.stop()
        store.close()
