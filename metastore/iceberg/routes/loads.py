"""A table load in one call off the event loop, its metadata text cached.

A load needs the catalog, the table's entity and metadata, the catalog's storage
(remote signing is the storage's offer, and the tag covers it) and, for a client
that asks, vended credentials. On a warm node each of these reads takes
microseconds, while each hand-off to a worker thread and back costs far more, so
the load reads them all in one call (``read``), in the order the route has
always answered in:

1. the catalog: an unknown ``{prefix}`` is a 404 before anything else, then the
   request's own parameters (``problem``), then the table's 404;
2. the table's core piece (its metadata location and table location) and the
   storage's signing entries: with these the tag is known (``etags``), and a
   client whose ``If-None-Match`` names it gets a 304 with no metadata assembled
   and no credential vended;
3. the metadata as JSON text, cached per table version (``answer_cache``; a commit
   through this node leaves the text of the version it made there);
4. vended credentials, fresh on every answer, written around the cached text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from metastore.errors import MetastoreError
from metastore.iceberg import pieces
from metastore.iceberg.routes.context import Call
from metastore.iceberg.routes.credential_routes import delegation, vend
from metastore.iceberg.routes.etags import names, table_etag
from metastore.iceberg.routes.table_config import SigningAsk, signing_entries
from metastore.model.keys import EntityKey


@dataclass(frozen=True, slots=True)
class LoadAsk:
    """What of a load request decides its answer, read on the event loop."""

    key: EntityKey
    snapshots: str  # "all" or "refs"
    delegation: str  # ``etags.delegation_of`` the request: a tag input
    signing: SigningAsk
    if_none_match: str | None
    vend_write: bool | None  # None: no vended credentials asked; else: may they write


@dataclass(frozen=True, slots=True)
class Loaded:
    etag: str
    body: str | None  # the answer's JSON text; None: the client's copy is current (304)


def read(call: Call, ask: LoadAsk | MetastoreError) -> Loaded:
    """The load's answer (blocking: run in a worker thread). ``ask``: the request's
    parameters, or the error they make, answered after the catalog's own 404."""
    metastore, tables = call.metastore, call.iceberg.tables
    tenant, catalog = call.tenant, call.catalog
    metastore.get_ref(tenant, catalog)
    if isinstance(ask, MetastoreError):
        raise ask
    entity = metastore.get_entity(tenant, catalog, ask.key)
    core = tables.core_of(tenant, catalog, entity)
    location = core.get(pieces.METADATA_LOCATION)
    storage = call.iceberg.warehouse.storage.of(tenant, catalog)
    config = signing_entries(storage, ask.signing, ask.key)
    shape = {
        "metadata-location": location,
        "metadata": {"properties": dict(entity.properties)},
        "config": config,
    }
    etag = table_etag(shape, ask.snapshots, ask.delegation)
    if names(ask.if_none_match, etag):
        return Loaded(etag, None)
    metadata = tables.metadata_json(tenant, catalog, entity, location, ask.snapshots)
    rest: dict[str, Any] = {"config": config}
    if ask.vend_write is not None:
        table_location = core["location"]
        rest.update(delegation(table_location, vend(call, table_location, ask.vend_write)))
    return Loaded(etag, answer_text(location, metadata, rest))


def answer_text(location: str | None, metadata: str, rest: dict[str, Any]) -> str:
    """``{"metadata-location", "metadata", **rest}`` as JSON, ``metadata`` as given."""
    fields = [f'"metadata-location":{json.dumps(location)}', f'"metadata":{metadata}']
    fields += [f"{json.dumps(name)}:{json.dumps(value)}" for name, value in rest.items()]
    return "{" + ",".join(fields) + "}"
