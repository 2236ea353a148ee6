"""Iceberg tables over the commit engine: load, create, commit (one or many), register, drop.

A table commit is optimistic: read the entity and its metadata pieces, check the
client's Iceberg requirements, apply its updates with pyiceberg's reducer, write
the new metadata.json, then commit the new pieces with ``AssertVersion`` on every
table touched. If another commit changed one of those tables in between, the
whole request is redone on the fresh state (the client's requirements decide
whether it still applies, ``REBASES``; a single-table request takes its turn
behind the others to the same table on this node from its first attempt, ``turns``); only
a failed Iceberg requirement reaches the client as 409, unless the table lets
the server rebase a stale append (``rebase``). Several tables in one request are one commit: all
change or none does. Reading the store, building metadata and file I/O run in a
worker thread, never on the event loop; only the commit itself is awaited there.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from functools import partial
from typing import Any

from pyiceberg.table.metadata import (
    TableMetadata,
)
from pyiceberg.table.update import (
    AssertCreate,
    AssignUUIDUpdate,
)

from metastore.catalog.expiry import finish_purge
from metastore.catalog.service import Metastore
from metastore.engine import dropped
from metastore.engine.commits import CommitOutcome, CommitRequest
from metastore.engine.location_index import MayRead
from metastore.errors import (
    BadRequest,
    CommitConflict,
    CommitStateUnknown,
    MetastoreError,
    NoSuchTable,
    StorageUnavailable,
)
from metastore.iceberg import pieces, rebase
from metastore.iceberg.answer_cache import DEFAULT_BYTES, AnswerKey
from metastore.iceberg.files import TableFiles, Warehouse
from metastore.iceberg.manifest_lists import ManifestLists
from metastore.iceberg.metadata_json import MetadataFile, metadata_document
from metastore.iceberg.purge import Purge, PurgeCounters, PurgeReport
from metastore.iceberg.table_paths import added_paths, check_paths, check_properties
from metastore.iceberg.table_reads import TableReads
from metastore.iceberg.table_state import (
    REBASES,
    TEXT,
    Prepared,
    TableChange,
    TableState,
    empty_metadata,
    first_line,
    iceberg_errors,
    placeholder,
    still_there,
)
from metastore.iceberg.table_updates import apply_updates
from metastore.iceberg.turns import Turns
from metastore.model.changes import Change, CreateEntity, DropEntity, UpdateEntity
from metastore.model.codec import Codec
from metastore.model.keys import EntityKey, Kind
from metastore.model.locations import linked_below, normalize
from metastore.model.records import Entity
from metastore.model.requirements import AssertEntityId, AssertStill, AssertVersion, Requirement

log = logging.getLogger(__name__)


class Tables(TableReads):
    """Creates, commits (one table or many, as one commit), drops and purges, over the
    reads of ``TableReads``."""

    def __init__(
        self,
        metastore: Metastore,
        codec: Codec,
        warehouse: Warehouse,
        answer_bytes: int = DEFAULT_BYTES,
    ) -> None:
        super().__init__(metastore, codec, warehouse, answer_bytes)
        self.purges = PurgeCounters()
        self._turns = Turns()
        self._manifest_lists = ManifestLists(read_limit=warehouse.read_limit)  # by rebases

    async def create(
        self,
        tenant: str,
        catalog: str,
        key: EntityKey,
        metadata: TableMetadata,
        principal: str,
        metadata_location: str,
        *,
        may_read: MayRead,
        write_file: bool = True,
        extra: Sequence[Change] = (),
        replace: TableState | None = None,
    ) -> TableState:
        """Store a new table (or, with ``replace``, overwrite one: register with overwrite).

        ``write_file``: write ``metadata`` to ``metadata_location`` first (create); a
        registered table's file exists already. ``may_read``: the caller's check for
        taking a dropped table's kept location (``CommitRequest.may_read``).
        """
        prepared = await asyncio.to_thread(
            self.prepare_create,
            tenant,
            catalog,
            key,
            metadata,
            metadata_location,
            write_file,
            replace,
        )
        return await self.commit_create(
            tenant,
            catalog,
            key,
            prepared,
            principal,
            metadata_location,
            write_file,
            extra,
            may_read=may_read,
        )

    async def commit_create(
        self,
        tenant: str,
        catalog: str,
        key: EntityKey,
        prepared: Prepared,
        principal: str,
        metadata_location: str,
        write_file: bool = True,
        extra: Sequence[Change] = (),
        *,
        may_read: MayRead,
    ) -> TableState:
        """Commit a create made ready by ``prepare_create`` (in the caller's thread)."""
        still: tuple[Requirement, ...] = ()
        if not write_file:  # a register: its file is still there (``still_there``)
            still = (AssertStill(partial(still_there, prepared.io, metadata_location)),)
        request = CommitRequest(
            (*prepared.requirements, *still),
            (*prepared.changes, *extra),
            principal,
            "create table" if write_file else "register table",
            objects=tuple(prepared.objects.values()),
            may_read=may_read,
        )
        try:
            await self._metastore.commit(tenant, catalog, request)
        except MetastoreError as exc:
            await self._discard_unless_unknown(exc, prepared)
            raise
        result = prepared.results[0]
        return TableState(key, placeholder(key), result["metadata"], metadata_location)

    def prepare_create(
        self,
        tenant: str,
        catalog: str,
        key: EntityKey,
        metadata: TableMetadata,
        metadata_location: str,
        write_file: bool,
        replace: TableState | None,
    ) -> Prepared:
        """A create made ready (blocking): its metadata file written (``write_file``)
        and its pieces split; ``commit_create`` commits it."""
        self._metastore.get_entity(tenant, catalog, EntityKey.namespace_key(key.namespace))
        prepared = Prepared(self.warehouse.files(tenant, catalog))
        document = metadata_document(metadata)  # before any file: a refused one writes nothing
        if write_file:
            # synced before it returns: a new table's four syncs outlast the work left
            # before its commit, and running them meanwhile cost more CPU than it saved
            prepared.io.write_text(document.text, metadata_location)
            prepared.files.append(metadata_location)
        try:
            self._stage(
                tenant, catalog, key, replace, metadata, metadata_location, prepared, document
            )
        except BaseException:  # nothing refers to the file yet
            prepared.discard()
            raise
        return prepared

    # --- commits -----------------------------------------------------------------------

    async def commit(
        self,
        tenant: str,
        catalog: str,
        changes: Sequence[TableChange],
        principal: str,
        extra: Callable[[list[dict[str, Any]]], Sequence[Change]] = lambda _: (),
        *,
        may_read: MayRead,
    ) -> list[dict[str, Any]]:
        """Apply every table change in one atomic commit; returns each table's new result.
        ``may_read``: whether the caller may read a table's data, which the commit asks of
        a change that makes a table or moves one (``CommitRequest.may_read``)."""
        keys = [c.key for c in changes]
        if len(set(keys)) != len(keys):
            raise BadRequest("a transaction may change each table at most once")
        attempts = REBASES.start()
        async with AsyncExitStack() as turn:
            if len(changes) == 1:  # ``turns``, from the first attempt
                key = (tenant, catalog, *keys)
                if self._turns.busy(key) and rebase.is_append(changes[0].updates):
                    await asyncio.to_thread(self._warm, tenant, catalog, changes[0])
                await turn.enter_async_context(self._turns.turn(key))
            while True:
                prepared = await asyncio.to_thread(self._prepare, tenant, catalog, changes)
                if not prepared.changes:
                    return prepared.results
                request = CommitRequest(
                    tuple(prepared.requirements),
                    (*prepared.changes, *extra(prepared.results)),
                    principal,
                    "commit table" if len(changes) == 1 else f"commit {len(changes)} tables",
                    objects=tuple(prepared.objects.values()),
                    durable_first=tuple(prepared.durable),
                    may_read=may_read,
                )
                try:
                    await self._metastore.commit(tenant, catalog, request)
                except CommitConflict:  # another commit moved a table: redo on the fresh state
                    await self._discard(prepared)
                    if not await attempts.abackoff():
                        raise
                    log.debug("table commit lost to another commit: attempt %d", attempts.attempt)
                    continue
                except MetastoreError as exc:
                    await self._discard_unless_unknown(exc, prepared)
                    raise
                for version, model, snapshots in prepared.models:
                    self._models.put(version, model, snapshots)
                for answer, text in prepared.answers:
                    self.answers.put(answer, text)
                return prepared.results

    def _warm(self, tenant: str, catalog: str, change: TableChange) -> None:
        """Read the manifest list of an append waiting for its turn (``rebase.warm``), on
        a table that may rebase it."""
        try:
            entity = self._metastore.get_entity(tenant, catalog, change.key)
            settings = self._metastore.get_catalog(tenant, catalog).properties
            location = self.core_of(tenant, catalog, entity).get("location")
        except MetastoreError:  # best effort: the commit itself answers what is wrong
            return
        if rebase.enabled(entity.properties, settings) and isinstance(location, str):
            io = self.warehouse.files(tenant, catalog).io
            rebase.warm(change.updates, location, io, self._manifest_lists)

    def _prepare(self, tenant: str, catalog: str, changes: Sequence[TableChange]) -> Prepared:
        prepared = Prepared(self.warehouse.files(tenant, catalog))
        try:
            for change in changes:
                self._prepare_one(tenant, catalog, prepared.io, change, prepared)
        except BaseException:
            prepared.discard()
            raise
        return prepared

    def _prepare_one(
        self, tenant: str, catalog: str, files: TableFiles, change: TableChange, prepared: Prepared
    ) -> None:
        current = self._current(tenant, catalog, change.key)
        creating = any(isinstance(r, AssertCreate) for r in change.requirements)
        if current is None and not creating:
            raise NoSuchTable(f"table does not exist: {change.key.display()}")
        base, base_snapshots = self._base(tenant, catalog, current)
        change = self._checked(tenant, catalog, change, base, prepared)
        if base is not None:
            for update in change.updates:
                if isinstance(update, AssignUUIDUpdate) and update.uuid != base.table_uuid:
                    raise BadRequest("the table uuid is owned by the server and cannot change")
        if current is not None and not change.updates:
            prepared.results.append(current.result())
            return
        with iceberg_errors():
            previous = current.metadata_location if current is not None else None
            empty = empty_metadata() if base is None else base  # built only for a create
            new = apply_updates(base, change.updates, previous, empty)
        previous = current.metadata_location if current is not None else None
        if not new.location:
            location = self.default_location(tenant, catalog, change.key)
        elif base is not None and new.location == base.location:
            location = self.warehouse.check_kept_location(
                new.location, tenant, catalog, "table location"
            )
        else:
            location = self.warehouse.check_location(
                new.location, tenant, catalog, "table location"
            )
        if location != new.location:
            new = new.model_copy(update={"location": location})
        check_properties(new.properties, location)
        rebase.check_setting(new.properties, base.properties if base is not None else None)
        check_paths(added_paths(new, base, previous), location)
        location = self.warehouse.new_metadata_location(new, previous)
        document = metadata_document(new, base, base_snapshots)  # the spec's JSON, as written
        files.write_text(document.text, location, durable=prepared.durable)
        prepared.files.append(location)
        self._stage(tenant, catalog, change.key, current, new, location, prepared, document)

    def _checked(
        self,
        tenant: str,
        catalog: str,
        change: TableChange,
        base: TableMetadata | None,
        prepared: Prepared,
    ) -> TableChange:
        """``change`` if ``base`` meets its requirements; else, when the table (or its
        catalog) enables it, the change rebased on ``base`` (``rebase``); else 409."""
        try:
            with iceberg_errors():
                for requirement in change.requirements:
                    requirement.validate(base)
            return change
        except CommitConflict as conflict:
            if base is None or not rebase.enabled(
                base.properties, self._metastore.get_catalog(tenant, catalog).properties
            ):
                raise
            try:
                with iceberg_errors():  # the table's own settings (a codec) may be bad
                    requirements, updates = rebase.rebased_commit(
                        change.requirements,
                        change.updates,
                        base,
                        prepared.io.io,
                        prepared.files,
                        self._manifest_lists,
                        durable=prepared.io.make_durable,
                    )
            except rebase.Refused as why:
                raise CommitConflict(f"{conflict.message}; not rebased: {why.message}") from None
            except OSError as exc:  # reading the lists or writing the rebased one
                raise StorageUnavailable(f"cannot rebase the append: {first_line(exc)}") from None
            return TableChange(change.key, requirements, updates)

    def _stage(
        self,
        tenant: str,
        catalog: str,
        key: EntityKey,
        current: TableState | None,
        new: TableMetadata,
        metadata_location: str,
        prepared: Prepared,
        document: MetadataFile,
    ) -> None:
        text, metadata = document.text, document.document
        split = pieces.split(
            self._codec,
            pieces.TABLE_LAYOUT,
            metadata,
            metadata_location,
            current.entity.attachments if current is not None else {},
            current.metadata if current is not None else None,
            self.loader(tenant, catalog),
        )
        properties = dict(new.properties)
        location = str(normalize(new.location, "table location"))  # as the location index has it
        if current is None:
            prepared.changes.append(CreateEntity(key, properties, location, split.attachments))
        else:
            removals = tuple(k for k in current.entity.properties if k not in properties)
            prepared.requirements += [
                AssertEntityId(key, current.entity.entity_id),
                AssertVersion(key, current.entity.version),
            ]
            prepared.changes.append(
                UpdateEntity(key, properties, removals, location, split.attachments)
            )
        for obj in split.objects:
            prepared.objects[obj.id] = obj
        prepared.results.append(
            {"metadata-location": metadata_location, "metadata": metadata, "config": {}, TEXT: text}
        )
        if current is not None:  # what loads of the new version read (a create's id is unknown)
            entity_id, version = current.entity.entity_id, current.entity.version + 1
            version_key = (tenant, catalog, entity_id, version)
            prepared.models.append((version_key, new, document.snapshots))
            answer = AnswerKey.of(
                tenant, catalog, entity_id, version, metadata_location, properties, "all"
            )
            prepared.answers.append((answer, text))

    async def _discard_unless_unknown(self, exc: MetastoreError, prepared: Prepared) -> None:
        """A failed commit wrote nothing, so its metadata files are garbage; but when the
        outcome is unknown the commit may have landed and reference them: keep them.
        (Anything that is not a ``MetastoreError`` also keeps them: an orphan file is
        harmless, a deleted one that a commit references is a broken table.)"""
        if not isinstance(exc, CommitStateUnknown):
            await self._discard(prepared)

    async def _discard(self, prepared: Prepared) -> None:
        await asyncio.to_thread(prepared.discard)

    # --- drop --------------------------------------------------------------------------

    async def drop(
        self,
        tenant: str,
        catalog: str,
        key: EntityKey,
        purge: bool,
        principal: str,
        extra: Sequence[Change] = (),
    ) -> CommitOutcome:
        """Drop a table: with ``purge`` delete it and its files at once, else keep it,
        restorable, until garbage collection collects it (``metastore.engine.dropped``). A purge's
        drop moves the table to its purging record, which holds the location until the
        files are deleted and is deleted then; a purge a crash cut short is done again by
        the catalog's next expiry (``metastore.catalog.expiry``)."""
        entity, state = await asyncio.to_thread(self._dropped, tenant, catalog, key, purge)
        request = CommitRequest(
            (AssertEntityId(key, entity.entity_id), AssertVersion(key, entity.version)),
            (DropEntity(key, principal, purge=purge), *extra),
            principal,
            "drop table" + (" (purge)" if purge else ""),
        )
        with self._metastore.purges.run(tenant, catalog, entity.entity_id):
            outcome = await self._metastore.commit(tenant, catalog, request)
            if state is not None:
                await asyncio.to_thread(self._purge, tenant, catalog, state, entity.entity_id)
                record = dropped.purging_key(entity.entity_id)
                await finish_purge(self._metastore, tenant, catalog, record, principal)
        return outcome

    def _dropped(
        self, tenant: str, catalog: str, key: EntityKey, purge: bool
    ) -> tuple[Entity, TableState | None]:
        """The table to drop, and with ``purge`` its metadata (read before it is gone)."""
        entity = self._metastore.get_entity(tenant, catalog, key)
        return entity, self.state_of(tenant, catalog, entity) if purge else None

    @staticmethod
    def has_files(entity: Entity) -> bool:
        """Whether a dropped ``entity`` has files of its own that its purge deletes (not a
        view, nor a table of the native API)."""
        return entity.kind is Kind.TABLE and pieces.CORE in entity.attachments

    def purge_dropped(self, tenant: str, catalog: str, entity: Entity) -> None:
        """Delete the files of a dropped table moved to its purging record by the expiry
        (``metastore.catalog.expiry``; blocking, after that commit, as a purge runs after its
        drop). Its metadata pieces are still stored: a later sweep takes them."""
        if not self.has_files(entity):
            return
        try:
            state = self.state_of(tenant, catalog, entity)
        except MetastoreError as exc:
            log.warning("purge of dropped %s failed: %s", entity.key.display(), exc.message)
            self.purges.add(PurgeReport(failed=1))
            return
        self._purge(tenant, catalog, state, entity.entity_id)

    def _purge(self, tenant: str, catalog: str, state: TableState, entity_id: int) -> None:
        """Delete the dropped table's own files (``purge.py``). The drop has committed:
        whatever goes wrong now is logged and counted, never the request's outcome."""
        report = PurgeReport()
        try:
            metadata = state.model()
            location = normalize(metadata.location, "table location", file=True)
            if linked_below(location, self.warehouse.catalog_roots(tenant, catalog)):
                # its folder is (now) a link: containment in it would mean another one's
                log.warning(
                    "purge of %s refused: its location %s is reached through a symbolic "
                    "link below the catalog's storage root; nothing deleted",
                    state.key.display(),
                    location,
                )
                report.failed += 1
                self.purges.add(report)
                return
            # its purging record holds the location meanwhile, so nothing claims it or
            # nests in it; kept: what a table inside it holds, and all of it while a kept
            # one that yielded it to this table is owed it back
            held = self.records(tenant, catalog).kept_by_purge(location, entity_id)
            io = self.warehouse.files(tenant, catalog).io
            limit = self.warehouse.read_limit
            purge = Purge(metadata, state.metadata_location, held, io, limit)
            report = purge.report
            purge.run()
        except Exception as exc:
            log.warning("purge of %s failed: %s: %s", state.key.display(), type(exc).__name__, exc)
            report.failed += 1
        self.purges.add(report)
        log.info(
            "purged %s: %d files deleted, %d kept (outside its location), %d failed",
            state.key.display(),
            report.deleted,
            report.kept,
            report.failed,
        )
