"""The commit engine (seed 000 "Performing a Commit"), with group commit.

``CommitLogic.prepare`` turns one request into new immutable objects and a new
commit on top of a given HEAD: look up each entity in the index, check the
requirements, apply the changes (``metastore.changes``), write new entity
objects, update the index (spilling when it grows), write the commit.

``Committer.commit_batch`` runs the requests of one ref one after another on
the state the previous one produced, then writes all their objects and moves
the ref with ONE compare-and-swap: N requests, one durable write. A lost CAS
(another process moved HEAD) retries the whole batch from the fresh HEAD on the
engine's retry schedule (``EngineLimits.cas_retry``: exponential backoff with
full jitter, ``metastore.retry``), re-checking every requirement; a write whose
outcome is unknown is never retried. Each request gets its own outcome: a
logical failure of one never fails another.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from metastore import dropped, location_index
from metastore.changes import (
    ApplyContext,
    Change,
    CreateEntity,
    DeleteEntity,
    DropEntity,
    RenameEntity,
    UndropEntity,
    UpdateEntity,
    apply_change,
)
from metastore.clock import Clock
from metastore.codec import Codec
from metastore.counts import Counts, count, counted_kind
from metastore.errors import (
    AlreadyExists,
    CommitStateUnknown,
    MetastoreError,
    NoSuchCatalog,
    NoSuchNamespace,
    NoSuchTable,
    NoSuchTenant,
    NoSuchView,
    NotEmpty,
    NotFound,
    NotOwner,
    ObjectConflict,
    RefConditionFailed,
    ServiceUnavailable,
    ValidationFailed,
)
from metastore.ids import SnowflakeGenerator
from metastore.index import IndexLimits, IndexUpdate, IndexView, RecentStripeRefs
from metastore.index_codec import EncodedIndex, RecentEncodings
from metastore.keys import (
    MAIN_REF,
    SYSTEM_CATALOG,
    EntityKey,
    Kind,
    ObjKey,
    RefKey,
    children_prefix,
    kind_prefix,
)
from metastore.model import Commit, CommitChange, Entity, stripe_encode
from metastore.objtypes import COMMIT, ENTITY, INDEX
from metastore.persistence.base import (
    DEFAULT_RECENT_HEADS,
    Persistence,
    Ref,
    RefUpdate,
    StoredObject,
)
from metastore.requirements import Requirement
from metastore.retry import RetryPolicy
from metastore.store import CatalogObjects, Objects, StagedObjects

log = logging.getLogger(__name__)

DEFAULT_MAX_OBJECT_BYTES = 1024 * 1024
STRIPE_ENCODINGS = 64  # stripe encodings kept for the next spill (at most ~0.3 MB each)


class RefAction(Enum):
    UPDATE = "update"  # commit on top of an existing ref
    CREATE = "create"  # create the ref with this request's commit as its root
    DELETE = "delete"  # validate the requirements, then delete the ref
    RESET = "reset"  # move HEAD back to one of the ref's recent HEADs (disaster recovery)


@dataclass(frozen=True, slots=True)
class NewObject:
    """An immutable object written with a commit (and only if the commit succeeds).

    The caller names its type and id; entities refer to it through their
    ``attachments``. Its type must be immutable (``objtypes``); the size limit applies.
    """

    type: str
    id: int
    data: bytes
    value: Any = None  # decoded form, to warm the cache (optional)


Record = Callable[[int], Sequence[Change]]  # the commit's id -> changes recording its outcome


class Deletions(Protocol):
    """What a garbage-collection commit deletes (``metastore.sweep.SweepPlan``), decided
    inside the engine against the HEAD the commit is built on, again on every retry."""

    def plan(self, objects: Objects, head: Commit, recent: Sequence[int]) -> tuple[ObjKey, ...]:
        """The keys to delete, given ``head`` and the ref's other recent HEADs."""
        ...


@dataclass(frozen=True, slots=True)
class CommitRequest:
    requirements: tuple[Requirement, ...] = ()
    changes: tuple[Change, ...] = ()
    principal: str = "anonymous"
    operation: str = "commit"
    ref_action: RefAction = RefAction.UPDATE
    reset_to: int = 0  # with RefAction.RESET
    objects: tuple[NewObject, ...] = ()  # stored with the commit, all or nothing
    # Changes that record this request's outcome (an Idempotency-Key record), built from
    # the id the commit will have and applied after ``changes``, in the same commit; they
    # are not part of the outcome. A record that exists already fails the request.
    record: Record | None = None
    # Objects this commit deletes (a sweep): written in the same atomic write as its CAS.
    deletions: Deletions | None = None


@dataclass(frozen=True, slots=True)
class CommitOutcome:
    commit_id: int  # 0 when the ref was deleted
    seq: int
    entities: dict[EntityKey, Entity | None] = field(default_factory=dict)
    deleted: tuple[ObjKey, ...] = ()  # what the commit deleted (``CommitRequest.deletions``)


@dataclass(frozen=True, slots=True)
class EngineLimits:
    index: IndexLimits = field(default_factory=IndexLimits)
    max_object_bytes: int = DEFAULT_MAX_OBJECT_BYTES
    recent_heads: int = DEFAULT_RECENT_HEADS
    max_attempts: int = 10  # writes of one batch, the first included, while CAS is lost
    backoff_base_s: float = 0.005
    backoff_max_s: float = 0.5

    def __post_init__(self) -> None:
        _ = self.cas_retry  # limits the schedule cannot run are refused here, at startup

    @property
    def cas_retry(self) -> RetryPolicy:
        """The schedule of a batch whose compare-and-swap another process won."""
        return RetryPolicy(self.backoff_base_s, self.backoff_max_s, self.max_attempts)


class EntityLimits(Protocol):
    """Limits on how many namespaces, tables and views a catalog's tenant may hold,
    checked inside the commit that grows a count (``metastore.quotas``)."""

    def check(self, tenant: str, catalog: str, counts: Counts, grown: frozenset[Kind]) -> None:
        """Raise (nothing is written) if ``counts``, the catalog's counts after the
        commit, take its tenant past a limit on one of the ``grown`` kinds."""
        ...


class _State:
    """The entity state a request sees: the staged index over its base commit."""

    def __init__(self, index: IndexUpdate, objects: Objects) -> None:
        self.index = index
        self._objects = objects

    def get(self, key: EntityKey) -> Entity | None:
        value = self.index.get(key.encode())
        return None if value is None else self._objects.entity(value[1])

    def entity(self, obj_id: int) -> Entity:
        return self._objects.entity(obj_id)

    def has_children(self, namespace: tuple[str, ...]) -> bool:
        prefix = kind_prefix((), Kind.NAMESPACE) if not namespace else children_prefix(namespace)
        return next(self.index.items(prefix), None) is not None


def not_found(key: EntityKey) -> NotFound:
    what = f"{key.kind.label} {key.display()}"
    if key.kind is Kind.NAMESPACE:
        return NoSuchNamespace(f"namespace does not exist: {key.display()}")
    if key.kind is Kind.TABLE:
        return NoSuchTable(f"table does not exist: {key.display()}")
    if key.kind is Kind.VIEW:
        return NoSuchView(f"view does not exist: {key.display()}")
    return NotFound(f"{what} does not exist")


class CommitLogic:
    def __init__(
        self,
        codec: Codec,
        ids: SnowflakeGenerator,
        limits: EngineLimits,
        entity_limits: EntityLimits | None = None,
    ) -> None:
        self._codec = codec
        self._ids = ids
        self._limits = limits
        self._entity_limits = entity_limits
        self._encodings = RecentEncodings()
        # the stripes spills wrote lately (by object id): the next spill into one of them
        # encodes only what it changes
        self._stripes = RecentEncodings(capacity=STRIPE_ENCODINGS)
        self._stripe_refs = RecentStripeRefs()  # each recent commit's stripe list, encoded

    def prepare(
        self, objects: StagedObjects, head: Commit | None, request: CommitRequest, now_us: int
    ) -> tuple[Commit, dict[EntityKey, Entity | None]]:
        """Stage the objects of ``request`` on top of ``head``; raise on a logical failure."""
        commit_id = self._ids.next_id()
        previous = self._encodings.get(head.id) if head is not None else None
        index = IndexUpdate(_view(objects, head, previous), objects.stripe)
        state = _State(index, objects)
        for requirement in request.requirements:
            requirement.validate(state)
        results: dict[EntityKey, Entity | None] = {}
        recorded: list[CommitChange] = []
        for change in request.changes:
            self._apply(change, state, objects, now_us, results, recorded)
        if request.record is not None:
            for change in request.record(commit_id):
                self._apply(change, state, objects, now_us, {}, recorded)
        before = _counts_at(objects, head)
        counts = _tally(before, recorded)
        grown = counts.grown(before)
        if grown and self._entity_limits is not None:
            self._entity_limits.check(objects.tenant, objects.catalog, counts, grown)
        for new in request.objects:
            self._stage(objects, new.type, new.id, new.data, new.value, now_us)
        built = index.build(self._limits.index, self._ids.next_id, previous, self._stripes.get)
        for stripe_id, stripe in built.stripe_encodings.items():
            self._stripes.put(stripe_id, stripe)
        for stripe_id, entries in built.new_stripes:
            data = stripe_encode(self._codec, entries, built.stripe_data.get(stripe_id))
            self._stage(objects, INDEX.name, stripe_id, data, entries, now_us)
        stripes = tuple(built.stripes)
        commit = Commit(
            id=commit_id,
            parent=head.id if head is not None else 0,
            seq=head.seq + 1 if head is not None else 1,
            created_at_us=now_us,
            principal=request.principal,
            operation=request.operation,
            changes=tuple(recorded),
            index=tuple(built.embedded),
            stripes=stripes,
            index_size=built.embedded_size,
            counts=counts,
        )
        stripe_refs = self._stripe_refs.encoded(head.id if head is not None else None, stripes)
        encoded = commit.encode(self._codec, built.encoded.data, stripe_refs)
        self._stage(objects, COMMIT.name, commit.id, encoded, commit, now_us)
        self._encodings.put(commit.id, built.encoded)
        self._stripe_refs.put(commit.id, stripes, stripe_refs)
        return commit, results

    def _stage(
        self,
        objects: StagedObjects,
        type_name: str,
        obj_id: int,
        data: bytes,
        value: Any,
        now_us: int,
    ) -> None:
        if len(data) > self._limits.max_object_bytes:
            raise ValidationFailed(
                f"{type_name} object of {len(data)} bytes exceeds the object size limit of "
                f"{self._limits.max_object_bytes} bytes"
            )
        objects.stage(StoredObject(objects.key(type_name, obj_id), data, now_us), value)

    def _write_entity(
        self,
        objects: StagedObjects,
        state: _State,
        key: EntityKey,
        entity: Entity,
        obj_id: int,
        now_us: int,
    ) -> None:
        self._stage(objects, ENTITY.name, obj_id, entity.encode(self._codec), entity, now_us)
        state.index.put(key.encode(), (ENTITY.name, obj_id))

    def _apply(
        self,
        change: Change,
        state: _State,
        objects: StagedObjects,
        now_us: int,
        results: dict[EntityKey, Entity | None],
        recorded: list[CommitChange],
    ) -> None:
        key = change.key
        current = state.get(key)
        if isinstance(change, UndropEntity):
            key, current = self._undroppable(state, change)
            results[key] = None
            recorded.append(CommitChange(key.encode(), "DELETE"))
            key, action = change.key, "CREATE"
        elif isinstance(change, CreateEntity):
            self._check_creatable(state, key, current)
            action = "CREATE"
        elif current is None:
            raise not_found(key)
        elif isinstance(change, DropEntity):
            if key.kind not in dropped.KINDS:
                raise ValidationFailed("only a table or a view is dropped and kept")
            state.index.remove(key.encode())
            results[key] = None
            recorded.append(CommitChange(key.encode(), "DELETE"))
            key, action = dropped.record_key(current.entity_id), "CREATE"
            if state.get(key) is not None:  # cannot happen: one live entity per id
                raise AlreadyExists(f"{key.name} is kept already")
        elif isinstance(change, DeleteEntity):
            if key.kind is Kind.NAMESPACE and state.has_children(key.path):
                raise NotEmpty(f"namespace is not empty: {key.display()}")
            action = "DELETE"
        elif isinstance(change, RenameEntity):
            if change.to.kind is not key.kind:
                raise ValidationFailed("rename cannot change the kind of an entity")
            self._check_creatable(state, change.to, state.get(change.to))
            if key.kind is Kind.NAMESPACE and state.has_children(key.path):
                raise NotEmpty(f"cannot rename a non-empty namespace: {key.display()}")
            state.index.remove(key.encode())
            results[key] = None
            recorded.append(CommitChange(key.encode(), "DELETE"))
            key, action = change.to, "CREATE"
        else:
            assert isinstance(change, UpdateEntity)
            if current.attachments and change.attachments is None:
                # its metadata lives in the attached pieces (and its metadata.json): a bare
                # property or location change would make the two disagree
                raise ValidationFailed(
                    f"{key.display()} is an Iceberg {key.kind.label}: "
                    "change it through the Iceberg REST API"
                )
            action = "UPDATE"
        ctx = ApplyContext(new_id=self._ids.next_id(), now_us=now_us)
        entity = apply_change(change, current, ctx)
        records = location_index.Records(state.index, objects.entity)
        self._derive(location_index.release(current, entity, records), state, objects, now_us)
        if entity is None:
            state.index.remove(key.encode())
        else:
            self._write_entity(objects, state, key, entity, ctx.new_id, now_us)
        self._derive(location_index.claim(current, entity, records), state, objects, now_us)
        if isinstance(change, UndropEntity) and entity is not None:
            self._derive(location_index.reclaim(entity, records), state, objects, now_us)
        results[key] = entity
        recorded.append(CommitChange(key.encode(), action))

    def _derive(
        self, change: Change | None, state: _State, objects: StagedObjects, now_us: int
    ) -> None:
        """Apply a change the engine derives itself (a location record): staged with the
        commit like the index, but neither recorded among its changes nor in its outcome."""
        if change is None:
            return
        ctx = ApplyContext(new_id=self._ids.next_id(), now_us=now_us)
        entity = apply_change(change, state.get(change.key), ctx)
        if entity is None:
            state.index.remove(change.key.encode())
        else:
            self._write_entity(objects, state, change.key, entity, ctx.new_id, now_us)

    def _undroppable(self, state: _State, change: UndropEntity) -> tuple[EntityKey, Entity]:
        """The dropped record an undrop restores (404 if there is none, 409 if the name is
        taken), removed from the index."""
        if change.key.kind not in dropped.KINDS:
            raise ValidationFailed("only a table or a view is undropped")
        found = dropped.find(state.index, state.entity, change.key, change.entity_id)
        if found is None:
            which = "" if change.entity_id is None else f" with entity id {change.entity_id}"
            raise type(not_found(change.key))(
                f"no dropped {change.key.kind.label} {change.key.display()}{which} "
                "(never dropped, or purged, restored or collected since)"
            )
        self._check_creatable(state, change.key, state.get(change.key))
        state.index.remove(found.record.encode())
        return found.record, found.entity

    def _check_creatable(self, state: _State, key: EntityKey, current: Entity | None) -> None:
        """409 if ``key`` (``current``: its entity, as the caller read it from ``state``) or
        its other kind's twin exists, 404 without its namespace."""
        if current is not None:
            raise AlreadyExists(f"{key.kind.label} already exists: {key.display()}")
        if key.kind in (Kind.TABLE, Kind.VIEW):
            other = EntityKey(
                Kind.VIEW if key.kind is Kind.TABLE else Kind.TABLE, key.namespace, key.name
            )
            if state.get(other) is not None:
                raise AlreadyExists(f"a {other.kind.label} with that name exists: {key.display()}")
            if not key.namespace:
                raise ValidationFailed(f"a {key.kind.label} must live in a namespace")
        if key.namespace and state.get(EntityKey.namespace_key(key.namespace)) is None:
            raise NoSuchNamespace(f"namespace does not exist: {'.'.join(key.namespace)}")


def _view(objects: Objects, head: Commit | None, encoded: EncodedIndex | None) -> IndexView | None:
    """``head``'s index; its embedded keys from ``encoded`` (the encoding this engine built
    it with) when known, instead of listed again."""
    if head is None:
        return None
    if encoded is None or len(encoded.keys) != len(head.index):
        return objects.index(head)
    return IndexView(head.index, head.stripes, objects.stripe, encoded.keys)


def _counts_at(objects: Objects, head: Commit | None) -> Counts:
    """The catalog's counts at ``head`` (counted from its index if it predates them)."""
    if head is None:
        return Counts()
    return head.counts if head.counts is not None else count(objects.index(head))


def _tally(counts: Counts, recorded: Sequence[CommitChange]) -> Counts:
    """``counts`` after the creations and deletions a commit records (a rename records
    both, so it counts as neither)."""
    delta: dict[Kind, int] = {}
    for change in recorded:
        kind = counted_kind(change.key)
        if kind is not None and change.action != "UPDATE":
            delta[kind] = delta.get(kind, 0) + (1 if change.action == "CREATE" else -1)
    return counts.added(delta) if delta else counts


class Committer:
    """Runs batches of commit requests against one persistence (thread-safe per ref lane)."""

    def __init__(
        self,
        persistence: Persistence,
        codec: Codec,
        objects: Callable[[str, str], CatalogObjects],
        ids: SnowflakeGenerator,
        clock: Clock,
        limits: EngineLimits = EngineLimits(),
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
        self._limits = limits
        self._logic = CommitLogic(codec, ids, limits, entity_limits)
        self._sleep = sleep
        self._rng = rng or random.Random()
        self.cas_retries = 0

    def commit(self, ref_key: RefKey, request: CommitRequest) -> CommitOutcome:
        (result,) = self.commit_batch(ref_key, [request])
        if isinstance(result, MetastoreError):
            raise result
        return result

    def commit_batch(
        self, ref_key: RefKey, requests: Sequence[CommitRequest]
    ) -> list[CommitOutcome | MetastoreError]:
        if self._require_tenant and ref_key.catalog != SYSTEM_CATALOG:
            tenant = RefKey(ref_key.tenant, SYSTEM_CATALOG, MAIN_REF)
            if self._persistence.get_ref(tenant) is None:
                return [NoSuchTenant(f"tenant does not exist: {ref_key.tenant}")] * len(requests)
        base = self._objects(ref_key.tenant, ref_key.catalog)
        attempts = self._limits.cas_retry.start(sleep=self._sleep, rng=self._rng)
        while True:
            ref = self._persistence.get_ref(ref_key)
            staged = StagedObjects(base)
            results, update, deletes = self._run(staged, ref_key, ref, requests)
            if update is None:
                return results
            try:
                started = time.perf_counter()
                self._persistence.write([s for s, _ in staged.written], update, deletes)
                if self._write_time is not None:
                    self._write_time(time.perf_counter() - started)
            except RefConditionFailed:  # nothing was written: rebuild on the fresh HEAD
                self.cas_retries += 1
                if attempts.backoff():
                    continue
                busy = ServiceUnavailable(
                    f"gave up after {attempts.attempt} lost compare-and-swaps on "
                    f"{ref_key.name}; nothing was written, retry later"
                )
                return [busy if isinstance(r, CommitOutcome) else r for r in results]
            except ObjectConflict:
                raise
            except NotOwner as exc:  # nothing was written: the caller retries at the owner
                return [exc if isinstance(r, CommitOutcome) else r for r in results]
            except CommitStateUnknown as exc:  # the backend said so (cluster mode): no trace
                log.error("write of %d commits to %s: %s", len(requests), ref_key, exc.message)
                return [exc if isinstance(r, CommitOutcome) else r for r in results]
            except Exception as exc:
                log.exception("write of %d commits to %s failed", len(requests), ref_key)
                unknown = CommitStateUnknown(f"commit state unknown: {exc}")
                return [unknown if isinstance(r, CommitOutcome) else r for r in results]
            base.remember(staged.written)
            base.forget(deletes)
            return results

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
                    head = staged.commit(request.reset_to)
                    reset = True
                    results.append(CommitOutcome(head.id, head.seq))
                    continue
                if request.ref_action is RefAction.DELETE:
                    state = _State(IndexUpdate(staged.index(head), staged.stripe), staged)
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


def _describe(ref_key: RefKey) -> str:
    if ref_key.catalog:
        return f"catalog {ref_key.catalog!r} of tenant {ref_key.tenant!r}"
    return f"tenant {ref_key.tenant!r}"
