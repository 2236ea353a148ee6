"""A table create made ready in one worker-thread call.

A create reads the catalog's storage and the namespace, checks the location (the
filesystem, for symlinks), may call STS for vended credentials, and writes the
first metadata file: all blocking work. Done as one call in one worker thread, a
create crosses between the event loop and the threads twice (here, then the
commit) instead of six times, which was a third of its cost on the node.

The order is the one a client can observe: nothing is written before the request
is known to be acceptable and its credentials are vended (STS refusing them is a
503 with no file and no table), and a staged create writes no metadata file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import Field
from pyiceberg.catalog.rest import CreateTableRequest
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.sorting import SortOrder

from metastore.iceberg.routes.context import Call
from metastore.iceberg.routes.credential_routes import delegation, vend
from metastore.iceberg.routes.kept_locations import MayRead, check_may_take
from metastore.iceberg.routes.table_config import SigningAsk, signing_entries
from metastore.iceberg.table_state import Prepared
from metastore.model.keys import EntityKey


class CreateTableBody(CreateTableRequest):
    """pyiceberg's request model, with the spec's optional fields optional."""

    location: str | None = None
    partition_spec: PartitionSpec | None = Field(alias="partition-spec", default=None)
    write_order: SortOrder | None = Field(alias="write-order", default=None)


@dataclass(frozen=True, slots=True)
class NewTable:
    metadata: TableMetadata
    metadata_location: str | None  # its first metadata file (None: a staged create)
    prepared: Prepared | None  # ready to commit (None: a staged create)
    delegated: dict[str, Any]  # the answer's vended-credential fields (empty: none asked)
    signing: dict[str, str]  # the answer's remote-signing config entries (empty: none)

    def with_access(self, result: dict[str, Any]) -> dict[str, Any]:
        """``result`` with the access this create delegates."""
        result.update(self.delegated)
        if self.signing:
            result["config"] = {**result.get("config", {}), **self.signing}
        return result


def prepare_new_table(
    call: Call,
    key: EntityKey,
    body: CreateTableBody,
    write: bool | None,
    ask: SigningAsk,
    may_read: MayRead,
) -> NewTable:
    """Everything a create does before its commit (blocking). ``write``: whether the
    vended credentials may write (None: the client asked for none); ``may_read``: whether
    the caller may read a table's data (``kept_locations``)."""
    tables, tenant, catalog = call.iceberg.tables, call.tenant, call.catalog
    metadata = tables.new_metadata(
        tenant,
        catalog,
        key,
        body.table_schema,
        body.partition_spec,
        body.write_order,
        body.location,
        dict(body.properties),
    )
    check_may_take(call, metadata.location, may_read)
    location = None
    if body.stage_create:
        call.metastore.get_entity(tenant, catalog, EntityKey.namespace_key(key.namespace))
        tables.prepare_staged(tenant, catalog, key, metadata)
    else:
        location = tables.warehouse.new_metadata_location(metadata, None)
    vended = vend(call, metadata.location, write) if write is not None else None
    signing = signing_entries(tables.warehouse.storage.of(tenant, catalog), ask, key)
    prepared = None
    if location is not None:
        prepared = tables.prepare_create(tenant, catalog, key, metadata, location, True, None)
    return NewTable(metadata, location, prepared, delegation(metadata.location, vended), signing)
