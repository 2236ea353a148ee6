"""Group commit against a persistence: one durable write for many commits.

``Committer.commit_batch`` runs the requests of one ref one after another on the
state the previous one produced (``CommitLogic.prepare``), then writes all their
objects and moves the ref with ONE compare-and-swap: N requests, one durable write.
A lost CAS (another process moved HEAD) retries the whole batch from the fresh HEAD
on the engine's retry schedule (``EngineLimits.cas_retry``: exponential backoff with
full jitter, ``metastore.util.retry``), re-checking every requirement; a write whose
outcome is unknown is never retried. Each request gets its own outcome: a logical
failure of one never fails another.

``Committer.commit_batches`` takes the batches of several refs at once (many
catalogs committing side by side) and, on a backend with one local log, writes them
in one durable write: each is still its own compare-and-swap, all or nothing.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from metastore.engine.commits import (
    CommitLogic,
    CommitOutcome,
    CommitRequest,
    EngineLimits,
    EntityLimits,
    EntityState,
    RefAction,
)
from metastore.engine.objects import CatalogObjects, StagedObjects
from metastore.engine.write_failures import WriteFailures
from metastore.errors import (
    AlreadyExists,
    CommitStateUnknown,
    MetastoreError,
    NoSuchCatalog,
    NoSuchTenant,
    NotOwner,
    RefConditionFailed,
    ServiceUnavailable,
    ValidationFailed,
)
from metastore.model.codec import Codec
from metastore.model.ids import SnowflakeGenerator
from metastore.model.index import IndexUpdate
from metastore.model.keys import MAIN_REF, SYSTEM_CATALOG, ObjKey, RefKey
from metastore.persistence.base import (
    Persistence,
    Ref,
    RefUpdate,
    StoredObject,
    Write,
    WritesTogether,
)
from metastore.util.clock import Clock

log = logging.getLogger(__name__)


@dataclass
class _Built:
    """One ref's batch built on one HEAD: its objects, its ref update and deletions, and
    each request's outcome should the write succeed."""

    ref_key: RefKey
    requests: Sequence[CommitRequest]
    base: CatalogObjects
    staged: StagedObjects
    results: list[CommitOutcome | MetastoreError]
    update: RefUpdate
    deletes: list[ObjKey]

    def staged_objects(self) -> list[StoredObject]:
        return [stored for stored, _ in self.staged.written]

    def done(self) -> list[CommitOutcome | MetastoreError]:
        """The outcomes once written: the catalog's object cache learns what changed."""
        self.base.remember(self.staged.written)
        self.base.forget(self.deletes)
        return self.results


class Committer:
    """Runs batches of commit requests against one persistence (thread-safe per ref lane)."""

    def __init__(
        self,
        persistence: Persistence,
        codec: Codec,
        objects: Callable[[str, str], CatalogObjects],
        ids: SnowflakeGenerator,
        clock: Clock,
        limits: EngineLimits | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        entity_limits: EntityLimits | None = None,
        write_time: Callable[[float], None] | None = None,
        require_tenant: bool = False,
    ) -> None:
        self._persistence = persistence
        # a catalog's commits need its tenant: checked once per batch, in the batch's thread
        self._require_tenant = require_tenant
        self._write_time = write_time  # seconds of each durable write that succeeded
        self._objects = objects
        self._clock = clock
        self._limits = limits = limits if limits is not None else EngineLimits()
        self._logic = CommitLogic(codec, ids, limits, entity_limits)
        self._sleep = sleep
        self._rng = rng or random.Random()
        self.cas_retries = 0
        self.write_failures = WriteFailures()  # the store's failed writes (``/health``)

    @property
    def writes_together(self) -> bool:
        """Whether ``commit_batches`` shares one durable write among its batches."""
        return isinstance(self._persistence, WritesTogether)

    def commit(self, ref_key: RefKey, request: CommitRequest) -> CommitOutcome:
        (result,) = self.commit_batch(ref_key, [request])
        if isinstance(result, MetastoreError):
            raise result
        return result

    def commit_batch(
        self,
        ref_key: RefKey,
        requests: Sequence[CommitRequest],
        *,
        lost: list[CommitOutcome | MetastoreError] | None = None,
    ) -> list[CommitOutcome | MetastoreError]:
        """One ref's batch: built on its HEAD and written with one compare-and-swap,
        rebuilt on the fresh HEAD while another process wins it. ``lost``: the outcomes
        of a first attempt that already lost one (``commit_batches``)."""
        attempts = self._limits.cas_retry.start(sleep=self._sleep, rng=self._rng)
        while True:
            if lost is not None and not attempts.backoff():
                busy = ServiceUnavailable(
                    f"gave up after {attempts.attempt} lost compare-and-swaps on "
                    f"{ref_key.name}; nothing was written, retry later"
                )
                return [busy if isinstance(r, CommitOutcome) else r for r in lost]
            built = self._build(ref_key, requests)
            if isinstance(built, list):
                return built
            unsynced = _files_durable(requests, built.results)
            if unsynced:
                return self._without(ref_key, requests, unsynced)
            try:
                started = time.perf_counter()
                self._persistence.write(built.staged_objects(), built.update, built.deletes)
                self._wrote(started)
            except RefConditionFailed:  # nothing was written: rebuild on the fresh HEAD
                self.cas_retries += 1
                lost = built.results
                continue
            except Exception as exc:
                return self._failed(built, exc)
            return built.done()

    def commit_batches(
        self, batches: Sequence[tuple[RefKey, Sequence[CommitRequest]]]
    ) -> list[list[CommitOutcome | MetastoreError]]:
        """The batches of several refs (one each), built one after another and, where
        the persistence can (``WritesTogether``), written in one durable write: with
        many catalogs committing at once, each batch no longer pays for its own write,
        sync and thread. A batch whose compare-and-swap is lost is retried on its own
        (``commit_batch``); the others stand."""
        persistence = self._persistence
        if len(batches) == 1 or not isinstance(persistence, WritesTogether):
            return [self.commit_batch(ref_key, requests) for ref_key, requests in batches]
        results: list[list[CommitOutcome | MetastoreError]] = [[] for _ in batches]
        writing: list[tuple[int, _Built]] = []
        for i, (ref_key, requests) in enumerate(batches):
            try:
                built = self._build(ref_key, requests)
            except Exception as exc:  # this batch's outcome only; nothing was written
                log.exception("commit batch for %s failed", ref_key)
                results[i] = [CommitStateUnknown(f"commit state unknown: {exc}")] * len(requests)
                continue
            if isinstance(built, list):
                results[i] = built
            else:
                writing.append((i, built))
        for i, built in list(writing):
            if _files_durable(built.requests, built.results):  # alone, without the failed
                results[i] = self.commit_batch(built.ref_key, built.requests)
                writing.remove((i, built))
        if not writing:
            return results
        writes = [Write(b.staged_objects(), b.update, b.deletes) for _, b in writing]
        try:
            started = time.perf_counter()
            refused = persistence.write_each(writes)
            self._wrote(started)
        except Exception as exc:
            for i, built in writing:
                results[i] = self._failed(built, exc)
            return results
        for (i, built), refusal in zip(writing, refused, strict=True):
            if refusal is None:
                results[i] = built.done()
            elif isinstance(refusal, RefConditionFailed):
                self.cas_retries += 1
                results[i] = self.commit_batch(built.ref_key, built.requests, lost=built.results)
            else:
                results[i] = self._failed(built, refusal)
        return results

    def _without(
        self,
        ref_key: RefKey,
        requests: Sequence[CommitRequest],
        unsynced: dict[int, MetastoreError],
    ) -> list[CommitOutcome | MetastoreError]:
        """A batch some of whose files could not be made durable: those commits refused,
        the others built again without them and written."""
        kept = [r for i, r in enumerate(requests) if i not in unsynced]
        outcomes = iter(self.commit_batch(ref_key, kept) if kept else [])
        return [unsynced[i] if i in unsynced else next(outcomes) for i in range(len(requests))]

    def _build(
        self, ref_key: RefKey, requests: Sequence[CommitRequest]
    ) -> _Built | list[CommitOutcome | MetastoreError]:
        """The batch built on the ref's current HEAD, or every request's outcome when
        there is nothing to write."""
        if self._require_tenant and ref_key.catalog != SYSTEM_CATALOG:
            tenant = RefKey(ref_key.tenant, SYSTEM_CATALOG, MAIN_REF)
            if self._persistence.get_ref(tenant) is None:
                return [NoSuchTenant(f"tenant does not exist: {ref_key.tenant}")] * len(requests)
        base = self._objects(ref_key.tenant, ref_key.catalog)
        ref = self._persistence.get_ref(ref_key)
        staged = StagedObjects(base)
        results, update, deletes = self._run(staged, ref_key, ref, requests)
        if update is None:
            return results
        return _Built(ref_key, requests, base, staged, results, update, deletes)

    def _wrote(self, started: float) -> None:
        self.write_failures.succeeded()
        if self._write_time is not None:
            self._write_time(time.perf_counter() - started)

    def _failed(self, built: _Built, exc: Exception) -> list[CommitOutcome | MetastoreError]:
        """The outcomes of a batch whose write raised ``exc``: its logical failures stand,
        every commit it would have made is refused (``NotOwner``: nothing was written) or
        of unknown outcome."""
        ref_key, count = built.ref_key, len(built.requests)
        failure: MetastoreError
        if isinstance(exc, NotOwner):  # nothing was written: the caller retries at the owner
            failure = exc
        elif isinstance(exc, CommitStateUnknown):  # the backend said so (cluster): no trace
            log.error("write of %d commits to %s: %s", count, ref_key, exc.message)
            failure = exc
        else:
            self.write_failures.failed(f"write of {count} commits to {ref_key}", exc)
            failure = CommitStateUnknown(f"commit state unknown: {exc}")
        return [failure if isinstance(r, CommitOutcome) else r for r in built.results]

    def _run(
        self,
        staged: StagedObjects,
        ref_key: RefKey,
        ref: Ref | None,
        requests: Sequence[CommitRequest],
    ) -> tuple[list[CommitOutcome | MetastoreError], RefUpdate | None, list[ObjKey]]:
        head = staged.commit(ref.head) if ref is not None else None
        deletes: list[ObjKey] = []
        start_head = head
        exists = ref is not None
        reset = False  # a RESET succeeded: write the ref even if HEAD ends where it started
        results: list[CommitOutcome | MetastoreError] = []
        now_us = self._clock.now_us()
        for request in requests:
            attempt = StagedObjects(staged)
            try:
                if request.ref_action is RefAction.CREATE and exists:
                    raise AlreadyExists(f"already exists: {_describe(ref_key)}")
                if request.ref_action is not RefAction.CREATE and not exists:
                    missing = NoSuchCatalog if ref_key.catalog else NoSuchTenant
                    raise missing(f"does not exist: {_describe(ref_key)}")
                if request.ref_action is RefAction.RESET:
                    assert ref is not None and head is not None
                    if request.reset_to not in (head.id, *ref.recent):
                        raise ValidationFailed(
                            f"commit {request.reset_to} is not one of the ref's recent HEADs"
                        )
                    target = staged.commit(request.reset_to)
                    self._logic.check_reset(staged, head, target)
                    head = target
                    reset = True
                    results.append(CommitOutcome(head.id, head.seq))
                    continue
                if request.ref_action is RefAction.DELETE:
                    state = EntityState(IndexUpdate(staged.index(head), staged.stripe), staged)
                    for requirement in request.requirements:
                        requirement.validate(state)
                    head, exists = None, False
                    results.append(CommitOutcome(0, 0))
                    continue
                deleted: tuple[ObjKey, ...] = ()
                if request.deletions is not None and head is not None and ref is not None:
                    deleted = request.deletions.plan(attempt, head, (ref.head, *ref.recent))
                commit, entities = self._logic.prepare(attempt, head, request, now_us)
            except MetastoreError as exc:
                results.append(exc)
                continue
            except Exception as exc:  # a bug, or input no check foresaw: this request alone
                # fails (nothing of it is staged); the batch's others still commit
                log.exception("building commit %r failed", request.operation)
                results.append(MetastoreError(f"the commit could not be built: {exc!r}"))
                continue
            for stored, value in attempt.written:
                staged.stage(stored, value)
            deletes.extend(deleted)
            head, exists = commit, True
            results.append(CommitOutcome(commit.id, commit.seq, entities, deleted))
        if head is start_head and not reset:
            return results, None, deletes
        new_ref: Ref | None = None
        if head is not None:
            if ref is not None and start_head is not None:
                new_ref = ref.advanced(head.id, now_us, self._limits.recent_heads)
            else:
                new_ref = Ref(ref_key, head.id, now_us, ())
        return results, RefUpdate(ref_key, ref.head if ref is not None else None, new_ref), deletes


def _files_durable(
    requests: Sequence[CommitRequest], built: Sequence[CommitOutcome | MetastoreError]
) -> dict[int, MetastoreError]:
    """Wait until the files each request the batch commits names are durable
    (``durable_first``; a request refused while building commits nothing); the
    requests for which that failed, by position, with why. The syncs ran while the
    batch was built, so a wait here is usually short or none."""
    failed: dict[int, MetastoreError] = {}
    for i, (request, outcome) in enumerate(zip(requests, built, strict=True)):
        if not isinstance(outcome, CommitOutcome):
            continue
        for wait in request.durable_first:
            try:
                wait()
            except MetastoreError as exc:
                failed[i] = exc
                break
    return failed


def _describe(ref_key: RefKey) -> str:
    if ref_key.catalog:
        return f"catalog {ref_key.catalog!r} of tenant {ref_key.tenant!r}"
    return f"tenant {ref_key.tenant!r}"
