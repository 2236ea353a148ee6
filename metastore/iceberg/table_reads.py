"""Reading Iceberg tables, and the checks a create or register makes before anything
is written: a table's state at a version, its parsed metadata and its load answer (both
cached: a version never changes), its default location.

``tables.Tables`` builds the write path on top of these reads.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import (
    TableMetadata,
    TableMetadataV3,
    new_table_metadata,
)
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER

from metastore.catalog.service import Metastore
from metastore.engine.location_index import Records, check_free, yields_to
from metastore.engine.objects import MissingObject
from metastore.errors import (
    NoSuchTable,
)
from metastore.iceberg import pieces, rebase
from metastore.iceberg.answer_cache import DEFAULT_BYTES, AnswerCache, AnswerKey
from metastore.iceberg.column_defaults import with_defaults
from metastore.iceberg.files import Warehouse
from metastore.iceberg.lineage import INITIAL_ROW_ID, check_format_version
from metastore.iceberg.metadata_json import SnapshotsJson
from metastore.iceberg.table_paths import added_paths, check_paths, check_properties
from metastore.iceberg.table_state import (
    DEFAULT_FORMAT_VERSION,
    FORMAT_VERSION,
    NEW_TABLE_PROPERTIES,
    TableState,
    iceberg_errors,
)
from metastore.iceberg.table_updates import ModelCache
from metastore.model.codec import Codec
from metastore.model.keys import EntityKey
from metastore.model.locations import normalize
from metastore.model.objtypes import METADATA_PIECE
from metastore.model.records import Entity
from metastore.util.memory_only import check as may_wait

log = logging.getLogger(__name__)


class TableReads:
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
