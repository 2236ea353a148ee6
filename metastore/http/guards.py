"""The kinds of authorization rule a route can have (``metastore.node.route_privileges`` maps every
route to one): a privilege on a securable named by the path or the body, a listing's
visibility, open routes, service admins only.

A rule's ``check`` raises ``Forbidden`` (nothing read, nothing written) or returns;
a listing rule leaves the ``Visibility`` of its items in the request for the handler.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from metastore.errors import Forbidden
from metastore.http import params
from metastore.http.authz import VISIBLE
from metastore.http.peers import is_node_request
from metastore.http.typedefs import CONFIG
from metastore.http.validation import read_json
from metastore.model.keys import Kind
from metastore.security.authorizer import Checker
from metastore.security.policy import Visibility
from metastore.security.privileges import Level, Privilege
from metastore.security.securables import Securable

Need = tuple[Privilege, Securable]
On = Callable[[web.Request], Securable]


class Rule(ABC):
    @abstractmethod
    async def check(self, request: web.Request, checker: Checker) -> None: ...


@dataclass(frozen=True, slots=True)
class Open(Rule):
    """Needs no principal: health, metrics (unless protected), the token endpoint."""

    async def check(self, request: web.Request, checker: Checker) -> None:
        return None


@dataclass(frozen=True, slots=True)
class Anyone(Rule):
    """Any authenticated principal (``whoami``)."""

    async def check(self, request: web.Request, checker: Checker) -> None:
        return None


@dataclass(frozen=True, slots=True)
class InTenant(Rule):
    """Any principal of the tenant the securable is in (Iceberg's ``/v1/config``, which
    tells a client its catalog's prefix and nothing about what it holds)."""

    on: On

    async def check(self, request: web.Request, checker: Checker) -> None:
        tenant = self.on(request).tenant
        if tenant != checker.principal.tenant and not checker.service_admin:
            raise Forbidden(f"principal {checker.principal.id!r} belongs to another tenant")


@dataclass(frozen=True, slots=True)
class ServiceAdmin(Rule):
    """Service admins only (the cluster's token keys)."""

    async def check(self, request: web.Request, checker: Checker) -> None:
        if not checker.service_admin:
            raise Forbidden(f"principal {checker.principal.id!r} is not a service admin")


@dataclass(frozen=True, slots=True)
class Internal(Rule):
    """Node-to-node endpoints: a node proven by the cluster credential, or a service admin."""

    async def check(self, request: web.Request, checker: Checker) -> None:
        if not is_node_request(request) and not checker.service_admin:
            raise Forbidden("internal endpoints serve the cluster's nodes")


@dataclass(frozen=True, slots=True)
class Requires(Rule):
    """One privilege on the securable the path names."""

    privilege: Privilege
    on: On

    async def check(self, request: web.Request, checker: Checker) -> None:
        await _require(checker, self.privilege, self.on(request))


@dataclass(frozen=True, slots=True)
class ChoosesStorage(Rule):
    """A privilege on the catalog, and more to name where its files live.

    A catalog's storage (root, allowed locations, endpoint, credentials) decides
    what the server itself reads, writes and purges. On a node that does not bound
    every catalog's storage (``METASTORE_STORAGE_ROOTS`` unset), whoever names it could
    point the server at any path or endpoint the node reaches, so naming it is a
    service admin's; within bounds the privilege suffices. ``schema``: the body's
    schema, whose ``storage`` key names storage (None: the route always does).
    """

    privilege: Privilege
    on: On
    schema: str | None = None

    async def check(self, request: web.Request, checker: Checker) -> None:
        await _require(checker, self.privilege, self.on(request))
        if checker.service_admin or request.app[CONFIG].storage_roots:
            return
        if self.schema is not None and "storage" not in await read_json(request, self.schema):
            return
        raise Forbidden(
            "only a service admin may name a catalog's storage on a node that does not "
            "bound storage roots (METASTORE_STORAGE_ROOTS)"
        )


@dataclass(frozen=True, slots=True)
class ByKind(Rule):
    """A native ``{kind}`` route: the table privilege or the view privilege."""

    table: Privilege
    view: Privilege
    on: On

    async def check(self, request: web.Request, checker: Checker) -> None:
        kind = params.collection_kind(request)
        await _require(checker, self.table if kind is Kind.TABLE else self.view, self.on(request))


@dataclass(frozen=True, slots=True)
class FromBody(Rule):
    """Privileges on securables the body names (parsed against ``schema`` first)."""

    schema: str
    needs: Callable[[web.Request, dict[str, Any]], Iterable[Need]]

    async def check(self, request: web.Request, checker: Checker) -> None:
        body = await read_json(request, self.schema)
        for privilege, securable in self.needs(request, body):
            await _require(checker, privilege, securable)


@dataclass(frozen=True, slots=True)
class FromRequest(Rule):
    """Privileges that depend on the query or the caller (a purge, one's own record)."""

    needs: Callable[[web.Request, Checker], Iterable[Need]]

    async def check(self, request: web.Request, checker: Checker) -> None:
        for privilege, securable in self.needs(request, checker):
            await _require(checker, privilege, securable)


@dataclass(frozen=True, slots=True)
class Browse(Rule):
    """A listing of ``kind`` children of ``parent`` (None: the native ``{kind}`` of the
    path): 403 for a caller holding nothing there; else the handler shows what the
    ``Visibility`` it leaves in the request allows."""

    kind: Level | None
    parent: On

    async def check(self, request: web.Request, checker: Checker) -> None:
        kind = self.kind
        if kind is None:
            kind = Level.TABLE if params.collection_kind(request) is Kind.TABLE else Level.VIEW
        parent = self.parent(request)
        await checker.resolve(parent)
        request[VISIBLE] = checker.browse(parent, kind)


@dataclass(frozen=True, slots=True)
class Listed(Rule):
    """A listing inside the caller's own tenant whose items the caller sees by a rule of
    its own (tenants, principals, principal roles)."""

    visibility: Callable[[web.Request, Checker], Visibility]

    async def check(self, request: web.Request, checker: Checker) -> None:
        request[VISIBLE] = self.visibility(request, checker)


@dataclass(frozen=True, slots=True)
class Metrics(Rule):
    """``/metrics``: open, or for service admins with ``METASTORE_METRICS_AUTH`` on
    (counters are node-wide, across tenants). The authentication middleware leaves
    this path alone, so the token is checked here."""

    async def check(self, request: web.Request, checker: Checker) -> None:
        if not checker.service_admin:
            raise Forbidden("metrics are protected: they need a service admin's token")


async def _require(checker: Checker, privilege: Privilege, securable: Securable) -> None:
    """``checker.require``, what it reads read first as a point read."""
    await checker.resolve(securable)
    checker.require(privilege, securable)
