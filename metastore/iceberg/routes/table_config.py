"""Remote signing in a table's ``config``: what a client needs to reach its files without keys.

A table response (load, create, register) tells the client in ``config`` how to
reach the table's files. When the catalog's storage offers remote signing to every
client (``remote-signing.enabled``) or the client asks for it
(``X-Iceberg-Access-Delegation: remote-signing``), the config says so for S3 storage:

- ``s3.remote-signing-enabled: true`` (the REST specification's property) and
  ``s3.signer: S3V4RestSigner`` (PyIceberg's name for its signer, which its fsspec
  FileIO uses; its pyarrow FileIO cannot sign remotely);
- ``s3.signer.endpoint``: this table's signing route, relative to the catalog's URI
  (``v1/{prefix}/namespaces/{ns}/tables/{table}/sign``), so the table a signing
  request is for is in its path;
- the plain settings a client needs to reach the bucket: the first client endpoint
  (``s3.endpoint``), the region and the addressing style. Never a secret.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from aiohttp import web

from metastore.http.params import NAMESPACE_SEPARATOR
from metastore.http.typedefs import CONFIG
from metastore.iceberg.prefixes import encode_prefix
from metastore.iceberg.routes.context import Call
from metastore.model.keys import EntityKey
from metastore.storage.settings import Storage

DELEGATION = "X-Iceberg-Access-Delegation"
REMOTE_SIGNING = "remote-signing"
SIGNER = "S3V4RestSigner"
# plain storage settings a client needs to reach the bucket itself
CLIENT_SETTINGS = (
    "s3.region",
    "client.region",
    "s3.force-virtual-addressing",
    "s3.path-style-access",
)


def delegations(request: web.Request) -> frozenset[str]:
    """The access delegation modes the client supports (comma-separated, any case)."""
    given = ",".join(request.headers.getall(DELEGATION, []))
    return frozenset(mode.strip().lower() for mode in given.split(",") if mode.strip())


async def add_signing(
    request: web.Request, call: Call, key: EntityKey, result: dict[str, Any]
) -> None:
    """Add the remote-signing entries to a table response's ``config`` (if offered)."""
    config = await signing_config(request, call, key)
    if config:
        result["config"] = {**result.get("config", {}), **config}


async def signing_config(request: web.Request, call: Call, key: EntityKey) -> dict[str, str]:
    """The table's ``config`` entries for remote signing; empty when it is not offered."""
    storage = await call.metastore.read(
        call.iceberg.warehouse.storage.of, call.tenant, call.catalog
    )
    return signing_entries(storage, SigningAsk.of(request, call), key)


@dataclass(frozen=True, slots=True)
class SigningAsk:
    """What of a request decides its signing entries, read on the event loop (a load
    works them out in its worker thread, with the storage it reads there)."""

    prefix: str  # the catalog's ``{prefix}`` in this node's spelling
    asked: bool  # the client asked for remote signing

    @classmethod
    def of(cls, request: web.Request, call: Call) -> SigningAsk:
        prefix = encode_prefix(call.tenant, call.catalog, request.app[CONFIG].default_tenant)
        return cls(prefix, REMOTE_SIGNING in delegations(request))


def signing_entries(storage: Storage, ask: SigningAsk, key: EntityKey) -> dict[str, str]:
    """The remote-signing entries of table ``key`` in ``storage``; empty when not offered."""
    if storage.kind != "s3":
        return {}
    if not (storage.remote_signing.enabled or ask.asked):
        return {}
    return remote_signing(storage, ask.prefix, key)


def remote_signing(storage: Storage, prefix: str, key: EntityKey) -> dict[str, str]:
    """The entries that point a client at the signing route of table ``key``."""
    io = storage.io_properties
    config = {name: io[name] for name in CLIENT_SETTINGS if name in io}
    endpoints = storage.remote_signing.client_endpoints(io.get("s3.endpoint"))
    if endpoints:
        config["s3.endpoint"] = str(endpoints[0])
    namespace = quote(NAMESPACE_SEPARATOR.join(key.namespace), safe="")
    path = f"v1/{quote(prefix, safe='')}/namespaces/{namespace}/tables/{quote(key.name, safe='')}"
    config["s3.remote-signing-enabled"] = "true"
    config["s3.signer"] = SIGNER
    config["s3.signer.endpoint"] = f"{path}/sign"
    return config
