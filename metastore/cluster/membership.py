"""Which node owns which partition: a Kafka consumer group over the refs topic.

The group only decides ownership; it never reads data for it (every assigned
partition is paused at once, the view consumer reads everything) and never
commits offsets. Assignment is eager ("range"): a partition is revoked from its
old member before anyone else is given it, and ``on_revoke`` stops the old
owner before the rebalance completes, so at most one member believes it owns a
partition. A member that stops polling (crash, SIGSTOP) is expelled after
``session.timeout.ms``; it may still believe it owns its partitions, which is
why ownership is enforced by transactional fencing and epochs, not by the group.

A member that stops gracefully leaves the group (LeaveGroup, through the consumer's
close) once its local owners have stopped, so the broker rebalances at once and its
partitions have new owners within a rebalance, not a session timeout. On a ``tansu``
broker (``ClusterConfig.broker_profile``) it never leaves: Tansu 0.6.0 keeps a leader
that leaves while a rebalance is in progress as the group's leader for good, so no
member, present or future, is ever assigned a partition again. Stopping every node of
a cluster one after another does exactly that (the second one leaves during the
rebalance the first one's departure started), and a member cannot know that no
rebalance is under way when it leaves. There a stopped node is expelled after the
session timeout, exactly like a crashed one: expiry has no such hole, and it is the
path a crash takes anyway.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaException, TopicPartition

from metastore.cluster.cluster_config import ClusterConfig

log = logging.getLogger(__name__)


class Membership:
    """Runs the group's poll loop in a thread; calls back with partition numbers."""

    def __init__(
        self,
        config: ClusterConfig,
        on_assign: Callable[[list[int]], None],
        on_revoke: Callable[[list[int]], None],
        poll_timeout: float = 0.2,
    ) -> None:
        self._config = config
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._poll_timeout = poll_timeout
        self._assigned: frozenset[int] = frozenset()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._consumer: Consumer | None = None
        self._thread = threading.Thread(target=self._run, name="membership", daemon=True)
        self.rebalances = 0

    @property
    def group_id(self) -> str:
        return f"{self._config.cluster}.{self._config.refs_topic}.owners"

    def assigned(self) -> frozenset[int]:
        with self._lock:
            return self._assigned

    def owns(self, partition: int) -> bool:
        return partition in self.assigned()

    def start(self) -> None:
        consumer = Consumer(
            self._config.consumer(
                **{
                    "group.id": self.group_id,
                    "partition.assignment.strategy": "range",
                    "session.timeout.ms": self._config.session_timeout_ms,
                    "heartbeat.interval.ms": max(100, self._config.session_timeout_ms // 6),
                    # the poll loop never blocks for long: a generous bound, never hit
                    "max.poll.interval.ms": max(60_000, self._config.session_timeout_ms * 2),
                }
            )
        )
        consumer.subscribe(
            [self._config.refs_topic],
            on_assign=self._assign,
            on_revoke=self._revoke,
            on_lost=self._revoke,
        )
        self._consumer = consumer
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every local owner, then leave the group (on a ``tansu`` broker: drop out
        of it without leaving, module doc)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    # --- the thread ----------------------------------------------------------------------

    def _run(self) -> None:
        consumer = self._consumer
        assert consumer is not None, "start() creates the consumer before the thread"
        try:
            while not self._stop.is_set():
                try:
                    message = consumer.poll(self._poll_timeout)
                except KafkaException as exc:
                    log.warning("group %s: %s", self.group_id, exc)
                    continue
                if message is not None and message.error() is not None:
                    log.debug("group %s: %s", self.group_id, message.error())
        finally:
            # Stop the local owners first (no write of ours after this), then leave.
            self._revoke(
                consumer, [TopicPartition(self._config.refs_topic, p) for p in self.assigned()]
            )
            self._consumer = None
            if self._config.trusts_broker:
                self._leave(consumer)
            else:
                # Dropped unclosed: confluent-kafka destroys it with
                # RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE, so no LeaveGroup is sent (module
                # doc). This frame held its last reference: nothing heartbeats for us.
                del consumer
                log.info("group %s: stopped; expelled after the session timeout", self.group_id)

    def _leave(self, consumer: Consumer) -> None:
        """LeaveGroup: the broker rebalances the others at once. ``close`` runs the
        revocation callback again in this thread; nothing is left to revoke."""
        started = time.monotonic()
        try:
            consumer.close()
        except (KafkaException, RuntimeError) as exc:  # the session then expires instead
            log.warning(
                "group %s: leaving failed (%s); expelled after the session timeout",
                self.group_id,
                exc,
            )
            return
        log.info("group %s: left the group in %.2f s", self.group_id, time.monotonic() - started)

    def _assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        numbers = sorted(tp.partition for tp in partitions)
        consumer.assign(partitions)
        consumer.pause(partitions)  # ownership only: the view consumer reads the data
        with self._lock:
            self._assigned = self._assigned | frozenset(numbers)
            self.rebalances += 1
        log.info("group %s: assigned partitions %s", self.group_id, numbers)
        self._on_assign(numbers)

    def _revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        numbers = sorted(tp.partition for tp in partitions)
        with self._lock:
            gone = [p for p in numbers if p in self._assigned]
            self._assigned = self._assigned - frozenset(numbers)
        if gone:
            log.info("group %s: revoked partitions %s", self.group_id, gone)
            self._on_revoke(gone)
