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
import json
import logging
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from pydantic import ValidationError as PydanticValidationError
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.exceptions import ValidationError as IcebergValidationError
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import (
    TableMetadata,
    TableMetadataUtil,
    TableMetadataV1,
    TableMetadataV3,
    new_table_metadata,
)
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.table.update import (
    AssertCreate,
    AssignUUIDUpdate,
    TableRequirement,
    TableUpdate,
)

from metastore.catalog.expiry import finish_purge
from metastore.catalog.service import Metastore
from metastore.engine import dropped
from metastore.engine.commits import CommitOutcome, CommitRequest, NewObject
from metastore.engine.location_index import MayRead, Records, check_free, yields_to
from metastore.engine.objects import MissingObject
from metastore.errors import (
    BadRequest,
    CommitConflict,
    CommitStateUnknown,
    MetastoreError,
    NoSuchTable,
    StorageUnavailable,
    ValidationFailed,
)
from metastore.iceberg import pieces, rebase
from metastore.iceberg.answer_cache import DEFAULT_BYTES, AnswerCache, AnswerKey
from metastore.iceberg.column_defaults import with_defaults
from metastore.iceberg.files import TableFiles, Warehouse
from metastore.iceberg.lineage import INITIAL_ROW_ID, check_format_version
from metastore.iceberg.manifest_lists import ManifestLists
from metastore.iceberg.metadata_json import MetadataFile, SnapshotsJson, metadata_document
from metastore.iceberg.purge import Purge, PurgeCounters, PurgeReport
from metastore.iceberg.table_paths import added_paths, check_paths, check_properties
from metastore.iceberg.table_updates import ModelCache, ModelKey, apply_updates
from metastore.iceberg.turns import Turns
from metastore.model.changes import Change, CreateEntity, DropEntity, UpdateEntity
from metastore.model.codec import Codec
from metastore.model.keys import EntityKey, Kind
from metastore.model.locations import linked_below, normalize
from metastore.model.objtypes import METADATA_PIECE
from metastore.model.records import Entity
from metastore.model.requirements import AssertEntityId, AssertStill, AssertVersion, Requirement
from metastore.util.memory_only import check as may_wait
from metastore.util.retry import RetryPolicy

log = logging.getLogger(__name__)

TEXT = "metadata-text"  # a result's metadata as JSON text (the file's bytes), for responses
# Set on every new table unless its create names them (as Iceberg's own catalogs do).
NEW_TABLE_PROPERTIES = {"write.parquet.compression-codec": "zstd"}
FORMAT_VERSION = "format-version"  # a create's property choosing the table's format version
DEFAULT_FORMAT_VERSION = "2"
# A request whose entity another commit moved (a lost AssertVersion) is redone on the
# fresh state at once: that state is already there to read, so there is nothing to wait
# for. 20 attempts in all, then the conflict reaches the client as 409.
REBASES = RetryPolicy(base_s=0.0, max_s=0.0, max_attempts=20, jitter=False)


@contextmanager
def iceberg_errors() -> Iterator[None]:
    """pyiceberg's outcomes as ours: a failed requirement is 409, a bad update 400."""
    try:
        yield
    except CommitFailedException as exc:
        raise CommitConflict(str(exc)) from None
    except (PydanticValidationError, IcebergValidationError) as exc:
        raise ValidationFailed(f"invalid table metadata: {_first_line(exc)}") from None
    except (ValueError, NotImplementedError, LookupError, TypeError, AttributeError) as exc:
        raise BadRequest(f"cannot apply update: {_first_line(exc)}") from None
    except StopIteration:  # pyiceberg's lookups by id, on metadata lacking what they find;
        # never let it out: raised into a worker thread's future, the request never ends
        raise BadRequest("cannot apply update: the metadata lacks what it refers to") from None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:2000]


@dataclass(frozen=True, slots=True)
class TableState:
    key: EntityKey
    entity: Entity
    metadata: dict[str, Any]  # the spec's JSON (shared with the cache: never mutate)
    metadata_location: str | None

    def model(self) -> TableMetadata:
        with iceberg_errors():
            return TableMetadataUtil.parse_obj(self.metadata)

    def result(self, snapshots: str = "all") -> dict[str, Any]:
        metadata = self.metadata
        if snapshots == "refs":
            wanted = {ref["snapshot-id"] for ref in metadata.get("refs", {}).values()}
            kept = [s for s in metadata.get("snapshots", []) if s["snapshot-id"] in wanted]
            history = metadata.get("snapshot-log", [])
            start = len(history)  # its last entries whose snapshots are kept (as Iceberg's)
            while start and history[start - 1]["snapshot-id"] in wanted:
                start -= 1
            metadata = {**metadata, "snapshots": kept, "snapshot-log": history[start:]}
        return {"metadata-location": self.metadata_location, "metadata": metadata, "config": {}}


@dataclass(frozen=True, slots=True)
class TableChange:
    key: EntityKey
    requirements: tuple[TableRequirement, ...]
    updates: tuple[TableUpdate, ...]


@dataclass
class Prepared:
    """A request made ready to commit: its metadata files written, its pieces split."""

    io: TableFiles
    files: list[str] = field(default_factory=list)  # metadata files written (deleted on failure)
    # waits for the syncs of those files, still running (``CommitRequest.durable_first``)
    durable: list[Callable[[], None]] = field(default_factory=list)
    requirements: list[Requirement] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    objects: dict[int, NewObject] = field(default_factory=dict)
    # for the model cache: each new version with its snapshots' JSON
    models: list[tuple[ModelKey, TableMetadata, SnapshotsJson | None]] = field(default_factory=list)
    answers: list[tuple[AnswerKey, str]] = field(default_factory=list)  # for loads' cache
    results: list[dict[str, Any]] = field(default_factory=list)

    def discard(self) -> None:
        """Delete the metadata files written, garbage when the commit surely failed
        (blocking; best effort: an orphan is harmless, its name is unique)."""
        for location in self.files:
            self.io.delete_quietly(location)


class Tables:
    def __init__(
        self,
        metastore: Metastore,
        codec: Codec,
        warehouse: Warehouse,
        answer_bytes: int = DEFAULT_BYTES,
    ) -> None:
        self._metastore = metastore
        self._codec = codec
        self.warehouse = warehouse
        self._models = ModelCache()
        self.answers = AnswerCache(answer_bytes)  # loads' metadata text (``answer_cache``)
        self.purges = PurgeCounters()
        self._turns = Turns()
        self._manifest_lists = ManifestLists(read_limit=warehouse.read_limit)  # by rebases

    # --- reads -------------------------------------------------------------------------

    def loader(self, tenant: str, catalog: str) -> pieces.Loader:
        objects = self._metastore.objects(tenant, catalog)
        codec = self._codec

        def load(obj_id: int) -> Any:
            value = objects.load(
                METADATA_PIECE.name, obj_id, lambda d: pieces.decode_piece(codec, d)
            )
            if value is None:
                raise MissingObject(f"metadata piece {obj_id} missing in {catalog!r}")
            return value

        return load

    def core_of(self, tenant: str, catalog: str, entity: Entity) -> dict[str, Any]:
        """The table's core piece: its scalar fields (``location``) and its metadata
        location under ``pieces.METADATA_LOCATION`` (cached: never mutate it)."""
        if pieces.CORE not in entity.attachments:
            raise NoSuchTable(f"table {entity.key.display()} has no Iceberg metadata")
        core: dict[str, Any] = self.loader(tenant, catalog)(entity.attachments[pieces.CORE])
        return core

    def metadata_json(
        self, tenant: str, catalog: str, entity: Entity, location: str | None, snapshots: str
    ) -> str:
        """The metadata a load of ``entity`` answers, as JSON text (``TableState.result``'s
        with the ``snapshots`` filter), from the cache when this version was answered
        or committed here before. ``location``: its metadata location (``core_of``)."""
        version = entity.entity_id, entity.version
        key = AnswerKey.of(tenant, catalog, *version, location, entity.properties, snapshots)
        text = self.answers.get(key)
        if text is None:
            may_wait()  # assembling it grows with the table's history
            metadata = self.state_of(tenant, catalog, entity).result(snapshots)["metadata"]
            text = json.dumps(metadata, separators=(",", ":"))
            self.answers.put(key, text)
        return text

    def state_of(self, tenant: str, catalog: str, entity: Entity) -> TableState:
        if pieces.CORE not in entity.attachments:
            raise NoSuchTable(f"table {entity.key.display()} has no Iceberg metadata")
        metadata, location = pieces.assemble(
            pieces.TABLE_LAYOUT, entity.attachments, entity.properties, self.loader(tenant, catalog)
        )
        return TableState(entity.key, entity, metadata, location)

    def model_of(self, tenant: str, catalog: str, state: TableState) -> TableMetadata:
        """The parsed metadata of a table version (cached: a version never changes)."""
        version = (tenant, catalog, state.entity.entity_id, state.entity.version)
        model = self._models.get(version)
        if model is None:
            may_wait()  # parsing it grows with the table's history
            model = state.model()
            self._models.put(version, model)
        return model

    def _base(
        self, tenant: str, catalog: str, current: TableState | None
    ) -> tuple[TableMetadata | None, SnapshotsJson | None]:
        """A commit's base model, and its snapshots' JSON when this node committed it."""
        if current is None:
            return None, None
        entity = current.entity
        model, snapshots = self._models.entry((tenant, catalog, entity.entity_id, entity.version))
        if model is None:
            return self.model_of(tenant, catalog, current), None
        return model, snapshots

    def load(self, tenant: str, catalog: str, key: EntityKey) -> TableState:
        entity = self._metastore.get_entity(tenant, catalog, key)
        return self.state_of(tenant, catalog, entity)

    def _current(self, tenant: str, catalog: str, key: EntityKey) -> TableState | None:
        try:
            return self.load(tenant, catalog, key)
        except NoSuchTable:
            return None

    def records(self, tenant: str, catalog: str) -> Records:
        """The locations held by the catalog's tables and views, at HEAD."""
        return self._metastore.location_records(tenant, catalog)

    def default_location(self, tenant: str, catalog: str, key: EntityKey) -> str:
        """``<catalog root>/<namespace...>/<name>``, or with a unique suffix when that is
        held already (say by a table renamed away from this name): locations are unique,
        and a client that names no location should not have to pick one.

        A dropped table kept for undrop yields its very location to a table of its
        namespace (``location_index.yields_to``): a name dropped and created again gets
        the same location, as with catalogs that forget a dropped table, and the newest
        of them owns it."""
        location = self.warehouse.default_location(tenant, catalog, key.namespace, key.name)
        records = self.records(tenant, catalog)
        wanted = normalize(location)
        clash = records.overlapping(wanted)
        kept = records.kept_name(clash) if clash == wanted.key else None
        if clash is None or (kept is not None and yields_to(kept, key)):
            return location
        return f"{location}-{uuid.uuid4().hex}"

    # --- create / register -------------------------------------------------------------

    def new_metadata(
        self,
        tenant: str,
        catalog: str,
        key: EntityKey,
        schema: Schema,
        spec: Any,
        order: Any,
        location: str | None,
        properties: dict[str, str],
    ) -> TableMetadata:
        """The metadata of a new table (blocking: touches the filesystem for symlinks).

        New tables write Parquet with zstd unless the request names a codec, as
        tables created through Iceberg's own catalogs do (clients and their tests
        expect it); a version 3 table starts handing out row ids at 0.
        """
        if location:
            location = self.warehouse.check_location(location, tenant, catalog, "table location")
        else:
            location = self.default_location(tenant, catalog, key)
        check_properties(properties, location)
        rebase.check_setting(properties)
        properties = {**NEW_TABLE_PROPERTIES, **properties}
        with iceberg_errors():
            check_format_version(properties.get(FORMAT_VERSION, DEFAULT_FORMAT_VERSION))
            metadata = new_table_metadata(
                schema=schema,
                partition_spec=spec or UNPARTITIONED_PARTITION_SPEC,
                sort_order=order or UNSORTED_SORT_ORDER,
                location=location,
                properties=properties,
            )
        if isinstance(metadata, TableMetadataV3) and metadata.next_row_id is None:
            metadata = metadata.model_copy(update={"next_row_id": INITIAL_ROW_ID})
        if metadata.format_version > 1:  # version 1 has no column defaults
            kept = with_defaults(metadata.schemas[0], schema)
            metadata = metadata.model_copy(update={"schemas": [kept]})
        return metadata

    def prepare_staged(
        self, tenant: str, catalog: str, key: EntityKey, metadata: TableMetadata
    ) -> None:
        """A staged create's folders (``Warehouse.prepare_folders``; blocking); 400, as
        its commit would answer, if another table or view holds its location or one
        around or inside it: nothing is made inside another one's location, and no
        credentials are vended for it (a staged create answers them before any commit)."""
        location = normalize(metadata.location, "table location")
        check_free(self.records(tenant, catalog), location, key)
        self.warehouse.prepare_folders(tenant, catalog, metadata)

    def read_registered(
        self, tenant: str, catalog: str, metadata_location: object
    ) -> tuple[TableMetadata, str]:
        """The metadata file a register names, and its normalized location (blocking).

        The file must lie inside the catalog's allowed locations and inside its own
        table's location, and so must every path it lists (manifest lists, metadata
        log, statistics, location properties): a purge of the new table acts on them.
        """
        what = "metadata location"
        location = self.warehouse.check_location(
            metadata_location, tenant, catalog, what, file=True
        )
        metadata = self.warehouse.files(tenant, catalog).read_table_metadata(location)
        table_location = self.warehouse.check_location(
            metadata.location, tenant, catalog, "table location of the metadata file"
        )
        check_paths([(what, location), *added_paths(metadata, None, None)], table_location)
        check_properties(metadata.properties, table_location)
        return metadata, location

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
        if not write_file:  # a register: its file is still there (``_still_there``)
            still = (AssertStill(partial(_still_there, prepared.io, metadata_location)),)
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
        return TableState(key, _placeholder(key), result["metadata"], metadata_location)

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
            empty = _empty_metadata() if base is None else base  # built only for a create
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
                raise StorageUnavailable(f"cannot rebase the append: {_first_line(exc)}") from None
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


def _still_there(files: TableFiles, location: str) -> None:
    """400 when a register's metadata file is gone by the time its commit is built. A
    purge deletes that file last, while its purging record holds the location
    (``metastore.engine.dropped``): a register that read the file before and commits after the
    purge would name a table whose files are gone."""
    if not files.exists(location):
        raise BadRequest(
            f"metadata file {location} is gone (its table was purged meanwhile);"
            " nothing was registered"
        )


def _empty_metadata() -> TableMetadata:
    """The base a create's updates apply to: version 1 with no columns, so the
    create's own ``upgrade-format-version`` and ``add-schema`` updates make the table
    (the same base every Iceberg catalog builds a new table from)."""
    return TableMetadataV1.model_construct(last_column_id=-1, schema=Schema())


def _placeholder(key: EntityKey) -> Entity:
    """Create results carry their metadata; the entity is read back by later loads."""
    return Entity(0, Kind.TABLE, key.path, {}, None, 0, 0, 0)


def table_key(namespace: tuple[str, ...], name: str) -> EntityKey:
    return EntityKey(Kind.TABLE, namespace, name)
