"""Native API: the principals of a tenant, its own history, the cluster's token signing
key, and who the caller is.

A principal's secret leaves the server exactly once: in the answer to the
request that created or rotated it (generated there unless the request gave
one). Nothing else ever shows it, its hash or its salt. Every change is a commit
to the tenant's system catalog recording the caller, and honours
``Idempotency-Key``; a replayed create or rotate answers the principal as that
commit left it but without the secret, which only its hash keeps (rotate again
to get a new one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from metastore.engine.commits import CommitOutcome
from metastore.errors import Forbidden, MetastoreError
from metastore.http import params
from metastore.http.authz import checker, visible
from metastore.http.caller import caller, principal_of
from metastore.http.idempotency import Idempotency, refuse_key
from metastore.http.typedefs import AUTHORIZER, CONFIG, IDENTITY, METASTORE
from metastore.http.validation import body_of, read_json
from metastore.model.keys import SYSTEM_CATALOG
from metastore.model.records import Entity
from metastore.native.render import commit_json, entity_json
from metastore.security.grants import TENANT_ADMIN
from metastore.security.principal import Principal, PrincipalKind
from metastore.security.principal_records import principal_key
from metastore.security.principals import NoSuchPrincipal, check_principal_name, record_of
from metastore.security.signing import TOKEN_KEYS as TOKEN_KEYS_RECORD

routes = web.RouteTableDef()

PRINCIPALS = "/api/v1/tenants/{tenant}/principals"
PRINCIPAL = PRINCIPALS + "/{principal}"
TOKEN_KEYS = "/api/v1/token-keys"
TENANT_COMMITS = "/api/v1/tenants/{tenant}/commits"


class NotServiceAdmin(MetastoreError):
    status = 403
    error_type = "ForbiddenException"


def principal_json(tenant: str, entity: Entity, secret: str | None = None) -> dict[str, Any]:
    """A principal as the API shows it: never its hash, salt or generation."""
    record = record_of(entity)
    assert record is not None, "principals are written by this module's rules"
    body = entity_json(entity)
    del body["properties"]
    body = {
        "name": record.name,
        "tenant": tenant,
        "id": Principal(tenant, record.name, record.type).id,
        "type": record.type,
        "disabled": record.disabled,
        "created-by": record.created_by,
        **body,
    }
    if secret is not None:
        body["client-secret"] = secret
    return body


def _changed(name: str) -> Callable[[CommitOutcome], tuple[Entity, None]]:
    """The principal a replayed commit left (read back at that commit)."""

    def replayed(outcome: CommitOutcome) -> tuple[Entity, None]:
        entity = outcome.entities.get(principal_key(name))
        assert entity is not None, "the recorded commit wrote the principal"
        return entity, None

    return replayed


def _name(request: web.Request) -> str:
    return check_principal_name(request.match_info["principal"])


def _once(request: web.Request, tenant: str, body: Mapping[str, Any] | None = None) -> Idempotency:
    """The request's idempotency; a key on a request that carries its own secret is refused.

    An idempotency record keeps a fast digest of the request body, and a digest of
    a body holding a secret could be brute-forced offline by whoever reads the
    records: such a request is retried without a key (or lets the server choose
    the secret, which is never part of the body).
    """
    if body is not None and "secret" in body:
        refuse_key(request, "a request that carries its own secret")
    return Idempotency.of(request, request.app[METASTORE], tenant, SYSTEM_CATALOG)


async def _may_change(
    request: web.Request, tenant: str, name: str, what: str, shuts_out: str | None = None
) -> None:
    """403 unless the caller may ``what`` (create, rotate, ...) principal ``name``: only
    a service admin changes a principal that ``METASTORE_AUTH_ADMINS`` names, and only a
    tenant admin (or a service admin) one that holds ``tenant_admin``. Rotating a
    secret, or creating the principal an admin id names, gives the caller that
    principal's tokens: a holder of ``PRINCIPAL_ROTATE_CREDENTIALS`` or
    ``PRINCIPAL_CREATE`` would otherwise become an admin of its tenant, or of every
    tenant (disabling or deleting one would lock its tenant's administration out).
    ``shuts_out`` ("service" for a creation, "record" for a disable): the change could
    refuse a provider user's tokens (``_shuts_out_user``)."""
    found = checker(request)
    if found is None or found.service_admin:  # auth off, or the operator's own
        return
    authorizer = request.app[AUTHORIZER]
    kinds: tuple[PrincipalKind, ...] = ("service", "user")  # those an admin id may name
    if any(authorizer.is_service_admin(Principal(tenant, name, kind)) for kind in kinds):
        shown = Principal(tenant, name, "service").id
        raise Forbidden(f"only service admins may {what} the service admin {shown}")
    if found.access.admin:
        return
    policy = await request.app[METASTORE].read(authorizer.policies.get, tenant)
    if policy.is_member(TENANT_ADMIN, name):
        raise Forbidden(f"only tenant admins may {what} {name}, who holds {TENANT_ADMIN}")
    if shuts_out is not None and await _shuts_out_user(request, tenant, name, shuts_out):
        raise Forbidden(
            f"only tenant admins may {what} {name} in the identity provider's tenant"
            f" {tenant}: it would shut out the provider's user {name}, whose roles"
            " (tenant_admin among them) come with its token"
        )


async def _shuts_out_user(request: web.Request, tenant: str, name: str, kind: str) -> bool:
    """Whether a service principal named ``name`` (``kind`` "service": created) or a
    disabled record of it (``kind`` "record": the one there disabled) would refuse the
    tokens of the identity provider's user ``name`` in ``tenant``. The node cannot know
    which names the provider's users have, nor which of them hold ``tenant_admin`` (their
    roles come with their tokens), so in the provider's tenant this is a tenant admin's."""
    provider = request.app[CONFIG].oidc
    if provider is None or provider.tenant != tenant:
        return False
    if kind == "service":
        return True
    principals = request.app[IDENTITY].principals
    try:
        record = record_of(await request.app[METASTORE].read(principals.get, tenant, name))
    except NoSuchPrincipal:
        return False
    return record is not None and record.type == "user"


@routes.get(PRINCIPALS)
async def list_principals(request: web.Request) -> web.Response:
    tenant = params.tenant(request)
    token, size = params.page(request)
    shown = visible(request)  # all with PRINCIPAL_LIST, else the caller itself
    principals = request.app[IDENTITY].principals
    metastore = request.app[METASTORE]
    page = await metastore.read(principals.list, tenant, token, size, shown.shows)
    return web.json_response(
        {
            "principals": [principal_json(tenant, e) for e in page.items],
            "next-page-token": page.next_token,
        }
    )


@routes.post(PRINCIPALS)
async def create_principal(request: web.Request) -> web.Response:
    tenant = params.tenant(request)
    body = await read_json(request, "create_principal")
    name = check_principal_name(body["name"])
    kind = body.get("type", "service")
    await _may_change(request, tenant, name, "create", "service" if kind == "service" else None)
    principals = request.app[IDENTITY].principals
    entity, secret = await _once(request, tenant, body).run(
        lambda record: principals.create(
            tenant,
            name,
            kind,
            body.get("secret"),
            principal_of(request),
            record,
        ),
        _changed(name),
    )
    return web.json_response(principal_json(tenant, entity, secret), status=201)


@routes.get(PRINCIPAL)
async def get_principal(request: web.Request) -> web.Response:
    tenant, name = params.tenant(request), _name(request)
    principals = request.app[IDENTITY].principals
    entity = await request.app[METASTORE].read(principals.get, tenant, name)
    return web.json_response(principal_json(tenant, entity))


@routes.post(PRINCIPAL + "/rotate")
async def rotate_principal(request: web.Request) -> web.Response:
    """A new secret (and so a new generation: every earlier token is refused)."""
    tenant, name = params.tenant(request), _name(request)
    body = await read_json(request, "rotate_principal") if body_of(request) else {}
    await _may_change(request, tenant, name, "rotate the secret of")
    principals = request.app[IDENTITY].principals
    entity, secret = await _once(request, tenant, body).run(
        lambda record: principals.rotate(
            tenant, name, body.get("secret"), principal_of(request), record
        ),
        _changed(name),
    )
    return web.json_response(principal_json(tenant, entity, secret))


async def _set_disabled(request: web.Request, disabled: bool) -> web.Response:
    tenant, name = params.tenant(request), _name(request)
    if disabled:
        await _may_change(request, tenant, name, "disable", "record")
    else:
        await _may_change(request, tenant, name, "enable")
    principals = request.app[IDENTITY].principals

    async def attempt(record: Any) -> tuple[Entity, None]:
        changed = await principals.set_disabled(
            tenant, name, disabled, principal_of(request), record
        )
        return changed, None

    entity, _ = await _once(request, tenant).run(attempt, _changed(name))
    return web.json_response(principal_json(tenant, entity))


@routes.post(PRINCIPAL + "/disable")
async def disable_principal(request: web.Request) -> web.Response:
    """Its tokens are refused on every node that has applied this commit."""
    return await _set_disabled(request, True)


@routes.post(PRINCIPAL + "/enable")
async def enable_principal(request: web.Request) -> web.Response:
    """A service principal needs a new token: disabling revoked the earlier ones."""
    return await _set_disabled(request, False)


@routes.delete(PRINCIPAL)
async def delete_principal(request: web.Request) -> web.Response:
    tenant, name = params.tenant(request), _name(request)
    await _may_change(request, tenant, name, "delete")
    principals = request.app[IDENTITY].principals

    async def attempt(record: Any) -> bool:
        await principals.delete(tenant, name, principal_of(request), record)
        return True

    await _once(request, tenant).run(attempt, lambda _: True)
    return web.Response(status=204)


@routes.post(TOKEN_KEYS + "/rotate")
async def rotate_token_key(request: web.Request) -> web.Response:
    """A new key signs tokens from now on; earlier keys keep verifying theirs until
    those expire. Service admins only (anyone with auth off)."""
    identity = request.app[IDENTITY]
    if request.app[CONFIG].auth_enabled and not identity.auth.is_service_admin(caller(request)):
        raise NotServiceAdmin("rotating the token signing key needs the service-admin role")
    once = Idempotency.of(request, request.app[METASTORE], identity.default_tenant, SYSTEM_CATALOG)

    def replayed(outcome: CommitOutcome) -> tuple[str, tuple[str, ...]]:
        ring = outcome.entities.get(TOKEN_KEYS_RECORD)
        assert ring is not None, "the recorded commit rotated the key"
        return ring.properties["current"], ()

    current, dropped = await once.run(
        lambda record: identity.keys.rotate(principal_of(request), record), replayed
    )
    return web.json_response({"current": current, "dropped": list(dropped)})


@routes.get(TENANT_COMMITS)
async def list_tenant_commits(request: web.Request) -> web.Response:
    """The history of the tenant's own records (its properties, principals and every
    other change to its system catalog), newest first, paged like a catalog's."""
    tenant = params.tenant(request)
    token, size = params.page(request)
    metastore = request.app[METASTORE]
    page = await metastore.read(metastore.list_commits, tenant, SYSTEM_CATALOG, token, size)
    return web.json_response(
        {"commits": [commit_json(c) for c in page.items], "next-page-token": page.next_token}
    )


@routes.get("/api/v1/whoami")
async def whoami(request: web.Request) -> web.Response:
    """The caller as the node sees it: what a token proves (and the roles it asserts)."""
    principal = caller(request)
    return web.json_response(
        {
            "id": principal.id,
            "tenant": principal.tenant,
            "name": principal.name,
            "kind": principal.kind,
            "roles": sorted(principal.roles),
            "service-admin": request.app[IDENTITY].auth.is_service_admin(principal),
        }
    )
