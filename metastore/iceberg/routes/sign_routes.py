"""Iceberg REST: remote signing, ``POST /v1/{prefix}/namespaces/{ns}/tables/{table}/sign``.

A client without keys to the catalog's bucket (its table's ``config`` says
``s3.remote-signing-enabled``, see ``table_config``) sends each S3 request here before
sending it to S3, and gets the headers that sign it. The catalog signs with its
storage's credentials, so it signs only what the caller may do to this table:

1. the authorization rule (``metastore.node.route_privileges``) requires ``TABLE_READ_DATA`` on
   the table for a ``GET``/``HEAD`` and ``TABLE_WRITE_DATA`` for anything else;
2. the request must be one the signer can read with certainty, to one of the
   storage's endpoints (``s3_requests.parse``: 400 for a malformed one, 403 for an
   operation it never signs);
3. everything it touches must lie inside the table's location (403).

Nothing is written: a signature is computed, never stored, and the secret never leaves
the node (``Cache-Control: no-cache``: a signature carries its time).
"""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from metastore.errors import BadRequest, StorageUnavailable
from metastore.http.validation import off_loop, read_json
from metastore.iceberg import s3_requests
from metastore.iceberg.routes.context import Call, json_response, named
from metastore.iceberg.routes.table_routes import TABLE
from metastore.iceberg.sigv4 import AwsKeys, sign
from metastore.model.keys import Kind
from metastore.storage.settings import Storage

routes = web.RouteTableDef()

SIGN = TABLE + "/sign"
SCHEMA = "iceberg_sign_request"
READS = frozenset({"GET", "HEAD"})  # need TABLE_READ_DATA; every other method WRITE_DATA
_REGION = re.compile(r"^[a-z0-9-]{1,64}$")


@routes.post(SIGN)
async def sign_request(request: web.Request) -> web.Response:
    call = await Call.of(request)
    body = await read_json(request, SCHEMA)
    key = named(request, Kind.TABLE, "table")
    state = await call.metastore.read(call.iceberg.tables.load, call.tenant, call.catalog, key)
    storage_of = call.iceberg.warehouse.storage
    storage = await call.metastore.read(storage_of.of, call.tenant, call.catalog)
    if storage.kind != "s3" or body.get("provider", "s3") != "s3":
        raise BadRequest("remote signing signs S3 requests of tables in S3 storage only")
    headers = _headers(body["headers"])
    endpoints = storage.remote_signing.client_endpoints(storage.io_properties.get("s3.endpoint"))
    given = body.get("body")  # a batch delete's XML, up to 1 MiB: parsed off the loop if large
    target = await off_loop(
        len(given or ""), s3_requests.parse, body["method"], body["uri"], headers, given, endpoints
    )
    target.check_within(str(state.metadata.get("location", "")))
    secrets = await asyncio.to_thread(storage_of.io_properties, storage)
    keys = AwsKeys.of(secrets)
    if keys is None:
        raise StorageUnavailable(
            "remote signing needs the catalog storage's own keys (its credentials);"
            " this storage names none"
        )
    region = _region(storage, body["region"])
    now = datetime.now(UTC)
    signed = sign(
        body["method"], body["uri"], headers, region, keys, now, payload_hash=target.payload
    )
    response = json_response({"uri": body["uri"], "headers": {k: [v] for k, v in signed.items()}})
    response.headers["Cache-Control"] = "no-cache"
    return response


def _headers(given: dict[str, list[str]]) -> dict[str, list[str]]:
    """The request's headers by lower-case name (the schema checked names and values)."""
    headers: dict[str, list[str]] = {}
    for name, values in given.items():
        headers.setdefault(name.lower(), []).extend(values)
    return headers


def _region(storage: Storage, asked: Any) -> str:
    """The storage's region when it names one, else the client's."""
    if not isinstance(asked, str) or not _REGION.fullmatch(asked):
        raise BadRequest("the request's region must be an AWS region name")
    io = storage.io_properties
    return io.get("s3.region") or io.get("client.region") or asked
