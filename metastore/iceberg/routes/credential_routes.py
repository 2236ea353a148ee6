"""Vended credentials: what a table load or create hands out, and their refresh route.

A client that asks for them (``X-Iceberg-Access-Delegation: vended-credentials``,
which PyIceberg sends by default) gets, when the catalog's storage has
``credential-vending`` settings, short-lived S3 credentials for the table's location
alone (``metastore.storage.vending``, ``metastore.storage.sts``) in the load result: in ``config``
and as the one entry of ``storage-credentials`` (prefix: the table's location).
``GET .../tables/{table}/credentials`` hands out fresh ones the same way. Without
the settings nothing is vended (the spec lets a server supply none), and a client
uses its own keys as before.

What the credentials allow follows the caller's privileges on the table: anyone who
may load it (``TABLE_READ_DATA``) gets read-only credentials; a caller who may
write its data (``TABLE_WRITE_DATA``; with authentication off, everyone) gets
credentials that write and delete too.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from metastore.http.authz import checker
from metastore.iceberg.routes.context import PREFIX, Call, json_response, named
from metastore.model.keys import EntityKey, Kind
from metastore.security.privileges import Privilege
from metastore.security.securables import Securable
from metastore.storage.sts import Vended
from metastore.storage.vending import Scope
from metastore.util.memory_only import check as may_wait

routes = web.RouteTableDef()

CREDENTIALS = PREFIX + "/namespaces/{namespace}/tables/{table}/credentials"
HEADER = "X-Iceberg-Access-Delegation"
VENDED = "vended-credentials"


def asks_for_credentials(request: web.Request) -> bool:
    """The request names ``vended-credentials`` among its delegation mechanisms."""
    asked = request.headers.getall(HEADER, [])
    return any(part.strip().lower() == VENDED for value in asked for part in value.split(","))


def may_write(request: web.Request, call: Call, key: EntityKey) -> bool:
    """The caller may write the table's data (authentication off: everyone may)."""
    found = checker(request)
    if found is None:
        return True
    return found.allows(
        Privilege.TABLE_WRITE_DATA, Securable.of_entity(call.tenant, call.catalog, key)
    )


def vend(call: Call, location: str, write: bool) -> Vended | None:
    """Credentials for ``location`` if the catalog vends them (blocking: reads the
    storage record and its secrets, and may call STS)."""
    catalog_storage = call.iceberg.warehouse.storage
    storage = catalog_storage.of(call.tenant, call.catalog)
    if storage.vending is None:
        return None
    may_wait()  # the storage's secrets, perhaps STS
    scope = Scope.of(location, write)
    io = catalog_storage.io_properties(storage)
    return call.iceberg.vendor.vend(storage.vending, scope, io, call.principal)


def delegation(location: str, vended: Vended | None) -> dict[str, Any]:
    """The load result's fields carrying ``vended`` (none: nothing to add)."""
    if vended is None:
        return {}
    config = vended.config()
    return {
        "config": dict(config),
        "storage-credentials": [{"prefix": location, "config": dict(config)}],
    }


async def vended_fields(
    request: web.Request, call: Call, key: EntityKey, location: str
) -> dict[str, Any]:
    """What a load or create result of the table ``key`` at ``location`` adds for a
    request that asks for vended credentials (empty when it does not, or when its
    catalog vends none)."""
    if not asks_for_credentials(request):
        return {}
    write = may_write(request, call, key)
    vended = await asyncio.to_thread(vend, call, location, write)
    return delegation(location, vended)


@routes.get(CREDENTIALS)
async def load_credentials(request: web.Request) -> web.Response:
    """Fresh credentials for the table (an empty list when its catalog vends none)."""
    call = await Call.of(request)
    key = named(request, Kind.TABLE, "table")
    state = await call.metastore.read(call.iceberg.tables.load, call.tenant, call.catalog, key)
    location = state.metadata["location"]
    write = may_write(request, call, key)
    vended = await asyncio.to_thread(vend, call, location, write)
    found = delegation(location, vended).get("storage-credentials", [])
    return json_response({"storage-credentials": found})
