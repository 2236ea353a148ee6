"""The single writer of one partition (KLIP-18), fenced by a Kafka transaction.

On assignment of partition p the owner opens a transactional producer with
``transactional.id = <cluster>.<refs topic>.<p>``; ``init_transactions()`` fences
any previous owner (its open transaction is aborted, its next one fails). It then
commits a barrier to refs[p] and objects[p] and waits until its own view has
applied both: only then does it hold the whole partition's state and accept
writes. Its epoch is the barrier's offset in refs[p]; every ref record it writes
carries that epoch and the HEAD it expects, so views drop anything a fenced
zombie still manages to get into the log.

Writes are group-committed: every write queued while a transaction is in flight
goes into the next one, each with its own compare-and-swap outcome. A write is
acknowledged only after the transaction committed AND this node's view applied
it, so the next CAS check reads it and a client reading this node sees it. Any
failed or indefinite transaction answers "commit state unknown" and the owner
re-creates its producer and re-derives its state through a new barrier; each batch
ends in one ``Outcome``. Fencing (librdkafka's fenced errors, or a newer barrier
after our own) is ``Fenced``: the owner stops for good, since taking over again
would fence the newer owner back.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from metastore.cluster.changelog_records import (
    Barrier,
    Produced,
    RecordCodec,
    RefRecord,
    Role,
    UpdateableRecord,
)
from metastore.cluster.cluster_config import ClusterConfig
from metastore.cluster.view import ViewConsumer
from metastore.errors import (
    CommitStateUnknown,
    Fenced,
    MetastoreError,
    NotOwner,
    RefConditionFailed,
)
from metastore.model.keys import ObjKey, RefKey
from metastore.persistence.base import RefUpdate, StoredObject, UpdateableObject
from metastore.util.metrics import OwnerMetrics
from metastore.util.retry import RetryPolicy

log = logging.getLogger(__name__)

EVENT_HEADER = ("content-type", b"application/json")  # a change event (the events topic)

# Taking over again after a failure (broker unreachable, own barrier not applied in
# time): a steady pause, while the group still assigns the partition here.
TAKEOVER_RETRY = RetryPolicy(base_s=1.0, max_s=1.0, jitter=False)
IDLE_POLL_S = 1.0  # an idle owner polls its producer this often, for its log lines


class Outcome(enum.Enum):
    """How one transaction (one batch of writes) ended, and so what the owner does next."""

    OK = "ok"  # committed (or every write failed its CAS): serve the next batch
    UNKNOWN = "unknown"  # may or may not have committed: new producer, new barrier
    FENCED = "fenced"  # a newer owner exists: stop for good

    @classmethod
    def of_failure(cls, exc: BaseException) -> Outcome:
        """A transaction that raised: fenced, or of unknown outcome."""
        return cls.FENCED if isinstance(exc, Fenced) else cls.UNKNOWN


def is_fencing(error: KafkaError) -> bool:
    """librdkafka's word that a newer producer with our transactional id exists."""
    return error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED)


@contextlib.contextmanager
def fencing_as_error(partition: int) -> Iterator[None]:
    """Kafka's fencing errors, raised inside, become ``Fenced``; any other error is kept."""
    try:
        yield
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        if isinstance(error, KafkaError) and is_fencing(error):
            raise Fenced(
                f"partition {partition}: fenced by a newer owner ({error.str()})", partition
            ) from exc
        raise


@dataclass
class _Write:
    objects: Sequence[StoredObject]
    ref: RefUpdate | None
    updateable: tuple[ObjKey, str | None, UpdateableObject | None] | None
    deletes: Sequence[ObjKey] = ()  # GC: tombstones ahead of ``objects``
    events: Sequence[tuple[bytes, bytes]] = ()  # change events (key, value), same transaction
    done: Future[int] = field(default_factory=Future)  # result: a consistency token


class PartitionOwner:
    def __init__(
        self,
        config: ClusterConfig,
        partition: int,
        records: RecordCodec,
        view: ViewConsumer,
        url: str,
        clock_us: Callable[[], int],
        may_own: Callable[[], bool] = lambda: True,
        metrics: OwnerMetrics | None = None,
    ) -> None:
        self._config = config
        self._metrics = metrics
        self.partition = partition
        self._records = records
        self._view = view
        self._store = view.store
        self._may_own = may_own  # the group still assigns us p (never re-fence a newer owner)
        self._url = url
        self._clock_us = clock_us
        self._producer: Producer | None = None
        self.epoch = -1
        self._queue: list[_Write] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"owner-{partition}", daemon=True)

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    def wait_ready(self, timeout: float) -> bool:
        return self._ready.wait(timeout)

    def stop(self) -> None:
        """Revocation: stop accepting; queued writes fail retryably (nothing was sent)."""
        with self._cond:
            self._stopping = True
            pending, self._queue = self._queue, []
            self._cond.notify_all()
        for write in pending:
            write.done.set_exception(
                NotOwner(f"partition {self.partition} was revoked", self.partition)
            )
        self._thread.join(timeout=self._config.transaction_timeout_s + 5)
        self._close_producer()

    # --- the write path ----------------------------------------------------------------

    def submit(
        self,
        objects: Sequence[StoredObject],
        ref: RefUpdate | None,
        deletes: Sequence[ObjKey] = (),
        events: Sequence[tuple[bytes, bytes]] = (),
    ) -> Future[int]:
        """Queue a write; ``events`` (opt-in: the events topic) are produced in the same
        transaction as its objects and ref record, and only if its CAS holds."""
        return self._enqueue(_Write(objects, ref, None, deletes, events))

    def submit_updateable(
        self, key: ObjKey, expected_token: str | None, new: UpdateableObject | None
    ) -> Future[int]:
        return self._enqueue(_Write((), None, (key, expected_token, new)))

    def _enqueue(self, write: _Write) -> Future[int]:
        with self._cond:
            if self._stopping or not self._ready.is_set():
                write.done.set_exception(
                    NotOwner(
                        f"this node is not the ready owner of partition {self.partition}",
                        self.partition,
                    )
                )
                return write.done
            self._queue.append(write)
            self._cond.notify()
        return write.done

    def _run(self) -> None:
        attempts = TAKEOVER_RETRY.start(sleep=self._pause)
        while not self._stopping:
            if not self._may_own():
                log.warning("partition %d: no longer assigned here; owner stops", self.partition)
                self._fail_all(NotOwner(f"partition {self.partition} moved", self.partition))
                return
            try:
                self._become_owner()
            except Fenced:
                log.warning("partition %d: fenced by a newer owner", self.partition)
                self._fail_all(NotOwner(f"partition {self.partition} moved", self.partition))
                return
            except NotOwner:
                return  # revoked while taking over
            except Exception:
                log.exception("partition %d: could not take ownership; retrying", self.partition)
                self._close_producer()
                attempts.backoff()  # no limit: retried while the group assigns p here
                continue
            self._serve()
            attempts = TAKEOVER_RETRY.start(sleep=self._pause)

    def _pause(self, seconds: float) -> None:
        """A wait that a revocation (``stop``) cuts short."""
        with self._cond:
            self._cond.wait_for(lambda: self._stopping, timeout=seconds)

    def _fail_all(self, error: MetastoreError) -> None:
        with self._cond:
            self._stopping = True
            pending, self._queue = self._queue, []
        self._ready.clear()
        for write in pending:
            write.done.set_exception(error)

    def _serve(self) -> None:
        while True:
            with self._cond:
                if not self._cond.wait_for(lambda: self._queue or self._stopping, IDLE_POLL_S):
                    batch = None
                elif self._stopping:
                    return
                else:
                    batch, self._queue = self._queue, []
            if batch is None:
                self._deliver_log()
                continue
            outcome = self._commit(batch)
            if outcome is Outcome.FENCED:
                # A newer owner exists: never re-initialize (that would fence it back).
                self._fail_all(NotOwner(f"partition {self.partition} moved", self.partition))
                self._close_producer()
                return
            if outcome is Outcome.UNKNOWN:
                # Re-create the producer (new epoch) and re-derive state through a new barrier.
                self._ready.clear()
                self._close_producer()
                return

    def _become_owner(self) -> None:
        producer = Producer(self._config.producer(self._config.transactional_id(self.partition)))
        with fencing_as_error(self.partition):
            producer.init_transactions(self._config.transaction_timeout_s)
        self._producer = producer
        nonce = secrets.token_hex(8)
        barrier = Barrier(self._records.node, self._url, nonce, self._clock_us())
        offsets = self._transact(
            [self._records.barrier(barrier, "refs"), self._records.barrier(barrier, "objects")]
        )
        # Caught up = this node's view applied our own barrier in both topics (never
        # trust high watermarks: the test broker reports them wrong).
        refs_at, objects_at = offsets
        if not (
            self._wait_view("refs", refs_at + 1, 60.0)
            and self._wait_view("objects", objects_at + 1, 60.0)
        ):
            raise TimeoutError(f"partition {self.partition}: own barrier not applied")
        seen = self._view.barrier_seen(self.partition, nonce)
        if seen is None:
            raise Fenced(
                f"partition {self.partition}: a newer barrier follows ours", self.partition
            )
        self.epoch = seen[0]
        self._ready.set()
        log.info("partition %d: owner ready, epoch %d", self.partition, self.epoch)

    def _wait_view(self, role: Role, offset: int, timeout: float) -> bool:
        """Wait for this node's view, in slices, so a revocation does not wait with us."""
        deadline = time.monotonic() + timeout
        while not self._stopping:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if self._view.wait_for_blocking(role, self.partition, offset, min(0.2, remaining)):
                return True
        raise NotOwner(f"partition {self.partition} was revoked while taking over", self.partition)

    def _commit(self, batch: list[_Write]) -> Outcome:
        """One transaction for the whole batch; each write gets its own answer."""
        accepted: list[_Write] = []
        heads: dict[RefKey, int | None] = {}
        tokens: dict[ObjKey, str | None] = {}
        records: list[Produced] = []
        events: list[Produced] = []
        written: set[ObjKey] = set()
        for write in batch:
            try:
                self._check(write, heads, tokens)
            except MetastoreError as exc:
                write.done.set_exception(exc)
                continue
            accepted.append(write)
            records.extend(self._deletions(write, written))
            records.extend(self._records.object(o, self.epoch) for o in write.objects)
            written.update(o.key for o in write.objects)
            events.extend(Produced("events", k, v, [EVENT_HEADER]) for k, v in write.events)
        if not accepted:
            return Outcome.OK
        started = time.perf_counter()
        try:
            dropped = self._transact_with_refs(records, accepted, events)
        except Exception as exc:
            log.error("partition %d: transaction failed: %s", self.partition, exc)
            for write in accepted:
                write.done.set_exception(CommitStateUnknown(f"commit state unknown: {exc}"))
            outcome = Outcome.of_failure(exc)
            self._observe(outcome, started)
            return outcome
        self._observe(Outcome.FENCED if dropped else Outcome.OK, started)
        for i, write in enumerate(accepted):
            if i in dropped:
                # In the log but made stale by a newer barrier: every view ignores it.
                write.done.set_exception(
                    NotOwner(f"partition {self.partition} has a newer owner", self.partition)
                )
            else:
                write.done.set_result(self.consistency_token())
        if dropped:
            log.warning(
                "partition %d: own records were dropped; a newer owner exists", self.partition
            )
            return Outcome.FENCED
        return Outcome.OK

    def _observe(self, outcome: Outcome, started: float) -> None:
        if self._metrics is not None:
            label = "committed" if outcome is Outcome.OK else outcome.value
            self._metrics.transactions.labels(label).observe(time.perf_counter() - started)

    def _deletions(self, write: _Write, written: set[ObjKey]) -> Iterator[Produced]:
        """The GC tombstones of ``write``, in log order ahead of its own objects (so an
        object it both deletes and writes stays, as in every backend).

        Every object is produced whatever the view holds (views store an object once),
        so a piece deleted by an earlier transaction and referenced again is written
        again after its tombstone. An earlier write of this same batch that wrote a key
        is newer than a deletion planned against HEAD: that tombstone is left out."""
        for key in write.deletes:
            if key not in written:
                yield self._records.object_tombstone(key, self.epoch)

    def consistency_token(self) -> int:
        """The refs[p] offset this node's view has applied: a reader that waits for it
        sees every write acknowledged so far (read-your-writes on any node)."""
        return self._view.store.offset("refs", self.partition)

    def _check(
        self, write: _Write, heads: dict[RefKey, int | None], tokens: dict[ObjKey, str | None]
    ) -> None:
        """CAS against the view plus the earlier writes of this batch."""
        if write.ref is not None:
            key = write.ref.key
            if key in heads:
                current = heads[key]
            else:
                ref = self._store.get_ref(key)
                current = ref.head if ref is not None else None
            if current != write.ref.expected_head:
                raise RefConditionFailed(f"ref {key}: HEAD moved")
            heads[key] = write.ref.new.head if write.ref.new is not None else None
        if write.updateable is not None:
            obj_key, expected, new = write.updateable
            if obj_key in tokens:
                token = tokens[obj_key]
            else:
                stored = self._store.get_updateable(obj_key)
                token = stored.token if stored is not None else None
            if token != expected:
                raise RefConditionFailed(f"updateable {obj_key}: token moved")
            tokens[obj_key] = new.token if new is not None else None

    def _transact_with_refs(
        self, objects: list[Produced], writes: list[_Write], events: list[Produced]
    ) -> set[int]:
        """Commit one transaction; the indexes of ``writes`` whose records the view dropped."""
        producer = self._require_producer()
        with fencing_as_error(self.partition):
            ref_offsets, tail, owners = self._produce_all(producer, objects, writes, events)
            producer.commit_transaction(self._config.transaction_timeout_s)
        # Acknowledge only what this node's view has applied (read-your-writes, next CAS).
        roles: tuple[Role, ...] = ("refs", "objects")
        dropped: set[int] = set()
        for role in roles:
            mine = {
                o: w for o, p, w in zip(ref_offsets, tail, owners, strict=True) if p.topic == role
            }
            if not mine:
                continue
            if not self._view.wait_for_blocking(
                role, self.partition, max(mine) + 1, self._config.transaction_timeout_s
            ):
                raise TimeoutError(f"view did not apply {role}[{self.partition}]@{max(mine)}")
            for offset in self._store.dropped_among(role, self.partition, list(mine)):
                dropped.add(mine[offset])
        return dropped

    def _produce_all(
        self,
        producer: Producer,
        objects: list[Produced],
        writes: list[_Write],
        events: list[Produced],
    ) -> tuple[list[int], list[Produced], list[int]]:
        """Begin the transaction and send the batch: the objects first, the change events
        (their own topic), then every ref and updateable record with the index of the
        write it belongs to."""
        producer.begin_transaction()
        offsets = self._produce_and_flush(producer, objects) if objects else []
        objects_offset = max(offsets) + 1 if offsets else 0
        if events:
            self._produce_and_flush(producer, events)
        tail: list[Produced] = []
        owners: list[int] = []  # tail record -> index of its write
        for i, write in enumerate(writes):
            if write.ref is not None:
                owners.append(i)
                tail.append(
                    self._records.ref(
                        RefRecord(
                            write.ref.key,
                            write.ref.expected_head,
                            write.ref.new,
                            self.epoch,
                            objects_offset,
                        )
                    )
                )
            if write.updateable is not None:
                key, expected, new = write.updateable
                owners.append(i)
                tail.append(
                    self._records.updateable(UpdateableRecord(key, expected, new, self.epoch))
                )
        return self._produce_and_flush(producer, tail), tail, owners

    def _transact(self, records: list[Produced]) -> list[int]:
        producer = self._require_producer()
        with fencing_as_error(self.partition):
            producer.begin_transaction()
            offsets = self._produce_and_flush(producer, records)
            producer.commit_transaction(self._config.transaction_timeout_s)
        return offsets

    def _produce_and_flush(self, producer: Producer, records: list[Produced]) -> list[int]:
        offsets: list[int | None] = [None] * len(records)
        errors: list[KafkaError] = []

        def report(i: int) -> Callable[[KafkaError | None, Message], None]:
            def done(err: KafkaError | None, msg: Message) -> None:
                if err is not None:
                    errors.append(err)
                else:
                    offsets[i] = msg.offset()

            return done

        for i, record in enumerate(records):
            topic = self._config.topic(record.topic)
            producer.produce(
                topic,
                key=record.key,
                value=record.value,
                partition=self.partition,
                headers=list[tuple[str, str | bytes | None]](record.headers),
                on_delivery=report(i),
            )
        remaining = producer.flush(self._config.transaction_timeout_s)
        if errors or remaining:
            raise KafkaException(errors[0] if errors else KafkaError(KafkaError._TIMED_OUT))
        return [o for o in offsets if o is not None]

    def _require_producer(self) -> Producer:
        if self._producer is None:
            raise NotOwner(f"partition {self.partition}: no producer", self.partition)
        return self._producer

    def _deliver_log(self) -> None:
        """A client's log lines wait in its queue until it is polled (``kafka_log``): an
        idle owner's producer would keep a broker outage's lines for as long as it lasts."""
        producer = self._producer
        if producer is None:
            return
        try:
            producer.poll(0)
        except KafkaException as exc:
            # A producer in a fatal state (fenced by a newer owner, on Apache Kafka)
            # raises its fatal error from every poll: the outcome is already handled
            # where it was raised, and its log lines were delivered before it.
            log.debug("partition %d: producer poll after a fatal error: %s", self.partition, exc)

    def _close_producer(self) -> None:
        self._deliver_log()
        self._producer = None  # librdkafka closes it when collected; fenced ones cannot flush
