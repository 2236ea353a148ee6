"""librdkafka's lines through the node's logging: each kind once a window, the rest
counted into the next line of the kind; a real client's lines reach it when polled."""

from __future__ import annotations

import logging
import time

import pytest
from confluent_kafka import Producer

from harness.process import free_port
from metastore.cluster.kafka_log import LOGGER_NAME, RepeatSummary, kafka_logger, kind_of

REFUSED = "Connect to ipv4#127.0.0.1:9092 failed: Connection refused"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def line(
    text: str, client: str = "rdkafka#consumer-2", level: int = logging.ERROR
) -> logging.LogRecord:
    """A record as confluent-kafka makes it."""
    return logging.LogRecord("k", level, __file__, 1, "%s [%s] %s", ("FAIL", client, text), None)


def attempt(ms: int, broker: str = "127.0.0.1:9092/bootstrap") -> str:
    return f"[thrd:{broker}]: {broker}: {REFUSED} (after {ms}ms in state CONNECT)"


def test_a_kind_is_written_once_a_window_with_the_count_of_the_rest() -> None:
    clock = Clock()
    summary = RepeatSummary(clock, window_s=60.0)
    first = line(attempt(0))
    assert summary.filter(first)
    assert first.getMessage() == (
        f"FAIL [rdkafka#consumer-2] 127.0.0.1:9092/bootstrap: {REFUSED} "
        "(after 0ms in state CONNECT)"
    )
    for n in range(1, 1_200):  # every 50 ms for a minute, by two clients of the kind
        clock.now += 0.05
        client = "rdkafka#consumer-2" if n % 2 else "rdkafka#consumer-3"
        assert not summary.filter(line(attempt(n % 3), client))
    clock.now = 1_060.0
    after = line(attempt(1))
    assert summary.filter(after)
    assert after.getMessage().endswith(
        "(after 1ms in state CONNECT) (and 1,199 more like it in 60 s)"
    )
    clock.now += 1
    assert not summary.filter(line(attempt(0)))  # a new window began with that line


def test_kinds_are_told_apart_by_level_facility_client_kind_and_words() -> None:
    summary = RepeatSummary(Clock())
    assert summary.filter(line(attempt(0)))
    assert summary.filter(line(attempt(0), level=logging.WARNING))
    assert summary.filter(line(attempt(0), client="rdkafka#producer-4"))
    assert not summary.filter(line(attempt(7), client="rdkafka#producer-11"))
    other_port = attempt(0).replace("9092", "9093")
    assert summary.filter(line(other_port))  # another broker is news
    assert summary.filter(line(attempt(0, broker="127.0.0.1:9092/1")))
    record = logging.LogRecord("k", logging.ERROR, __file__, 1, "plain %s", ("x",), None)
    assert summary.filter(record)
    assert record.getMessage() == "plain x"  # not confluent-kafka's shape: kept whole


def test_the_words_of_a_kind_keep_addresses_and_drop_counts() -> None:
    assert kind_of(attempt(12)) == f"127.0.0.1:9092/bootstrap: {REFUSED}"
    assert (
        kind_of("2/3 brokers are down") == "#/3 brokers are down"
    )  # kept after "/", as broker ids are
    assert kind_of("Timed out 3 in-flight, 0 retry-enqueued") == (
        "Timed out # in-flight, # retry-enqueued"
    )
    suppressed = f"{REFUSED} (after 2ms in state CONNECT, 3 identical error(s) suppressed)"
    assert kind_of(suppressed) == REFUSED


def test_kinds_remembered_are_bounded() -> None:
    clock = Clock()
    summary = RepeatSummary(clock, max_kinds=3)
    for port in range(4):
        assert summary.filter(line(f"{REFUSED}:{port}x"))
    assert summary.filter(line(f"{REFUSED}:0x"))  # forgotten: the oldest went first
    assert not summary.filter(line(f"{REFUSED}:3x"))


def test_a_real_client_logs_through_the_logger_when_polled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, LOGGER_NAME)
    logger = kafka_logger()
    assert kafka_logger() is logger
    assert sum(isinstance(f, RepeatSummary) for f in logger.filters) == 1
    port = free_port()  # nothing listens: every attempt is refused
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "logger": logger})
    deadline = time.monotonic() + 30
    while not caplog.records:
        assert time.monotonic() < deadline, "no line from librdkafka"
        producer.poll(0.1)
    for _ in range(10):  # librdkafka tries every 50 ms or so: more of the same kind
        producer.poll(0.1)
    (first,) = [r for r in caplog.records if r.name == LOGGER_NAME]
    assert first.levelno == logging.ERROR
    assert f"127.0.0.1:{port}" in first.getMessage() and "Connection refused" in first.getMessage()
    assert first.getMessage().startswith("FAIL [rdkafka#producer-")
