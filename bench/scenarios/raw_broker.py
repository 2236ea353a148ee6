"""What the broker does on its own: the denominators of the cluster benchmark.

- ``raw_transactions``: ``producers`` transactional producers, each on its own
  thread and its own partition, each looping begin / produce one record / commit
  (one transaction in flight per producer), with the partition owner's producer
  settings. A node runs one such producer per partition it owns, so 1 producer is
  the ceiling of one hot catalog (one partition) without group commit, and one per
  partition is the ceiling of the whole cluster. With ``read_back`` each
  transaction also waits until a consumer polling like the view has read its
  record, as an owner waits before it acknowledges a write.
- ``raw_consume``: one read_committed consumer assigned every partition of both
  topics from the beginning, counting records until idle: what a replay would do
  if applying records cost nothing.
- ``refs_census``: the offsets and kinds of every refs record, untimed. Each
  transaction ends with a commit marker that takes one offset, so a run of
  consecutive offsets is one transaction: transactions per load come from the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from bench.load import Failures, Latency, Progress
from bench.report import ms, pct, table
from harness.process import cpu_seconds
from metastore.cluster import topics
from metastore.cluster.changelog_records import H_KIND
from metastore.cluster.cluster_config import ClusterConfig
from metastore.cluster.view import ViewConsumer

RECORD_BYTES = 300
CONSUME_BATCH = 10_000  # as many as replay asks for per poll
POLL_S = 0.2  # replay's poll slice
# how the live view consumer polls (its defaults), so a read-back waits like an owner does
_VIEW_DEFAULTS = inspect.signature(ViewConsumer).parameters
VIEW_BATCH: int = _VIEW_DEFAULTS["batch_size"].default
VIEW_POLL_S: float = _VIEW_DEFAULTS["poll_timeout"].default


@dataclass
class RawTxnResult:
    producers: int
    read_back: bool  # each transaction also waited until a view-like consumer read it
    seconds: float
    transactions: int
    txn_per_s: float
    latency: Latency
    broker_cpu: float  # CPU seconds per wall second (1.0 = one core busy)
    bench_cpu: float
    errors: int


@dataclass
class RawConsumeResult:
    records: int
    bytes: int
    seconds: float  # until the last record (the idle window that proves the end excluded)
    records_per_s: float
    errors: int


@dataclass
class RefsCensus:
    """refs[p]: (offset, record kind) of every record, in offset order."""

    partitions: dict[int, list[tuple[int, str]]] = field(default_factory=dict)

    def window(self, start: dict[int, int], end: dict[int, int]) -> tuple[int, int]:
        """(ref records, transactions holding one) at [start[p], end[p]) of each p in end."""
        refs = transactions = 0
        for p, stop in end.items():
            previous, in_run = None, 0
            for offset, kind in self.partitions.get(p, []):
                if not start.get(p, 0) <= offset < stop:
                    continue
                if previous is None or offset != previous + 1:  # a commit marker between
                    transactions += in_run > 0
                    in_run = 0
                in_run += kind == "ref"
                refs += kind == "ref"
                previous = offset
            transactions += in_run > 0
        return refs, transactions


class ReadBack:
    """A read_committed consumer of every partition of both topics, polled the way the
    view consumer polls (its default batch and timeout); producers wait on it."""

    def __init__(self, config: ClusterConfig) -> None:
        self._config = config
        self._seen: dict[int, int] = {}  # partition -> next offset not read yet
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="read-back", daemon=True)

    def __enter__(self) -> ReadBack:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def wait(self, partition: int, offset: int, timeout: float) -> bool:
        """True once the record at ``offset`` of ``partition`` has been read."""
        with self._cond:
            return self._cond.wait_for(lambda: self._seen.get(partition, 0) > offset, timeout)

    def _run(self) -> None:
        consumer = Consumer(self._config.consumer(**{"group.id": f"{self._config.cluster}.rb"}))
        try:
            consumer.assign(assignment(self._config))
            while not self._stop.is_set():
                # as the view polls (metastore.cluster.view.consumer.ViewFeed.step)
                messages = consumer.consume(num_messages=VIEW_BATCH, timeout=0)
                if not messages:
                    messages = consumer.consume(num_messages=1, timeout=VIEW_POLL_S)
                    if messages:
                        messages += consumer.consume(num_messages=VIEW_BATCH - 1, timeout=0)
                with self._cond:
                    for message in messages:
                        p, offset = message.partition(), message.offset()
                        if message.error() is None and p is not None and offset is not None:
                            self._seen[p] = max(self._seen.get(p, 0), offset + 1)
                    self._cond.notify_all()
        finally:
            consumer.close()


async def raw_transactions(
    bootstrap: str,
    prefix: str,
    partitions: int,
    producers: int,
    seconds: float,
    warmup: float,
    broker_pid: int | None,
    failures: Failures,
    read_back: bool = False,
) -> RawTxnResult:
    """``producers`` threads loop one-record transactions for ``seconds`` after a warm-up.

    Plain: begin / produce / commit. With ``read_back``, the partition owner's
    shape: begin / produce / flush / commit, then wait until a consumer polling like
    the view has read the record (an owner acknowledges a write only then).
    """
    config = ClusterConfig(bootstrap, prefix=prefix, cluster=prefix, partitions=partitions)
    topics.create(config)
    counts = [0] * producers
    latencies: list[list[float]] = [[] for _ in range(producers)]
    errors: list[str] = []
    window: list[float] = []
    measuring = threading.Event()
    ready = threading.Barrier(producers)
    start = threading.Barrier(producers, action=lambda: window.append(time.perf_counter()))
    reader = ReadBack(config) if read_back else None

    def run(i: int) -> None:
        producer = Producer(config.producer(f"{prefix}.raw.{i}"))  # the owner's settings
        record = Record(config.refs_topic, i % partitions, f"raw-{i}".encode())
        try:
            producer.init_transactions(config.transaction_timeout_s)
            ready.wait()
            warm_until = time.perf_counter() + warmup
            while time.perf_counter() < warm_until:
                one(producer, config, record, reader, errors)
            start.wait()
            measuring.set()
            deadline = window[0] + seconds
            while time.perf_counter() < deadline and len(errors) < 20:
                elapsed = one(producer, config, record, reader, errors)
                if elapsed is not None:
                    latencies[i].append(elapsed)
                    counts[i] += 1
        except (KafkaException, threading.BrokenBarrierError) as exc:
            errors.append(f"raw producer {i}: {exc}")
            ready.abort()
            start.abort()
            measuring.set()
        finally:
            producer.flush(5)

    label = f"raw txn x{producers}" + (" + read-back" if read_back else "")
    with reader or contextlib.nullcontext():
        threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(producers)]
        for thread in threads:
            thread.start()
        await asyncio.to_thread(measuring.wait)
        cpu_before = cpu_seconds(broker_pid) if broker_pid else float("nan"), cpu_seconds()
        with Progress(label, count=lambda: sum(counts)) as progress:
            for thread in threads:
                await asyncio.to_thread(thread.join)
            progress.errors = len(errors)
        elapsed = time.perf_counter() - window[0] if window else float("nan")
        broker_cpu = cpu_seconds(broker_pid) - cpu_before[0] if broker_pid else float("nan")
        bench_cpu = cpu_seconds() - cpu_before[1]
    for error in errors:
        failures.add(error)
    done = sum(counts)
    return RawTxnResult(
        producers=producers,
        read_back=read_back,
        seconds=round(elapsed, 3),
        transactions=done,
        txn_per_s=done / elapsed if elapsed > 0 else 0.0,
        latency=Latency.of([s for per in latencies for s in per]),
        broker_cpu=broker_cpu / elapsed,
        bench_cpu=bench_cpu / elapsed,
        errors=len(errors),
    )


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    key: bytes
    value: bytes = field(default_factory=lambda: os.urandom(RECORD_BYTES))


def one(
    producer: Producer,
    config: ClusterConfig,
    record: Record,
    reader: ReadBack | None,
    errors: list[str],
) -> float | None:
    """One transaction of one record: its latency, or None (error noted, aborted)."""
    timeout = config.transaction_timeout_s
    offsets: list[int] = []
    begun = time.perf_counter()
    try:
        producer.begin_transaction()
        if reader is None:
            producer.produce(record.topic, record.value, record.key, partition=record.partition)
        else:
            producer.produce(
                record.topic,
                record.value,
                record.key,
                partition=record.partition,
                on_delivery=lambda err, msg: offsets.append(-1 if err else msg.offset() or 0),
            )
            producer.flush(timeout)
        producer.commit_transaction(timeout)
    except KafkaException as exc:
        errors.append(f"raw transaction on partition {record.partition}: {exc}")
        error = exc.args[0] if exc.args else None
        if isinstance(error, KafkaError) and (error.fatal() or not error.txn_requires_abort()):
            raise
        producer.abort_transaction(timeout)
        return None
    if reader is not None and not (
        offsets and offsets[0] >= 0 and reader.wait(record.partition, offsets[0], timeout)
    ):
        errors.append(f"raw transaction on partition {record.partition}: not read back")
        return None
    return time.perf_counter() - begun


async def raw_consume(
    config: ClusterConfig, idle_s: float, label: str, failures: Failures
) -> RawConsumeResult:
    """Read both topics from the beginning until no record came for ``idle_s``."""
    count = [0]
    size = [0]
    errors: list[str] = []

    def run() -> tuple[float, float]:
        consumer = Consumer(config.consumer(**{"group.id": f"{config.cluster}.bench-raw"}))
        try:
            began = last = time.perf_counter()
            consumer.assign(assignment(config))
            while time.perf_counter() - last < idle_s:
                got = 0
                for message in consumer.consume(num_messages=CONSUME_BATCH, timeout=POLL_S):
                    error = message.error()
                    if error is None:
                        got += 1
                        size[0] += len(message.value() or b"")
                    elif error.code() != KafkaError._PARTITION_EOF:
                        errors.append(f"raw consumer: {error}")
                if got:
                    count[0] += got
                    last = time.perf_counter()
            return began, last
        finally:
            consumer.close()

    with Progress(label, count=lambda: count[0]) as progress:
        began, last = await asyncio.to_thread(run)
        progress.errors = len(errors)
    for error in errors[:10]:
        failures.add(error)
    seconds = last - began
    return RawConsumeResult(
        records=count[0],
        bytes=size[0],
        seconds=round(seconds, 3),
        records_per_s=count[0] / seconds if seconds > 0 else 0.0,
        errors=len(errors),
    )


def refs_census(config: ClusterConfig, idle_s: float) -> RefsCensus:
    """Offsets and kinds of every refs record (read until idle, untimed)."""
    census = RefsCensus({p: [] for p in range(config.partitions)})
    consumer = Consumer(config.consumer(**{"group.id": f"{config.cluster}.bench-census"}))
    try:
        consumer.assign(assignment(config, roles=("refs",)))
        last = time.perf_counter()
        while time.perf_counter() - last < idle_s:
            for message in consumer.consume(num_messages=CONSUME_BATCH, timeout=POLL_S):
                p, offset = message.partition(), message.offset()
                if message.error() is None and p is not None and offset is not None:
                    kind = dict(message.headers() or []).get(H_KIND) or b"?"
                    text = kind.decode(errors="replace") if isinstance(kind, bytes) else kind
                    census.partitions[p].append((offset, text))
                    last = time.perf_counter()
    finally:
        consumer.close()
    for records in census.partitions.values():
        records.sort()
    return census


def assignment(
    config: ClusterConfig, roles: Sequence[str] = ("refs", "objects")
) -> list[TopicPartition]:
    names = {"refs": config.refs_topic, "objects": config.objects_topic}
    return [
        TopicPartition(names[role], p, OFFSET_BEGINNING)
        for role in roles
        for p in range(config.partitions)
    ]


def label(result: RawTxnResult) -> str:
    return f"x{result.producers}" + (" read-back" if result.read_back else "")


def section(results: Sequence[RawTxnResult]) -> list[str]:
    """The summary's table of the raw transaction rates (none without results)."""
    if not results:
        return []
    rows = [
        [
            label(r),
            str(r.transactions),
            f"{r.txn_per_s:.0f}",
            ms(r.latency.p50),
            ms(r.latency.p99),
            pct(r.broker_cpu),
            pct(r.bench_cpu),
            str(r.errors),
        ]
        for r in results
    ]
    headers = ["raw transactions", "txns", "txn/s", "p50 ms", "p99 ms", "broker cpu",
               "bench cpu", "errors"]  # fmt: skip
    return [
        "",
        f"Raw broker rate: begin / produce one {RECORD_BYTES}-byte record / commit, one "
        "producer per thread and partition, one transaction in flight each; read-back: "
        "then wait until a consumer polling like the view has read it",
        table(headers, rows),
    ]
