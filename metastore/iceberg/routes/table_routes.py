"""Iceberg REST: tables (create, load, commit, drop, register, rename, list) and transactions."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web
from pydantic import Field
from pyiceberg.table import TableIdentifier
from pyiceberg.table.update import TableRequirement, TableUpdate
from pyiceberg.typedef import IcebergBaseModel

from metastore.errors import BadRequest, MetastoreError, NotFound
from metastore.http import params
from metastore.http.authz import visible
from metastore.http.validation import read_json
from metastore.iceberg import listing
from metastore.iceberg.metadata_json import metadata_text
from metastore.iceberg.routes import loads
from metastore.iceberg.routes.context import (
    PREFIX,
    Call,
    body_as,
    flag,
    idempotent,
    identifier,
    json_response,
    named,
    parse,
)
from metastore.iceberg.routes.credential_routes import asks_for_credentials, may_write
from metastore.iceberg.routes.etags import (
    IF_NONE_MATCH,
    delegation_of,
    not_modified,
    table_etag,
    tagged,
)
from metastore.iceberg.routes.kept_locations import check_may_take, reader
from metastore.iceberg.routes.new_tables import CreateTableBody, prepare_new_table
from metastore.iceberg.routes.table_config import SigningAsk, add_signing
from metastore.iceberg.table_state import TEXT, TableChange, table_key
from metastore.model.changes import RenameEntity
from metastore.model.keys import Kind
from metastore.model.names import check_name
from metastore.model.records import Entity

routes = web.RouteTableDef()

TABLES = PREFIX + "/namespaces/{namespace}/tables"
TABLE = TABLES + "/{table}"


class CommitTableBody(IcebergBaseModel):
    identifier: TableIdentifier | None = None
    requirements: tuple[TableRequirement, ...] = Field(default_factory=tuple)
    updates: tuple[TableUpdate, ...] = Field(default_factory=tuple)


class TransactionBody(IcebergBaseModel):
    table_changes: list[CommitTableBody] = Field(alias="table-changes")


async def list_identifiers(request: web.Request, kind: Kind) -> web.Response:
    """The tables or views directly in a namespace, as Iceberg identifiers: one page when
    the client pages, else all of them (``metastore.iceberg.listing``)."""
    shown = visible(request)  # what the caller may see (metastore.node.route_privileges)
    if not listing.pages(request):  # names alone, in one read that checks the catalog too
        call = await Call.unchecked(request)
        try:
            parent: tuple[str, ...] | MetastoreError = params.namespace(request)
        except MetastoreError as problem:  # answered after an unknown catalog's 404
            parent = problem
        found = await call.metastore.read_point(
            listing.names, call.metastore, call.tenant, call.catalog, parent, kind, shown.shows
        )
        assert isinstance(parent, tuple)  # else the read raised it
        text = listing.identifiers_json(parent, found)
        return web.Response(text=text, content_type="application/json")
    call = await Call.of(request)
    namespace = params.namespace(request)
    token, size = params.page(request)
    page = await call.metastore.read(
        call.metastore.list_entities,
        call.tenant,
        call.catalog,
        namespace,
        kind,
        token,
        size,
        shows=shown.shows,
    )
    return json_response(
        {"identifiers": _identifiers(page.items), "next-page-token": page.next_token}
    )


def _identifiers(entities: list[Entity]) -> list[dict[str, Any]]:
    return [{"namespace": list(e.path[:-1]), "name": e.path[-1]} for e in entities]


@routes.get(TABLES)
async def list_tables(request: web.Request) -> web.Response:
    return await list_identifiers(request, Kind.TABLE)


@routes.post(TABLES)
@idempotent
async def create_table(request: web.Request) -> web.Response:
    call = await Call.of(request)
    namespace = params.namespace(request)
    _, body = await body_as(request, "iceberg_create_table", CreateTableBody)
    key = table_key(namespace, check_name("table", body.name))
    write = may_write(request, call, key) if asks_for_credentials(request) else None
    ask = SigningAsk.of(request, call)
    may_read = reader(request, call)
    new = await asyncio.to_thread(prepare_new_table, call, key, body, write, ask, may_read)
    if new.prepared is None or new.metadata_location is None:  # staged: nothing written
        staged = json.loads(metadata_text(new.metadata))
        result: dict[str, Any] = {"metadata-location": None, "metadata": staged, "config": {}}
        return json_response(new.with_access(result))
    text = new.prepared.results[0][TEXT]  # the metadata file's own JSON
    state = await call.iceberg.tables.commit_create(
        call.tenant,
        call.catalog,
        key,
        new.prepared,
        call.principal,
        new.metadata_location,
        extra=call.idempotency.record(200, metadata_location=new.metadata_location),
        may_read=may_read,
    )
    result = state.result()
    etag = table_etag(result, delegation=delegation_of(request))
    head = new.with_access({k: v for k, v in result.items() if k != "metadata"})
    answer = json.dumps(head)[:-1] + f',"metadata":{text}}}'
    return tagged(web.Response(text=answer, content_type="application/json"), etag)


@routes.post(PREFIX + "/namespaces/{namespace}/register")
@idempotent
async def register_table(request: web.Request) -> web.Response:
    call = await Call.of(request)
    namespace = params.namespace(request)
    body = await read_json(request, "iceberg_register_table")
    key = table_key(namespace, check_name("table", body["name"]))
    tables = call.iceberg.tables
    metadata, location = await asyncio.to_thread(
        tables.read_registered, call.tenant, call.catalog, body["metadata-location"]
    )
    may_read = reader(request, call)
    await asyncio.to_thread(check_may_take, call, metadata.location, may_read)
    replace = None
    if body.get("overwrite"):
        try:
            replace = await call.metastore.read(tables.load, call.tenant, call.catalog, key)
        except NotFound:
            replace = None
    state = await tables.create(
        call.tenant,
        call.catalog,
        key,
        metadata,
        call.principal,
        location,
        may_read=may_read,
        write_file=False,
        extra=call.idempotency.record(200, metadata_location=location),
        replace=replace,
    )
    result = state.result()
    etag = table_etag(result, delegation=delegation_of(request))
    await add_signing(request, call, key, result)
    return tagged(json_response(result), etag)


@routes.get(TABLE, allow_head=False)
async def load_table(request: web.Request) -> web.Response:
    """One read in a worker thread answers it all (``metastore.iceberg.routes.loads``)."""
    call = await Call.unchecked(request)
    try:
        ask: loads.LoadAsk | MetastoreError = _load_ask(request, call)
    except MetastoreError as problem:  # answered after an unknown catalog's 404
        ask = problem
    loaded = await call.metastore.read_point(loads.read, call, ask)
    if loaded.body is None:  # the client's copy is current: no body
        return not_modified(loaded.etag)
    response = web.Response(text=loaded.body, content_type="application/json")
    return tagged(response, loaded.etag)


def _load_ask(request: web.Request, call: Call) -> loads.LoadAsk:
    snapshots = request.query.get("snapshots", "all")
    if snapshots not in ("all", "refs"):
        raise BadRequest("query parameter snapshots must be all or refs")
    key = named(request, Kind.TABLE, "table")
    write = may_write(request, call, key) if asks_for_credentials(request) else None
    return loads.LoadAsk(
        key,
        snapshots,
        delegation_of(request),
        SigningAsk.of(request, call),
        request.headers.get(IF_NONE_MATCH),
        write,
    )


async def entity_exists(request: web.Request, kind: Kind, name: str) -> web.Response:
    """HEAD: 204 if the table or view of the path exists, else its 404."""
    call = await Call.of(request)
    key = named(request, kind, name)
    await call.metastore.read_point(call.metastore.get_entity, call.tenant, call.catalog, key)
    return web.Response(status=204)


@routes.head(TABLE)
async def table_exists(request: web.Request) -> web.Response:
    return await entity_exists(request, Kind.TABLE, "table")


@routes.post(TABLE)
@idempotent
async def commit_table(request: web.Request) -> web.Response:
    call = await Call.of(request)
    key = named(request, Kind.TABLE, "table")
    _, body = await body_as(request, "iceberg_commit_table", CommitTableBody)
    if (
        body.identifier is not None
        and identifier(body.identifier.model_dump(mode="json"), Kind.TABLE) != key
    ):
        raise BadRequest("the identifier in the body is not the table of the path")
    change = TableChange(key, body.requirements, body.updates)
    result = (await _commit(request, call, [change]))[0]
    answer = {"metadata-location": result["metadata-location"], "metadata": result["metadata"]}
    etag = table_etag(answer)
    location = json.dumps(result["metadata-location"])
    if TEXT in result:  # the metadata file's own JSON: not serialized twice
        text = f'{{"metadata-location":{location},"metadata":{result[TEXT]}}}'
        return tagged(web.Response(text=text, content_type="application/json"), etag)
    return tagged(json_response(answer), etag)


async def _commit(
    request: web.Request, call: Call, changes: list[TableChange]
) -> list[dict[str, Any]]:
    """Commit the changes with their idempotency record."""
    single = len(changes) == 1

    def record(results: list[dict[str, Any]]) -> Any:
        if single:
            return call.idempotency.record(200, metadata_location=results[0]["metadata-location"])
        return call.idempotency.record(204)

    return await call.iceberg.tables.commit(
        call.tenant,
        call.catalog,
        changes,
        call.principal,
        extra=record,
        may_read=reader(request, call),
    )


@routes.post(PREFIX + "/transactions/commit")
@idempotent
async def commit_transaction(request: web.Request) -> web.Response:
    call = await Call.of(request)
    _, body = await body_as(request, "iceberg_transaction", TransactionBody)
    changes = []
    for item in body.table_changes:
        assert item.identifier is not None  # the schema requires it
        key = identifier(item.identifier.model_dump(mode="json"), Kind.TABLE)
        changes.append(TableChange(key, item.requirements, item.updates))
    await _commit(request, call, changes)
    return web.Response(status=204)


@routes.delete(TABLE)
@idempotent
async def drop_table(request: web.Request) -> web.Response:
    call = await Call.of(request)
    key = named(request, Kind.TABLE, "table")
    purge = flag(request, "purgeRequested")
    await call.iceberg.tables.drop(
        call.tenant, call.catalog, key, purge, call.principal, call.idempotency.record(204)
    )
    return web.Response(status=204)


async def rename(request: web.Request, kind: Kind) -> web.Response:
    call = await Call.of(request)
    body = await read_json(request, "iceberg_rename")
    source, destination = identifier(body["source"], kind), identifier(body["destination"], kind)
    changes = (RenameEntity(source, destination), *call.idempotency.record(204))
    operation = f"rename {kind.label}"
    await call.metastore.change(call.tenant, call.catalog, changes, call.principal, operation)
    return web.Response(status=204)


@routes.post(PREFIX + "/tables/rename")
@idempotent
async def rename_table(request: web.Request) -> web.Response:
    return await rename(request, Kind.TABLE)


__all__ = ["parse", "rename", "routes"]
