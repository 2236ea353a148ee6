"""The commit engine (seed 000 "Performing a Commit"), with group commit.

``CommitLogic.prepare`` turns one request into new immutable objects and a new
commit on top of a given HEAD: look up each entity in the index, check the
requirements, apply the changes (``metastore.model.changes``), write new entity
objects, update the index (spilling when it grows), write the commit.

``metastore.engine.committer`` runs batches of requests through it against a
persistence (group commit).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from metastore.engine import dropped, location_index
from metastore.engine.objects import Objects, StagedObjects
from metastore.errors import (
    AlreadyExists,
    NoSuchNamespace,
    NoSuchTable,
    NoSuchView,
    NotEmpty,
    NotFound,
    ValidationFailed,
)
from metastore.model.changes import (
    ApplyContext,
    Change,
    CreateEntity,
    DeleteEntity,
    DropEntity,
    PurgeDropped,
    RenameEntity,
    UndropEntity,
    UpdateEntity,
    apply_change,
)
from metastore.model.codec import Codec
from metastore.model.counts import Counts, count, counted_kind
from metastore.model.ids import SnowflakeGenerator
from metastore.model.index import IndexLimits, IndexUpdate, IndexView, RecentStripeRefs
from metastore.model.index_codec import EncodedIndex, RecentEncodings
from metastore.model.keys import EntityKey, Kind, ObjKey, children_prefix, kind_prefix
from metastore.model.objtypes import COMMIT, ENTITY, INDEX
from metastore.model.records import Commit, CommitChange, Entity, stripe_encode
from metastore.model.requirements import Requirement
from metastore.persistence.base import DEFAULT_RECENT_HEADS, StoredObject
from metastore.util.retry import RetryPolicy

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
    """What a garbage-collection commit deletes (``metastore.engine.sweep.SweepPlan``), decided
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
    # One wait per local file this commit names whose syncs are still running
    # (``durable_writes.begin_file``): each returns once its file is durable or raises a
    # ``MetastoreError`` (the file is gone). The committer calls them after building the
    # commit, just before the write that makes it durable, and a commit whose wait
    # raised is not written: no durable commit ever names a file a crash could take back.
    durable_first: tuple[Callable[[], None], ...] = ()
    # The caller's check for taking a dropped table's kept location: whether it may read
    # a table's data (``location_index.check_taking``), asked of every table this commit
    # puts at a location, on the state the commit builds, after its earlier changes (one
    # of which may have handed the location back to a kept table). None: a commit of the
    # node's own, with no caller to ask.
    may_read: Callable[[EntityKey], bool] | None = None


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
    checked inside the commit that grows a count (``metastore.catalog.quotas``)."""

    def check(self, tenant: str, catalog: str, counts: Counts, grown: frozenset[Kind]) -> None:
        """Raise (nothing is written) if ``counts``, the catalog's counts after the
        commit, take its tenant past a limit on one of the ``grown`` kinds."""
        ...


class EntityState:
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
        state = EntityState(index, objects)
        for requirement in request.requirements:
            requirement.validate(state)
        results: dict[EntityKey, Entity | None] = {}
        recorded: list[CommitChange] = []
        for change in request.changes:
            self._apply(change, state, objects, now_us, results, recorded, request.may_read)
        if request.record is not None:
            for change in request.record(commit_id):
                self._apply(change, state, objects, now_us, {}, recorded, None)
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

    def check_reset(self, objects: Objects, head: Commit, target: Commit) -> None:
        """A reset moves HEAD back to ``target``, and what it held comes back: a count it
        grows is checked against the limits like any commit's (nothing written past one)."""
        before, after = _counts_at(objects, head), _counts_at(objects, target)
        grown = after.grown(before)
        if grown and self._entity_limits is not None:
            self._entity_limits.check(objects.tenant, objects.catalog, after, grown)

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
        state: EntityState,
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
        state: EntityState,
        objects: StagedObjects,
        now_us: int,
        results: dict[EntityKey, Entity | None],
        recorded: list[CommitChange],
        may_read: Callable[[EntityKey], bool] | None,
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
            record = dropped.purging_key if change.purge else dropped.record_key
            key, action = record(current.entity_id), "CREATE"
            if state.get(key) is not None:  # cannot happen: one live entity per id
                raise AlreadyExists(f"{key.name} is kept already")
        elif isinstance(change, PurgeDropped):
            if key.kind is not Kind.SYSTEM or not key.name.startswith(dropped.PREFIX):
                raise ValidationFailed("only a dropped table or view kept for undrop is purged")
            state.index.remove(key.encode())
            results[key] = None
            recorded.append(CommitChange(key.encode(), "DELETE"))
            key, action = dropped.purging_key(current.entity_id), "CREATE"
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
        if may_read is not None:
            location_index.check_taking(current, entity, records, may_read)
        self._derive(location_index.claim(current, entity, records), state, objects, now_us)
        if isinstance(change, UndropEntity) and entity is not None:
            self._derive(location_index.reclaim(entity, records), state, objects, now_us)
        results[key] = entity
        recorded.append(CommitChange(key.encode(), action))

    def _derive(
        self, change: Change | None, state: EntityState, objects: StagedObjects, now_us: int
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

    def _undroppable(self, state: EntityState, change: UndropEntity) -> tuple[EntityKey, Entity]:
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

    def _check_creatable(self, state: EntityState, key: EntityKey, current: Entity | None) -> None:
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
