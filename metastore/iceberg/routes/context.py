"""What every Iceberg handler reads from its request: the ``Call``, names, bodies, flags."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import web
from aiohttp.typedefs import Handler
from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from metastore.catalog.service import Metastore
from metastore.errors import BadRequest, MetastoreError, ValidationFailed
from metastore.http import params
from metastore.http.caller import PRINCIPAL as PRINCIPAL  # the auth middleware sets it
from metastore.http.caller import caller, principal_of
from metastore.http.idempotency import once
from metastore.http.typedefs import CONFIG, ICEBERG, METASTORE
from metastore.http.validation import body_of, off_loop, read_json
from metastore.iceberg.prefixes import decode_prefix, decode_warehouse
from metastore.iceberg.routes.recorded_answers import HEADER, Idempotency
from metastore.iceberg.services import Iceberg
from metastore.model.keys import EntityKey, Kind
from metastore.model.names import check_name, check_namespace

M = TypeVar("M", bound=BaseModel)
PREFIX = "/v1/{prefix}"


@dataclass(frozen=True, slots=True)
class Call:
    """What every Iceberg handler needs: the services, the catalog, the caller."""

    metastore: Metastore
    iceberg: Iceberg
    tenant: str
    catalog: str
    principal: str
    idempotency: Idempotency

    @classmethod
    async def of(cls, request: web.Request) -> Call:
        if isinstance(call := request.get(_CALL), Call):
            return call
        tenant, catalog = catalog_of(request)
        metastore = request.app[METASTORE]
        await metastore.read_point(metastore.get_ref, tenant, catalog)  # 404 for an unknown prefix
        call = cls._build(request, tenant, catalog)
        request[_CALL] = call
        return call

    @classmethod
    async def unchecked(cls, request: web.Request) -> Call:
        """The ``Call`` of a handler whose first read in its worker thread checks the
        catalog itself (``Metastore.get_ref``: the unknown prefix's 404 first), saving
        the thread hand-off ``of`` spends on that check alone. A request ``of`` would
        refuse after that check (a malformed ``Idempotency-Key``) goes through ``of``."""
        tenant, catalog = catalog_of(request)
        try:
            return cls._build(request, tenant, catalog)
        except MetastoreError:
            return await cls.of(request)

    @classmethod
    def unverified(cls, request: web.Request) -> Call:
        """The ``Call`` of a mutation without ``Idempotency-Key``, its catalog not yet
        known to exist (``of`` spends a thread hand-off on that check alone):
        ``idempotent`` answers the catalog's 404 in place of any client error its handler
        raises, and a handler that succeeds has reached the catalog (a mutation reads it
        first and commits to it). Later ``of`` calls of the request answer this one."""
        tenant, catalog = catalog_of(request)
        call = cls._build(request, tenant, catalog)
        request[_CALL] = call
        return call

    async def check_catalog(self) -> None:
        """404 if the catalog does not exist."""
        await self.metastore.read_point(self.metastore.get_ref, self.tenant, self.catalog)

    @classmethod
    def _build(cls, request: web.Request, tenant: str, catalog: str) -> Call:
        metastore, iceberg = request.app[METASTORE], request.app[ICEBERG]
        idempotency = Idempotency.of(request, metastore, iceberg.warehouse, tenant, catalog)
        return cls(metastore, iceberg, tenant, catalog, principal_of(request), idempotency)


_CALL = web.RequestKey("iceberg-call", Call)  # the Call, built once per request


def catalog_of(request: web.Request) -> tuple[str, str]:
    """``(tenant, catalog)`` the request's ``{prefix}`` names, read from the path alone
    (``Call.of`` then checks that it exists; authorization runs on the names first).
    A route without a prefix (``metastore.iceberg.routes.unprefixed``) names the catalog
    ``/v1/config`` gives without a warehouse."""
    prefix = request.match_info.get("prefix")
    if prefix is None:
        return _own_tenant(request), request.app[CONFIG].default_catalog
    return decode_prefix(prefix, request.app[CONFIG].default_tenant)


def warehouse_of(request: web.Request) -> tuple[str, str]:
    """``(tenant, catalog)`` of ``GET /v1/config``'s ``warehouse`` (default: the default
    catalog): a bare catalog name is in the caller's tenant, or in the default tenant
    with authentication off (where every caller is anonymous)."""
    warehouse = request.query.get("warehouse") or request.app[CONFIG].default_catalog
    return decode_warehouse(warehouse, _own_tenant(request))


def _own_tenant(request: web.Request) -> str:
    """The caller's tenant; the default tenant with authentication off."""
    config = request.app[CONFIG]
    return caller(request).tenant if config.auth_enabled else config.default_tenant


def idempotent(handler: Handler) -> Handler:
    """A mutation handler that honours ``Idempotency-Key`` (``metastore.http.idempotency``).

    A retry gets the recorded outcome without running the handler; an attempt that
    fails as a client error after the identical request succeeded gets that outcome.
    The handler stores its outcome with ``(await Call.of(request)).idempotency.record(...)``
    in its commit.
    """

    @functools.wraps(handler)
    async def run(request: web.Request) -> web.StreamResponse:
        if HEADER not in request.headers:  # nothing recorded to look up: no thread hop for it
            call = Call.unverified(request)
            try:
                return await handler(request)
            except MetastoreError as exc:
                if 400 <= exc.status < 500:  # the order of every route: the catalog's 404 first
                    await call.check_catalog()
                raise
        call = await Call.of(request)
        return await once(lambda: handler(request), call.idempotency.replay)

    return run


def namespace(request: web.Request) -> tuple[str, ...]:
    return params.namespace(request)


def named(request: web.Request, kind: Kind, part: str) -> EntityKey:
    return EntityKey(kind, namespace(request), check_name(kind.label, request.match_info[part]))


def identifier(value: Any, kind: Kind) -> EntityKey:
    """``{"namespace": [...], "name": ...}`` -> EntityKey (400 on anything else)."""
    if not isinstance(value, dict) or set(value) - {"namespace", "name"}:
        raise BadRequest(f"a {kind.label} identifier is {{namespace: [...], name: ...}}")
    levels = value.get("namespace")
    if not isinstance(levels, list) or not levels:
        raise BadRequest(f"a {kind.label} identifier needs a namespace")
    name = value.get("name")
    if not isinstance(name, str):
        raise BadRequest(f"a {kind.label} identifier needs a name")
    return EntityKey(kind, check_namespace(levels), check_name(kind.label, name))


async def body_as(request: web.Request, schema: str, model: type[M]) -> tuple[dict[str, Any], M]:
    """Strict JSON, checked against ``schemas/api/<schema>.json``, then parsed as ``model``."""
    body = await read_json(request, schema)
    return body, await off_loop(len(body_of(request)), parse, model, body)  # large: a thread


def parse(model: type[M], value: Any) -> M:
    try:
        return model.model_validate(value)
    except PydanticValidationError as exc:
        first = exc.errors()[0]
        where = "/".join(str(p) for p in first.get("loc", ())) or "(body)"
        raise ValidationFailed(f"invalid request at {where}: {first.get('msg')}") from None
    except Exception as exc:  # pyiceberg's validators raise what they raise on odd input
        raise ValidationFailed(f"invalid request: {type(exc).__name__}: {exc}") from None


def flag(request: web.Request, name: str) -> bool:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return False
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    raise BadRequest(f"query parameter {name} must be true or false, got {raw!r}")


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.json_response(body, status=status, dumps=lambda v: json.dumps(v))
