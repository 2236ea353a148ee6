"""The thread that keeps a view up to date, and waits the asyncio side can await.

No consumer group subscription and no commits to Kafka: the consumer ``assign()``s
every partition of both topics at the offsets stored in the view (the beginning
when none), and the view stores its offsets with its data (STYLE.md 5). The poll
loop runs in its own thread (never on the event loop, STYLE.md 6); ``wait_for``
lets a coroutine wait for an offset without blocking the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from metastore.cluster.changelog_records import ROLES, Barrier, Role
from metastore.cluster.cluster_config import ClusterConfig
from metastore.cluster.view.view_model import ApplyResult, ViewError
from metastore.cluster.view.view_store import ViewStore

log = logging.getLogger(__name__)

LAG_INTERVAL_S = 1.0  # how often the consumer thread measures the view's lag (/metrics)


def open_consumer(store: ViewStore, config: ClusterConfig, **extra: Any) -> Any:
    """A consumer assigned to every partition of both topics at the view's offsets."""
    consumer = Consumer(config.consumer(**extra))
    stored = store.offsets()
    topics = {"refs": config.refs_topic, "objects": config.objects_topic}
    consumer.assign(
        [
            TopicPartition(topics[role], p, stored.get((role, p), OFFSET_BEGINNING))
            for role in ROLES
            for p in range(config.partitions)
        ]
    )
    return consumer


@dataclass(slots=True)
class ConsumerStats:
    """What one consumer did since it started (the view's totals live in the store)."""

    consumed: int = 0
    applied: int = 0
    dropped: int = 0
    errors: int = 0
    last_record_at: float = field(default_factory=time.monotonic)
    newest_record_ms: int = 0  # broker timestamp of the last record applied (view lag)
    lag_records: int = 0  # behind the high watermarks, as last measured (view lag)


class ViewFeed:
    """One poll-and-apply step, shared by the live ``ViewConsumer`` and ``replay``.

    Refs records that wait for their objects are held in memory by the store; when
    more than ``max_waiting`` wait in a partition, refs[p] is paused until objects[p]
    catches up (and resumed by an explicit seek to the next record it needs).
    """

    def __init__(self, store: ViewStore, consumer: Any, *, max_waiting: int = 10_000) -> None:
        self.store = store
        self.consumer = consumer
        self.max_waiting = max_waiting
        self.stats = ConsumerStats()
        self._paused: set[int] = set()
        self._reported: set[tuple[int, str | None, int | None]] = set()
        # each partition's end as its first fetch response reported it (``reached_first_ends``)
        self._first_ends: dict[tuple[str, int], int] = {}

    def step(self, num_messages: int, timeout: float) -> ApplyResult | None:
        try:
            # consume(n, timeout) waits for n records OR the timeout: with fewer records
            # than n it always waits the whole timeout, a latency floor on every owner's
            # acknowledgement. So: take what is there; if nothing, block for the first
            # record only, then take what arrived with it.
            messages = self.consumer.consume(num_messages=num_messages, timeout=0)
            if not messages:
                messages = self.consumer.consume(num_messages=1, timeout=timeout)
                if messages and num_messages > 1:
                    messages += self.consumer.consume(num_messages=num_messages - 1, timeout=0)
        except KafkaException as exc:
            self._error(exc.args[0] if exc.args else None, None, None)
            return None
        records = []
        for message in messages:
            error = message.error()
            if error is None:
                records.append(message)
            elif error.code() != KafkaError._PARTITION_EOF:
                self._error(error, message.topic(), message.partition())
        if not records:
            return None
        result = self.store.apply(records)
        self.stats.consumed += result.consumed
        self.stats.applied += result.applied
        self.stats.dropped += result.dropped
        self.stats.last_record_at = time.monotonic()
        self.stats.newest_record_ms = max(self.stats.newest_record_ms, records[-1].timestamp()[1])
        if result.waiting or self._paused:
            self._flow()
        return result

    # --- where the end of the log is, without trusting a reported high watermark -------

    def partitions(self) -> list[TopicPartition]:
        config = self.store.config
        topics = {"refs": config.refs_topic, "objects": config.objects_topic}
        return [TopicPartition(topics[r], p) for r in ROLES for p in range(config.partitions)]

    def watermark(self, tp: TopicPartition) -> tuple[int, int] | None:
        """The cached (low, high) watermarks of ``tp``, if a fetch response brought them
        (``cached=True``: never a request of its own)."""
        watermarks = self.consumer.get_watermark_offsets(tp, cached=True)
        if not watermarks or watermarks[1] < 0:
            return None
        low, high = watermarks
        return int(low), int(high)

    def measure_lag(self) -> int:
        """Records the brokers reported (cached high watermarks) past this view's
        positions, kept in ``stats.lag_records``. Only the consumer's own thread calls
        this (positions, as in ``at_high_watermarks``); a partition without a fetch
        response yet counts nothing."""
        config = self.store.config
        behind = 0
        for tp in self.consumer.position(self.partitions()):
            watermarks = self.watermark(tp)
            if watermarks is None:
                continue
            role: Role = "refs" if tp.topic == config.refs_topic else "objects"
            offset = tp.offset if tp.offset >= 0 else self.store.offset(role, tp.partition)
            behind += max(0, watermarks[1] - offset)
        self.stats.lag_records = behind
        return behind

    def heard(self) -> bool:
        """A fetch response has come back from some broker."""
        return any(self.watermark(tp) is not None for tp in self.partitions())

    def at_high_watermarks(self) -> bool:
        """Every partition's cached high watermark is known and the position is at or
        past it. A known watermark proves the consumer has read from the brokers (one
        that cannot connect reads nothing and would otherwise look idle, so caught up
        on an empty view); a correct broker thereby proves the end was reached, and the
        test broker's value is at or below the true end, so it never holds a reader back.
        Only the consumer's own thread calls this."""
        return next(self.behind(), None) is None

    def reached_first_ends(self) -> bool:
        """Every partition read up to the end its first fetch response reported (the
        cached high watermark: for a read_committed reader, the last stable offset).

        The rule for a conformant broker (``ClusterConfig.trusts_broker``): that end is
        true, so a reader that has read to it holds everything committed before it
        started, and what was written since is no reason to wait. Under steady writes
        it is reached within one read of the backlog, where a quiet log (the ``tansu``
        rule: ``at_high_watermarks`` after an idle window) never comes. Only the
        consumer's own thread calls this."""
        config = self.store.config
        for tp in self.consumer.position(self.partitions()):
            key = (tp.topic, tp.partition)
            end = self._first_ends.get(key)
            if end is None:
                watermarks = self.watermark(tp)
                if watermarks is None:
                    return False  # no fetch response yet: nothing is known of its end
                end = self._first_ends[key] = watermarks[1]
                low = watermarks[0]
            else:
                low = 0
            role: Role = "refs" if tp.topic == config.refs_topic else "objects"
            offset = (
                tp.offset if tp.offset >= 0 else max(low, self.store.offset(role, tp.partition))
            )
            if offset < end:
                return False
        return True

    def at_end(self, idle_s: float) -> bool:
        """Caught up by the rule ``trusts_broker`` picks: the ends first reported on a
        conformant broker, else every reported end after ``idle_s`` without a record."""
        if self.store.config.trusts_broker:
            return self.reached_first_ends()
        quiet = time.monotonic() - self.stats.last_record_at >= idle_s
        return quiet and self.at_high_watermarks()

    def behind(self) -> Iterator[str]:
        """Each partition not known to be at its end, described (where a replay that
        never catches up says it stopped). Only the consumer's own thread calls this."""
        config = self.store.config
        for tp in self.consumer.position(self.partitions()):
            watermarks = self.watermark(tp)
            if watermarks is None:
                yield f"{tp.topic}[{tp.partition}]: no fetch response yet"
                continue
            low, high = watermarks
            role: Role = "refs" if tp.topic == config.refs_topic else "objects"
            offset = (
                tp.offset if tp.offset >= 0 else max(low, self.store.offset(role, tp.partition))
            )
            if offset < high:
                yield f"{tp.topic}[{tp.partition}]: at {offset}, high watermark {high}"

    def _error(self, error: Any, topic: str | None, partition: int | None) -> None:
        """Counted always, logged once per kind and partition; fatal errors stop the view."""
        self.stats.errors += 1
        code = error.code() if isinstance(error, KafkaError) else None
        if isinstance(error, KafkaError) and error.fatal():
            raise ViewError(f"fatal consumer error: {error}")
        if (code or 0, topic, partition) in self._reported:
            log.debug("consumer error on %s[%s]: %s", topic, partition, error)
            return
        self._reported.add((code or 0, topic, partition))
        log.warning("consumer error on %s[%s]: %s (repeats only counted)", topic, partition, error)

    def _flow(self) -> None:
        waiting = self.store.waiting()
        topic = self.store.config.refs_topic
        for p, count in waiting.items():
            if count > self.max_waiting and p not in self._paused:
                self.consumer.pause([TopicPartition(topic, p)])
                self._paused.add(p)
        for p in sorted(self._paused):
            count = waiting.get(p, 0)
            if count <= self.max_waiting // 2:
                self.consumer.resume([TopicPartition(topic, p)])
                self._paused.discard(p)
                # Whatever librdkafka did with the fetch queue on pause, read on from
                # the record after the last one the view holds (duplicates are ignored).
                self.consumer.seek(TopicPartition(topic, p, self.store.refs_read(p)))


@dataclass(slots=True)
class _Waiter:
    role: Role
    partition: int
    offset: int
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[None]


def _settle(future: asyncio.Future[None], failure: BaseException | None) -> None:
    if future.done():
        return
    if failure is None:
        future.set_result(None)
    else:
        future.set_exception(ViewError(f"the view consumer stopped: {failure}"))


class ViewConsumer:
    """Feeds ``store`` from Kafka in a background thread; ``start``, then ``stop``.

    ``stop`` joins the thread and closes the consumer; a new ``ViewConsumer`` on the
    same store resumes from the stored offsets.
    """

    def __init__(
        self,
        store: ViewStore,
        config: ClusterConfig,
        *,
        batch_size: int = 10_000,
        poll_timeout: float = 0.1,
        max_waiting: int = 10_000,
    ) -> None:
        self.store = store
        self.config = config
        self.batch_size = batch_size
        self.poll_timeout = poll_timeout
        self.max_waiting = max_waiting
        self._cond = threading.Condition()
        self._waiters: list[_Waiter] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._feed: ViewFeed | None = None
        self._failure: BaseException | None = None
        self._reached_end = threading.Event()
        # called once, from the consumer's thread, when it stops on a failure
        self.on_failure: Callable[[BaseException], None] | None = None

    @property
    def stats(self) -> ConsumerStats:
        return self._feed.stats if self._feed is not None else ConsumerStats()

    @property
    def failure(self) -> BaseException | None:
        return self._failure

    @property
    def reached_end(self) -> bool:
        """The view has read every partition of both topics up to its end: on a
        conformant broker the end its first fetch reported (``ViewFeed.reached_first_ends``),
        else an end a fetch reported since it started (``ViewFeed.at_high_watermarks``,
        to which the node adds a quiet window). What a node waits for before it joins the
        owners' group."""
        return self._reached_end.is_set()

    def start(self) -> ViewConsumer:
        if self._thread is not None:
            raise RuntimeError("a ViewConsumer starts once; make a new one to resume")
        consumer = open_consumer(self.store, self.config)
        self._feed = ViewFeed(self.store, consumer, max_waiting=self.max_waiting)
        self._thread = threading.Thread(target=self._run, name="view-consumer", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        thread, feed = self._thread, self._feed
        self._stop.set()
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                raise TimeoutError(f"view consumer thread did not stop in {timeout}s")
        if feed is not None:
            feed.consumer.close()  # no group, no commits: the offsets live in the view
            self._feed = None
        self._settle_all(ViewError("the view consumer was stopped"))

    # --- waits ---------------------------------------------------------------------------

    def wait_for_blocking(self, role: Role, partition: int, offset: int, timeout: float) -> bool:
        """True once the view has applied ``role[partition]`` below ``offset``."""
        with self._cond:
            reached = self._cond.wait_for(
                lambda: self._failure is not None or self.store.offset(role, partition) >= offset,
                timeout,
            )
            self._raise_if_failed()
            return reached

    async def wait_for(
        self,
        role: Role,
        partition: int,
        offset: int,
        timeout: float,  # noqa: ASYNC109 - part of the contract: every wait is bounded
    ) -> bool:
        """Like ``wait_for_blocking`` without blocking the loop: a future the thread settles."""
        loop = asyncio.get_running_loop()
        waiter = _Waiter(role, partition, offset, loop, loop.create_future())
        with self._cond:
            self._raise_if_failed()
            if self.store.offset(role, partition) >= offset:
                return True
            self._waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout):
                await waiter.future
            return True
        except TimeoutError:
            return False
        finally:
            with self._cond:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    def lag(self) -> tuple[int, float]:
        """(records, seconds) the view is behind, as its thread last measured (about once
        a second): the records the brokers reported that it has not read, and while
        there are any, the age of the newest record it applied (else 0). Any thread."""
        stats = self.stats
        behind, newest = stats.lag_records, stats.newest_record_ms
        if behind == 0 or newest <= 0:
            return behind, 0.0
        return behind, max(0.0, time.time() - newest / 1000)

    def barrier_seen(self, partition: int, nonce: str) -> tuple[int, int] | None:
        return self.store.barrier_seen(partition, nonce)

    def routes(self) -> dict[int, Barrier]:
        return self.store.routes()

    def applied_offsets(self) -> dict[tuple[Role, int], int]:
        return self.store.offsets()

    # --- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        feed = self._feed
        assert feed is not None
        measured = 0.0
        trusted = self.config.trusts_broker
        try:
            while not self._stop.is_set():
                stepped = feed.step(self.batch_size, self.poll_timeout) is not None
                if stepped:
                    self._notify()
                if not self._reached_end.is_set() and (
                    feed.reached_first_ends()
                    if trusted
                    else not stepped and feed.at_high_watermarks()
                ):
                    self._reached_end.set()
                if time.monotonic() - measured >= LAG_INTERVAL_S:
                    feed.measure_lag()
                    measured = time.monotonic()
        except Exception as exc:  # recorded, not swallowed: the view stops, waiters fail
            log.exception("view consumer stopped")
            with self._cond:
                self._failure = exc
            self._notify()
            if self.on_failure is not None:
                self.on_failure(exc)

    def _notify(self) -> None:
        with self._cond:
            self._cond.notify_all()
            keep: list[_Waiter] = []
            for waiter in self._waiters:
                reached = self.store.offset(waiter.role, waiter.partition) >= waiter.offset
                if self._failure is None and not reached:
                    keep.append(waiter)
                else:
                    self._call(waiter, None if reached else self._failure)
            self._waiters = keep

    def _settle_all(self, failure: BaseException) -> None:
        with self._cond:
            waiters, self._waiters = self._waiters, []
            self._cond.notify_all()
        for waiter in waiters:
            self._call(waiter, failure)

    @staticmethod
    def _call(waiter: _Waiter, failure: BaseException | None) -> None:
        with contextlib.suppress(RuntimeError):  # its loop is closed: nobody waits any more
            waiter.loop.call_soon_threadsafe(_settle, waiter.future, failure)

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise ViewError(f"the view consumer stopped: {self._failure}") from self._failure
