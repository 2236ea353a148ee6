"""The cluster source: the changelog topics, one Spark task per partition.

Task ``p`` reads objects[p] and refs[p] with its own confluent-kafka consumer
(``read_committed``, ``assign`` to explicit offsets from the beginning, no group and
no commits) and applies the records with the view's own rules
(``metastore.cluster.view.apply_rules.apply_records``, the function every node's view
runs), into a dict that starts empty; its result is exactly the keys and values a
node's view holds for that partition's catalogs, as store rows. A catalog lives in
one partition, so every Spark partition holds whole catalogs.

Where a task stops is proven, never a reported high watermark:

- given end offsets (``ends``: what a node reported its view has applied), it
  applies every record below them and none at or past them;
- otherwise by the rule ``metastore replay`` uses, per partition: on a conformant
  broker (``broker_profile`` ``kafka``) both topics read to the end their first fetch
  response reported, so a task ends while writes go on; on a ``tansu`` broker no
  record from either topic for an idle window, and for both topics a high watermark
  known from a fetch response with the consumer's position at or past it.

The driver first checks that the brokers answer and the topics exist with the
expected partitions, so an unreachable broker is one line and exit 2 before Spark
starts.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark import RDD
from pyspark.sql import SparkSession

from metastore.cluster.changelog_records import ROLES, Role, partition_for
from metastore.cluster.cluster_config import ClusterConfig, profile_from_env, properties_from_env
from metastore.cluster.replay import BrokerErrors
from metastore.cluster.view.apply_rules import ApplyContext, apply_records
from metastore.cluster.view.view_state import ViewState
from metastore.model.codec import default_codec
from metastore.pipeline.exits import JobError
from metastore.pipeline.options import JobOptions, Scope
from metastore.pipeline.progress import Progress
from metastore.pipeline.rows import Row

CHECK_TIMEOUT_S = 10.0
BATCH = 10_000


@dataclass(frozen=True, slots=True)
class PartitionRead:
    """How task ``partition`` reads: to ``ends`` (role -> offset) or to the catch-up rule."""

    partition: int
    ends: Mapping[Role, int] | None = None
    idle_s: float = 1.0
    timeout_s: float = 600.0


@dataclass
class PartitionResult:
    rows: dict[bytes, bytes]
    consumed: int = 0
    applied: int = 0
    dropped: int = 0
    ends: dict[Role, int] = field(default_factory=dict)


def apply_partition(config: ClusterConfig, read: PartitionRead) -> PartitionResult:
    """Inside a task: partition ``read.partition`` of both topics, applied from empty."""
    errors = BrokerErrors()
    consumer = Consumer(config.consumer(error_cb=errors, log_level=0))
    topics: dict[Role, str] = {"refs": config.refs_topic, "objects": config.objects_topic}
    roles = {name: role for role, name in topics.items()}
    assigned = [TopicPartition(topics[r], read.partition, OFFSET_BEGINNING) for r in ROLES]
    context = ApplyContext.of(config, default_codec())
    state, kv = ViewState(), dict[bytes, bytes | None]()
    result = PartitionResult({})
    try:
        consumer.assign(assigned)
        first_ends: dict[str, int] = {}  # each topic's end as its first fetch reported it
        deadline = time.monotonic() + read.timeout_s
        last_record = time.monotonic()
        while True:
            # confluent-kafka's Message has every method of the view's Message protocol
            batch: list[Any] = consumer.consume(BATCH, timeout=min(0.2, read.idle_s))
            records = []
            for message in batch:
                if message.error() is not None:
                    raise KafkaException(message.error())
                end = None if read.ends is None else read.ends[roles[message.topic()]]
                if end is None or message.offset() < end:
                    records.append(message)
            if batch:
                last_record = time.monotonic()
            if records:
                applied = apply_records(state, records, kv.get, context)
                kv.update(applied.writes)
                state = applied.state
                result.consumed += applied.consumed
                result.applied += applied.applied
                result.dropped += len(applied.drops)
            problem = errors.problem(heard=result.consumed > 0)
            if problem is not None:
                raise JobError(f"Kafka: {problem} ({config.connection()})")
            idle = time.monotonic() - last_record
            if _done(consumer, assigned, read, idle, first_ends, config.trusts_broker):
                break
            if time.monotonic() > deadline:
                raise JobError(f"partition {read.partition}: not caught up before the timeout")
        result.ends = {r: state.offset(r, read.partition) for r in ROLES}
    finally:
        consumer.close()
    result.rows = {k: v for k, v in kv.items() if v is not None}
    return result


def _done(
    consumer: Any,
    assigned: Sequence[TopicPartition],
    read: PartitionRead,
    idle: float,
    first_ends: dict[str, int],
    trusted: bool,
) -> bool:
    """Whether the task has read its partition to the end (module doc); ``first_ends``
    keeps each topic's first reported end, for a ``trusted`` broker's rule."""
    positions = consumer.position(list(assigned))
    if read.ends is not None:
        ends = [read.ends[r] for r in ROLES]
        return all(tp.offset >= end or end == 0 for tp, end in zip(positions, ends, strict=True))
    if not trusted and idle < read.idle_s:
        return False
    for tp in positions:
        low, high = consumer.get_watermark_offsets(tp, cached=True) or (-1, -1)
        if trusted:  # the first end reported is the end: later writes are no reason to wait
            if tp.topic not in first_ends and high >= 0:
                first_ends[tp.topic] = high
            high = first_ends.get(tp.topic, -1)
        if high < 0:
            return False  # no fetch response yet: not proven
        position = tp.offset if tp.offset >= 0 else low
        if position < high:
            return False
    return True


def check_topics(config: ClusterConfig, timeout_s: float = CHECK_TIMEOUT_S) -> None:
    """The brokers answer and both topics exist with ``config.partitions`` partitions."""
    admin = AdminClient(config.admin())
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise JobError(f"cannot reach the brokers: {exc.args[0]} ({config.connection()})") from None
    for name in (config.refs_topic, config.objects_topic):
        topic = metadata.topics.get(name)
        if topic is None or topic.error is not None:
            raise JobError(f"no topic {name} on {config.bootstrap} (check --topic-prefix)")
        if len(topic.partitions) != config.partitions:
            raise JobError(
                f"topic {name} has {len(topic.partitions)} partitions, not {config.partitions} "
                "(check --partitions)"
            )


class ClusterSource:
    def __init__(self, config: ClusterConfig, ends: Mapping[int, Mapping[Role, int]] | None = None):
        self.config = config
        self.ends = ends  # per partition; None: the catch-up rule
        self.results: list[PartitionResult] = []

    @classmethod
    def of(cls, options: JobOptions) -> ClusterSource:
        try:
            config = ClusterConfig(
                options.where,
                prefix=options.topic_prefix,
                partitions=options.partitions,
                kafka_properties=properties_from_env(os.environ),
                broker_profile=profile_from_env(os.environ),
            )
        except ValueError as exc:
            raise JobError(str(exc)) from None
        check_topics(config)
        return cls(config)

    def describe(self) -> str:
        config = self.config
        return f"changelog {config.refs_topic}/{config.objects_topic} on {config.bootstrap}"

    def check(self, scope: Scope) -> None:
        return None  # known only once read: the jobs check what they saw

    def partitions(self, scope: Scope) -> list[int]:
        """The partitions holding the scope's catalogs (one catalog: it and its tenant)."""
        count = self.config.partitions
        if scope.tenant is not None and scope.catalog is not None:
            return sorted({partition_for(scope.tenant, c, count) for c in ("", scope.catalog)})
        return list(range(count))

    def rows(self, spark: SparkSession, scope: Scope, progress: Progress) -> RDD[Row]:
        config, records = self.config, progress.records
        reads = [
            PartitionRead(p, None if self.ends is None else self.ends[p])
            for p in self.partitions(scope)
        ]

        def read(one: PartitionRead) -> Iterator[Row]:
            result = apply_partition(config, one)
            records.add(result.consumed)
            yield from sorted(result.rows.items())

        return spark.sparkContext.parallelize(reads, len(reads)).flatMap(read)

    def close(self) -> None:
        return None
