"""The Apache Kafka brokers the tests run on (``harness.kafka``): a cluster of three
replicates every record three times and acknowledges it once two hold it, so one
broker killed loses nothing acknowledged and two killed refuse writes instead of
acknowledging them; each restarts on its own disk."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from harness.kafka import KafkaCluster, kafka_uuid, wait_listed

pytestmark = pytest.mark.slow

TIMEOUT = 60.0


def _produce(
    bootstrap: str, topic: str, values: list[bytes], timeout_ms: int = 30_000
) -> list[str]:
    """Every value's delivery outcome: "" when acknowledged, else the error."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "message.timeout.ms": timeout_ms,
            "log_level": 0,
        }
    )
    outcomes: list[str] = []

    def done(err: KafkaError | None, _msg: Message) -> None:
        outcomes.append("" if err is None else str(err))

    for value in values:
        producer.produce(topic, value, partition=0, on_delivery=done)
    producer.flush(timeout_ms / 1000 + 10)
    return outcomes


def _read_all(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g{os.urandom(4).hex()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "log_level": 0,
        }
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        for _ in range(600):
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                values.append(message.value() or b"")
            if len(values) >= expected:
                break
    finally:
        consumer.close()
    return values


def test_kafka_uuids_never_read_as_an_option() -> None:
    assert not any(kafka_uuid().startswith("-") for _ in range(2000))


def test_three_brokers_keep_what_they_acknowledged_through_broker_kills(
    tmp_path: Path,
) -> None:
    with KafkaCluster(tmp_path, size=3) as kafka:
        topic = "replicated"
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap, "log_level": 0})
        created = admin.create_topics([NewTopic(topic, 1, 3)], operation_timeout=TIMEOUT)
        created[topic].result(TIMEOUT)
        wait_listed(admin, [topic])

        first = [b"a%d" % i for i in range(100)]
        assert _produce(kafka.bootstrap, topic, first) == [""] * 100

        # the leader dies: the two others hold every acknowledged record and take more
        leader = kafka.leader_of(topic, 0)
        leader.kill()
        survivors = ",".join(b.bootstrap for b in kafka.brokers if b.running)
        second = [b"b%d" % i for i in range(100)]
        assert _produce(survivors, topic, second) == [""] * 100
        assert sorted(_read_all(survivors, topic, 200)) == sorted(first + second)
        kafka.restart(leader)

        # two die: no write is acknowledged (one replica is below min.insync.replicas=2)
        down = [b for b in kafka.brokers if b is not leader]
        for broker in down:
            broker.kill()
        refused = _produce(leader.bootstrap, topic, [b"lost"], timeout_ms=5_000)
        assert refused != [""], "a write was acknowledged by one replica"

        # back on their own disks: everything acknowledged is there, writes go on
        for broker in down:
            broker.start(kafka.voters)
        kafka.wait_ready(TIMEOUT)
        assert _produce(kafka.bootstrap, topic, [b"c"]) == [""]
        read = _read_all(kafka.bootstrap, topic, 201)
        assert set(first + second + [b"c"]) <= set(read)
