"""The metastore service: tenants, catalogs and their entities over the commit engine.

A tenant exists iff its tenant ref ``(tenant, "", "main")`` exists; a catalog
iff its ref ``(tenant, catalog, "main")`` exists. Each ref's root commit holds
the tenant's or catalog's own record (``keys.TENANT_RECORD`` /
``keys.CATALOG_RECORD``), so creating one is a single atomic ref creation and
its properties are versioned like every other entity. Reads never take a lane:
they resolve HEAD (or a given commit, for point-in-time reads) and read
immutable objects, most of them from the cache.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, ParamSpec, Protocol, TypeVar

from metastore.catalog.consistency import WRITTEN, ConsistencyToken
from metastore.catalog.purging import RunningPurges
from metastore.engine.commits import CommitOutcome, CommitRequest, Record, RefAction, not_found
from metastore.engine.dropped import Dropped
from metastore.engine.dropped import scan as scan_dropped
from metastore.engine.lanes import CommitLanes
from metastore.engine.location_index import Records
from metastore.engine.object_cache import ObjectCache
from metastore.engine.objects import CatalogObjects
from metastore.engine.paging import (
    PageToken,
    check_page_size,
    decode_token,
    encode_token,
    fingerprint,
)
from metastore.engine.sweep import SweepCounts, SweepPlan, SweepResult, check_candidates
from metastore.engine.tasks import Tasks
from metastore.errors import (
    CommitConflict,
    InvalidPageToken,
    NoSuchCatalog,
    NoSuchCommit,
    NoSuchTenant,
    NotEmpty,
    NotFound,
)
from metastore.model.changes import Change, CreateEntity, UpdateEntity
from metastore.model.codec import Codec
from metastore.model.index import IndexView
from metastore.model.keys import (
    CATALOG_RECORD,
    MAIN_REF,
    SYSTEM_CATALOG,
    TENANT_RECORD,
    EntityKey,
    Kind,
    ObjKey,
    RefKey,
    kind_prefix,
)
from metastore.model.names import check_system_name
from metastore.model.records import Commit, Entity
from metastore.model.requirements import AssertEmpty, AssertVersion, Requirement
from metastore.persistence.base import Persistence, Ref
from metastore.util.clock import Clock, SystemClock
from metastore.util.memory_only import WouldWait, memory_only

T = TypeVar("T")
P = ParamSpec("P")
Shows = Callable[[str, Entity], bool]  # which tenants or catalogs a listing keeps


def _shows_all(name: str, entity: Entity) -> bool:
    return True


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: list[T]
    next_token: str | None


def tenant_ref(tenant: str) -> RefKey:
    return RefKey(tenant, SYSTEM_CATALOG, MAIN_REF)


def catalog_ref(tenant: str, catalog: str) -> RefKey:
    return RefKey(tenant, catalog, MAIN_REF)


class LeaseGate(Protocol):
    """The node-id lease a serving node mints ids under (``metastore.engine.lease_keeper``)."""

    def holds(self) -> bool: ...

    async def renew_now(self) -> None: ...


class Metastore:
    def __init__(
        self,
        persistence: Persistence,
        codec: Codec,
        cache: ObjectCache,
        lanes: CommitLanes,
        lease: LeaseGate | None = None,
        consistency: Callable[[str, str], ConsistencyToken | None] | None = None,
        clock: Clock | None = None,
    ) -> None:
        """``lease``: a write first renews a lease that has run out (None: the ids are
        never leased out from under this process, as in tests and tools)."""
        self.persistence = persistence
        self._codec = codec
        self._cache = cache
        self._lanes = lanes
        self._lease = lease
        self._consistency = consistency  # cluster mode: the token covering a write
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.tasks = Tasks(persistence, codec, self.clock)  # batch jobs' leases (blocking)
        # the purges this process runs now (``metastore.catalog.purging``)
        self.purges = RunningPurges()
        self.sweeps = SweepCounts()
        # told the tenant after each commit of this node to a tenant's own records
        self.tenant_changed: list[Callable[[str], None]] = []
        # ``read_point``s answered on the event loop and handed to a thread (counted on
        # the loop, the only thread that calls it)
        self.point_reads_on_loop = 0
        self.point_reads_in_thread = 0

    @property
    def codec(self) -> Codec:
        return self._codec

    def objects(self, tenant: str, catalog: str) -> CatalogObjects:
        return CatalogObjects(self.persistence, self._codec, self._cache, tenant, catalog)

    # --- reads -------------------------------------------------------------------------

    async def read(self, function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``function(*args, **kwargs)`` in a worker thread: how a coroutine runs a read.

        Every read below blocks: it reaches RocksDB (the embedded store or the cluster
        view) for refs, commits, index stripes and entities, a listing for many of
        them. Handlers await them through here so the event loop keeps serving while
        a read waits on the disk. The threads are the default executor's, not the
        commit threads, so reads never queue behind a batch's durable write.
        """
        return await asyncio.to_thread(function, *args, **kwargs)

    async def read_point(self, function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``read`` for a read of a few keys (a ref, an entity, a table load): run on
        the event loop when memory holds everything it needs, else in a worker thread
        (``metastore.util.memory_only``). A listing only with a bound of its own
        (``listing.LOOP_NAMES``): its work grows with what it lists, and the loop would
        wait for all of it."""
        try:
            with memory_only():
                found = function(*args, **kwargs)
        except WouldWait:
            self.point_reads_in_thread += 1
            return await asyncio.to_thread(function, *args, **kwargs)
        except BaseException:  # a 404 and the like, answered on the loop all the same
            self.point_reads_on_loop += 1
            raise
        self.point_reads_on_loop += 1
        return found

    def get_ref(self, tenant: str, catalog: str) -> Ref:
        ref = self.persistence.get_ref(catalog_ref(tenant, catalog))
        if ref is None:
            self.check_tenant(tenant)
            if catalog == SYSTEM_CATALOG:
                raise NoSuchTenant(f"tenant does not exist: {tenant}")
            raise NoSuchCatalog(f"catalog does not exist: {catalog}")
        return ref

    def check_tenant(self, tenant: str) -> None:
        if self.persistence.get_ref(tenant_ref(tenant)) is None:
            raise NoSuchTenant(f"tenant does not exist: {tenant}")

    def head(self, tenant: str, catalog: str, at: int | None = None) -> Commit:
        """HEAD of a catalog, or the given commit (point-in-time reads)."""
        objects = self.objects(tenant, catalog)
        if at is None:
            return objects.commit(self.get_ref(tenant, catalog).head)
        self.get_ref(tenant, catalog)
        return objects.commit(at)

    def location_records(self, tenant: str, catalog: str) -> Records:
        """The locations held by the catalog's tables and views, at HEAD (blocking)."""
        objects = self.objects(tenant, catalog)
        index = objects.index(self.head(tenant, catalog))
        assert index is not None
        return Records(index, objects.entity)

    def _view(self, tenant: str, catalog: str, commit: Commit) -> IndexView:
        view = self.objects(tenant, catalog).index(commit)
        assert view is not None
        return view

    def has_entity(self, tenant: str, catalog: str, key: EntityKey) -> bool:
        """Whether ``key`` exists at HEAD (False too when its catalog or tenant does not)."""
        try:
            self.get_entity(tenant, catalog, key)
        except NotFound:
            return False
        return True

    def get_entity(
        self, tenant: str, catalog: str, key: EntityKey, at: int | None = None
    ) -> Entity:
        commit = self.head(tenant, catalog, at)
        value = self._view(tenant, catalog, commit).get(key.encode())
        if value is None:
            raise not_found(key)
        return self.objects(tenant, catalog).entity(value[1])

    def list_entities(
        self,
        tenant: str,
        catalog: str,
        namespace: tuple[str, ...],
        kind: Kind,
        page_token: str | None = None,
        page_size: int | None = None,
        at: int | None = None,
        name_prefix: str = "",
        shows: Callable[[str], bool] | None = None,
    ) -> Page[Entity]:
        """Entities of ``kind`` directly in ``namespace`` in name order, only those whose
        name starts with ``name_prefix`` (system records of one sort, e.g. ``principal:``)
        and, given ``shows``, those whose name (after ``name_prefix``) it keeps: what the
        caller may see. The filter runs before a page is cut, so a page token only carries
        a shown name."""
        size = check_page_size(page_size)
        prefix = kind_prefix(namespace, kind) + name_prefix.encode()
        listing = fingerprint(tenant, catalog, prefix)
        after: bytes | None = None
        if page_token:
            token = decode_token(page_token, listing)
            try:
                commit = self.head(tenant, catalog, token.commit_id)
            except NoSuchCommit:
                raise InvalidPageToken("invalid page token: unknown snapshot") from None
            after = token.after
        else:
            commit = self.head(tenant, catalog, at)
        view = self._view(tenant, catalog, commit)
        if namespace and view.get(EntityKey.namespace_key(namespace).encode()) is None:
            raise not_found(EntityKey.namespace_key(namespace))
        objects = self.objects(tenant, catalog)
        items: list[Entity] = []
        last = b""
        for key, value in view.items(prefix, after):
            if shows is not None and not shows(key[len(prefix) :].decode()):
                continue
            if len(items) == size:
                return Page(items, encode_token(PageToken(commit.id, last), listing))
            items.append(objects.entity(value[1]))
            last = key
        return Page(items, None)

    def list_dropped(
        self,
        tenant: str,
        catalog: str,
        namespace: tuple[str, ...],
        kind: Kind,
        shows: Callable[[str], bool] | None = None,
    ) -> list[Dropped]:
        """The dropped (kept) entities of ``kind`` that lived directly in ``namespace``, at
        HEAD, dropped last first; given ``shows``, those whose name it keeps."""
        commit = self.head(tenant, catalog)
        objects = self.objects(tenant, catalog)
        found = [
            d
            for d in scan_dropped(self._view(tenant, catalog, commit), objects.entity)
            if d.key.kind is kind
            and d.key.namespace == namespace
            and (shows is None or shows(d.key.name))
        ]
        return sorted(found, key=lambda d: (-d.dropped_at_us, d.entity.entity_id))

    def list_commits(
        self, tenant: str, catalog: str, page_token: str | None, page_size: int | None
    ) -> Page[Commit]:
        """History of the main ref, newest first; a token resumes at a pinned commit.

        History older than garbage collection's retention window may be collected:
        the listing ends at the first parent that is gone (the end of the retained
        history), and a token that pinned a collected commit is refused."""
        size = check_page_size(page_size)
        listing = fingerprint(tenant, catalog, "commits")
        objects = self.objects(tenant, catalog)
        if page_token:
            start = decode_token(page_token, listing).commit_id
            self.get_ref(tenant, catalog)
        else:
            start = self.get_ref(tenant, catalog).head
        items: list[Commit] = []
        next_id = start
        while next_id and len(items) < size:
            try:
                commit = objects.commit(next_id)
            except NoSuchCommit:
                if page_token and not items:
                    raise InvalidPageToken("invalid page token: unknown commit") from None
                if not items and next_id == start:
                    raise  # HEAD itself: the store is damaged (audit reports it)
                next_id = 0  # a parent past the retained history: the listing ends here
                break
            items.append(commit)
            next_id = commit.parent
        token = encode_token(PageToken(next_id, b""), listing) if next_id else None
        return Page(items, token)

    # --- writes ------------------------------------------------------------------------

    @property
    def writable(self) -> bool:
        """Whether this node may mint ids now (its node-id lease holds)."""
        return self._lease is None or self._lease.holds()

    async def commit(self, tenant: str, catalog: str, request: CommitRequest) -> CommitOutcome:
        lease = self._lease
        if lease is not None and not lease.holds():
            await lease.renew_now()  # 503 when it cannot
        # the tenant is checked in the batch's thread (``Committer``): no hand-off here
        try:
            outcome = await self._lanes.submit(catalog_ref(tenant, catalog), request)
        finally:
            if catalog == SYSTEM_CATALOG:  # the tenant's own records (even if unknown)
                for changed in self.tenant_changed:
                    changed(tenant)
        if self._consistency is not None:
            WRITTEN.set(self._consistency(tenant, catalog))
        return outcome

    async def change(
        self,
        tenant: str,
        catalog: str,
        changes: Sequence[Change],
        principal: str,
        operation: str,
        requirements: Sequence[Requirement] = (),
        record: Record | None = None,
        may_read: Callable[[EntityKey], bool] | None = None,
    ) -> CommitOutcome:
        """Change entities of a catalog in one commit, iff every requirement holds: what
        creating, updating, dropping and renaming namespaces, tables and views, and a
        multi-entity commit, come down to on both APIs. ``record``: the idempotency
        record, built from the commit's id (``CommitRequest.record``); ``may_read``: the
        caller's check for taking a kept location (``CommitRequest.may_read``), for a
        change that may put a table at a location."""
        request = CommitRequest(
            tuple(requirements),
            tuple(changes),
            principal,
            operation,
            record=record,
            may_read=may_read,
        )
        return await self.commit(tenant, catalog, request)

    async def sweep(
        self,
        tenant: str,
        catalog: str,
        mark_head: int,
        candidates: Sequence[ObjKey],
        principal: str,
        dry_run: bool = False,
    ) -> SweepResult:
        """Delete the ``candidates`` a mark at ``mark_head`` found unreachable, except those
        a newer commit references again: one "gc" commit, planned inside the engine on
        the HEAD it builds on (``metastore.engine.sweep``). A dry run plans at HEAD, writes
        nothing."""
        plan = SweepPlan(mark_head, check_candidates(tenant, catalog, candidates), self._present)
        if dry_run:
            deleted = await self.read(self._plan_at_head, tenant, catalog, plan)
            return SweepResult(len(deleted), plan.spared, plan.missing, 0)
        request = CommitRequest(principal=principal, operation="gc", deletions=plan)
        outcome = await self.commit(tenant, catalog, request)
        result = SweepResult(len(outcome.deleted), plan.spared, plan.missing, outcome.commit_id)
        self.sweeps.add(result)
        return result

    def _present(self, keys: Sequence[ObjKey]) -> list[bool]:
        return [found is not None for found in self.persistence.get_objects(keys)]

    def _plan_at_head(self, tenant: str, catalog: str, plan: SweepPlan) -> tuple[ObjKey, ...]:
        ref = self.get_ref(tenant, catalog)
        objects = self.objects(tenant, catalog)
        return plan.plan(objects, objects.commit(ref.head), ref.recent)

    # --- tenants -----------------------------------------------------------------------

    async def create_tenant(
        self,
        name: str,
        properties: Mapping[str, str],
        principal: str,
        record: Record | None = None,
    ) -> Entity:
        check_system_name("tenant", name)
        request = CommitRequest(
            changes=(CreateEntity(TENANT_RECORD, properties),),
            principal=principal,
            operation="create tenant",
            ref_action=RefAction.CREATE,
            record=record,
        )
        outcome = await self.commit(name, SYSTEM_CATALOG, request)
        return _only(outcome)

    def get_tenant(self, name: str) -> Entity:
        return self._record(name, SYSTEM_CATALOG, TENANT_RECORD)

    def list_tenants(
        self, page_token: str | None, page_size: int | None, shows: Shows = _shows_all
    ) -> Page[tuple[str, Entity]]:
        """Tenants in name order, only those ``shows`` keeps (what the caller may see)."""
        refs = (r for r in self.persistence.scan_refs() if _is_main(r) and not r.key.catalog)
        return self._page_refs(refs, "tenants", page_token, page_size, TENANT_RECORD, shows)

    async def update_record(
        self,
        tenant: str,
        catalog: str,
        updates: Mapping[str, str],
        removals: Sequence[str],
        expected_version: int | None,
        principal: str,
        record: Record | None = None,
    ) -> Entity:
        key = TENANT_RECORD if catalog == SYSTEM_CATALOG else CATALOG_RECORD
        requirements: tuple[Requirement, ...] = ()
        if expected_version is not None:
            requirements = (AssertVersion(key, expected_version),)
        request = CommitRequest(
            requirements=requirements,
            changes=(UpdateEntity(key, dict(updates), tuple(removals)),),
            principal=principal,
            operation=f"update {key.name} properties",
            record=record,
        )
        return _only(await self.commit(tenant, catalog, request))

    async def delete_tenant(self, name: str, principal: str) -> None:
        if await self.read(self._has_catalogs, name):
            raise NotEmpty(f"tenant {name!r} still has catalogs; delete them first")
        request = CommitRequest(
            principal=principal, operation="delete tenant", ref_action=RefAction.DELETE
        )
        await self.commit(name, SYSTEM_CATALOG, request)

    # --- catalogs ----------------------------------------------------------------------

    async def create_catalog(
        self,
        tenant: str,
        name: str,
        properties: Mapping[str, str],
        principal: str,
        record: Record | None = None,
        extra: Sequence[Change] = (),
    ) -> Entity:
        """A new catalog; ``extra``: more records of its root commit (its storage)."""
        check_system_name("catalog", name)
        request = CommitRequest(
            changes=(CreateEntity(CATALOG_RECORD, properties), *extra),
            principal=principal,
            operation="create catalog",
            ref_action=RefAction.CREATE,
            record=record,
        )
        entity = (await self.commit(tenant, name, request)).entities[CATALOG_RECORD]
        assert entity is not None
        return entity

    def get_catalog(self, tenant: str, name: str) -> Entity:
        return self._record(tenant, name, CATALOG_RECORD)

    def list_catalogs(
        self, tenant: str, page_token: str | None, page_size: int | None, shows: Shows = _shows_all
    ) -> Page[tuple[str, Entity]]:
        """A tenant's catalogs in name order, only those ``shows`` keeps."""
        self.check_tenant(tenant)
        refs = (r for r in self.persistence.scan_refs(tenant) if _is_main(r) and r.key.catalog)
        listing = f"catalogs/{tenant}"
        return self._page_refs(refs, listing, page_token, page_size, CATALOG_RECORD, shows)

    async def delete_catalog(self, tenant: str, name: str, principal: str) -> None:
        request = CommitRequest(
            requirements=(AssertEmpty(()),),
            principal=principal,
            operation="delete catalog",
            ref_action=RefAction.DELETE,
        )
        try:
            await self.commit(tenant, name, request)
        except CommitConflict:
            raise NotEmpty(f"catalog {name!r} still has namespaces; drop them first") from None

    async def reset_ref(self, tenant: str, catalog: str, to: int, principal: str) -> Ref:
        request = CommitRequest(
            principal=principal, operation="reset", ref_action=RefAction.RESET, reset_to=to
        )
        await self.commit(tenant, catalog, request)
        return await self.read(self.get_ref, tenant, catalog)

    # --- helpers -----------------------------------------------------------------------

    def _has_catalogs(self, tenant: str) -> bool:
        self.check_tenant(tenant)
        return any(r.key.catalog for r in self.persistence.scan_refs(tenant))

    def _record(self, tenant: str, catalog: str, key: EntityKey) -> Entity:
        try:
            return self.get_entity(tenant, catalog, key)
        except NotFound as exc:
            if isinstance(exc, NoSuchTenant | NoSuchCatalog):
                raise
            raise NoSuchCatalog(f"catalog {catalog!r} has no record") from None

    def _page_refs(
        self,
        refs: Iterator[Ref],
        listing_name: str,
        page_token: str | None,
        page_size: int | None,
        record: EntityKey,
        shows: Shows,
    ) -> Page[tuple[str, Entity]]:
        """Tenants or catalogs (one per ref) in name order; tokens carry the last name.

        Filtering happens here, before a page is cut, so a page token only ever carries
        a name the caller was shown (never one of another tenant's)."""
        size = check_page_size(page_size)
        listing = fingerprint(listing_name)
        after = decode_token(page_token, listing).after if page_token else b""
        items: list[tuple[str, Entity]] = []
        last = b""
        for ref in refs:
            name = (ref.key.catalog or ref.key.tenant).encode()
            if name <= after:
                continue
            objects = self.objects(ref.key.tenant, ref.key.catalog)
            view = objects.index(objects.commit(ref.head))
            value = view.get(record.encode()) if view is not None else None
            if value is None:
                continue
            entity = objects.entity(value[1])
            if not shows(name.decode(), entity):
                continue
            if len(items) == size:  # a next page only if there is more to show
                return Page(items, encode_token(PageToken(0, last), listing))
            items.append((name.decode(), entity))
            last = name
        return Page(items, None)


def _is_main(ref: Ref) -> bool:
    return ref.key.name == MAIN_REF


def _only(outcome: CommitOutcome) -> Entity:
    for entity in outcome.entities.values():
        if entity is not None:
            return entity
    raise AssertionError("commit produced no entity")
