"""The Iceberg tables of a store, read from its rows in Spark tasks.

Every catalog's ``main`` HEAD gives its live tables (and the dropped ones it keeps)
with their assembled metadata (as the Iceberg API assembles it), the FileIO
properties of the catalog's storage, and the retention defaults above each table:
its namespaces' properties (innermost first) and the catalog's own. All catalogs are
read, whatever the job's scope: a file may be shared by tables of other catalogs
(``add_files``, a registered table), and the job must see every reference before
deleting anything.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from metastore.engine import dropped
from metastore.engine.objects import MissingObject
from metastore.errors import MetastoreError
from metastore.iceberg import pieces
from metastore.model.codec import default_codec
from metastore.model.keys import CATALOG_RECORD, Kind
from metastore.model.objtypes import ENTITY
from metastore.pipeline.catalog_reader import CatalogRows
from metastore.pipeline.maintain.maintain_commit import TableName
from metastore.pipeline.rows import Row, by_catalog
from metastore.storage.credentials import CredentialSources
from metastore.storage.settings import Storage


@dataclass(frozen=True, slots=True)
class TableState:
    name: TableName
    metadata: Mapping[str, Any]  # the spec's JSON
    metadata_location: str | None
    io_properties: str  # JSON (picklable, shared by the catalog's tables)
    defaults: tuple[Mapping[str, str], ...] = field(default=())  # namespaces, then catalog
    # dropped and kept for the catalog's retention (``metastore.engine.dropped``): its files are
    # live (nothing it references is deleted), but it is neither expired nor scanned
    dropped: bool = False
    storage_roots: tuple[str, ...] = ()  # its catalog's allowed locations (trusted links)

    @property
    def location(self) -> str:
        return str(self.metadata["location"])


def io_properties(storage: Storage | None) -> dict[str, str]:
    """FileIO properties of a catalog's storage, its credentials resolved in the job's
    process as a node resolves them (unresolvable: without them)."""
    properties: dict[str, str] = {}
    if storage is None:
        return properties
    properties.update(storage.io_properties)
    if storage.credentials is not None:
        directory = os.environ.get("METASTORE_CREDENTIALS_DIR", "/run/secrets")
        with contextlib.suppress(MetastoreError):  # then without: the read says why
            properties.update(storage.credentials.resolve(CredentialSources.of_process(directory)))
    return properties


def catalog_tables(rows: CatalogRows) -> Iterator[TableState]:
    """The live Iceberg tables of one catalog at its ``main`` HEAD."""
    ref = rows.main()
    head = rows.commit(ref.head) if ref is not None else None
    if head is None:
        return
    try:
        live = list(rows.live(head))
        storage = rows.storage(head)
    except MissingObject:
        return  # audit reports it; maintenance leaves a damaged catalog alone
    io = json.dumps(io_properties(storage), sort_keys=True)
    namespaces = {e.path: dict(e.properties) for k, e in live if k.kind is Kind.NAMESPACE}
    catalog = next((dict(e.properties) for k, e in live if k == CATALOG_RECORD), {})
    for key, entity in live:
        kept = key.kind is Kind.SYSTEM and key.name.startswith(dropped.PREFIX)
        if key.kind is not Kind.TABLE and not (kept and entity.kind is Kind.TABLE):
            continue
        try:
            assembled = rows.iceberg(entity)
        except MissingObject:
            continue
        if assembled is None or "location" not in assembled[0]:
            continue
        table = entity.key  # a kept one's name when it was dropped
        chain = [table.namespace[:n] for n in range(len(table.namespace), 0, -1)]
        defaults = (*(namespaces.get(levels, {}) for levels in chain), catalog)
        name = TableName(rows.tenant, rows.catalog, table.namespace, table.name)
        roots = storage.allowed if storage is not None else ()
        yield TableState(
            name, assembled[0], assembled[1], io, defaults, dropped=kept, storage_roots=roots
        )


def stored_metadata_files(rows: CatalogRows) -> Iterator[str]:
    """The metadata file of every table version the catalog still stores: its history
    (``?at=`` reads, ref resets) may name them, so only garbage collection, which
    knows the history's retention, removes them."""
    for stored in rows.persistence.scan_objects(rows.tenant, rows.catalog):
        if stored.key.type != ENTITY.name:
            continue
        try:
            entity = rows.objects.entity(stored.key.id)
            core = entity.attachments.get(pieces.CORE)
            piece = rows.piece(core) if core is not None and entity.kind is Kind.TABLE else None
        except MissingObject:
            continue
        location = piece.get(pieces.METADATA_LOCATION) if isinstance(piece, dict) else None
        if isinstance(location, str):
            yield location


def tables_partition(rows: Iterable[Row]) -> Iterator[TableState | str]:
    """Each catalog's live tables, then the metadata files its stored versions name."""
    codec = default_codec()
    for (tenant, catalog), catalog_rows in by_catalog(rows).items():
        if catalog:
            catalog_view = CatalogRows(tenant, catalog, catalog_rows, codec)
            yield from catalog_tables(catalog_view)
            yield from stored_metadata_files(catalog_view)
