"""The tenant a request acts in: which consistency tokens it accepts, whose rate it spends,
and who may set a tenant's quota.

A request names its tenant in its path (``/api/v1/tenants/{tenant}/...``), its
Iceberg prefix (``/v1/{tenant~catalog}/...``), its warehouse (``/v1/config?
warehouse=tenant/catalog``) or, at the token endpoint, its client id
(``name@tenant``); ``named_tenant`` reads it without reading any data. Requests that
name none (listing tenants, ``whoami``, a bare warehouse) act in the caller's tenant.

- **Consistency tokens** (``metastore.catalog.consistency``, cluster mode): a token covers a
  write of one tenant and is accepted only by requests to that tenant, checked before
  the node waits for it when the request names its tenant (``check_token``, from the
  write routing), else after authentication against the caller's tenant (service
  admins, and every caller of a node without authentication, act in any tenant).
- **Request rate** (``charge``, from the ``tenancy`` middleware after authentication,
  before authorization): every authenticated request spends one token of its tenant's
  bucket on this node (``metastore.catalog.rate``): the caller's tenant, or with authentication off
  the tenant the request names (else the default tenant). Over it: 429
  ``TooManyRequestsException`` with ``Retry-After``, before anything is read or
  written. ``/health``, ``/metrics``, the token endpoint (limited on its own) and
  requests another node forwarded (spent where they arrived) are not counted.
- **Quota properties** (``guard_quota``): only a service admin sets or removes a
  tenant's ``quota.*`` properties (with authentication off every caller may).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from urllib.parse import parse_qs

from aiohttp import web

from metastore.catalog.consistency import ConsistencyToken, TokenScopes
from metastore.catalog.quotas import check_properties, names_quota
from metastore.catalog.rate import RateLimiter
from metastore.errors import Forbidden, InvalidName, TooManyRequests
from metastore.http.caller import caller
from metastore.http.peers import PEER
from metastore.http.typedefs import CONFIG, IDENTITY, METASTORE, QUOTAS, RATES, SCOPES
from metastore.http.validation import BODY
from metastore.iceberg.prefixes import WAREHOUSE_SEPARATOR, decode_prefix, decode_warehouse
from metastore.model.names import check_system_name
from metastore.security.principal import Principal, parse_principal_id
from metastore.util.clock import SystemClock

# a token to check against the caller's tenant; this request already spent its token
UNSCOPED = web.RequestKey("tenancy-token", ConsistencyToken)
CHARGED = web.RequestKey("tenancy-charged", bool)
TOKEN_PATH = "/v1/oauth/tokens"
CONFIG_PATH = "/v1/config"


def named_tenant(request: web.Request) -> str | None:
    """The tenant the request names (path, prefix, warehouse, client id), else None;
    a malformed name is None here and the handler's 400."""
    info = request.match_info
    default = request.app[CONFIG].default_tenant
    try:
        if "tenant" in info:
            return check_system_name("tenant", info["tenant"])
        if "prefix" in info:
            return decode_prefix(info["prefix"], default)[0]
        if request.path == CONFIG_PATH:
            warehouse = request.query.get("warehouse", "")
            if WAREHOUSE_SEPARATOR in warehouse:
                return decode_warehouse(warehouse, default)[0]
        if request.path == TOKEN_PATH:
            return _client_tenant(request)
    except InvalidName:
        return None
    return None


def _client_tenant(request: web.Request) -> str | None:
    body = request.get(BODY)
    if not isinstance(body, bytes):
        return None
    try:
        form = parse_qs(body.decode(), max_num_fields=16)
    except (UnicodeDecodeError, ValueError):
        return None
    ids = form.get("client_id", [])
    parsed = parse_principal_id(ids[0]) if len(ids) == 1 else None
    return parsed[0] if parsed is not None else None


def check_token(request: web.Request, token: ConsistencyToken) -> None:
    """400 for a token of another tenant than the one the request names; a request
    naming none has its token checked once its caller is known (``check_caller_token``)."""
    tenant = named_tenant(request)
    if tenant is None:
        request[UNSCOPED] = token
    else:
        request.app[SCOPES].check(token, tenant)


def check_caller_token(request: web.Request, principal: Principal) -> None:
    """After authentication (on): a token the request's path left unchecked
    (``check_token``) must be of the caller's tenant, unless a service admin calls."""
    if not request.app[CONFIG].auth_enabled:
        return
    token = request.get(UNSCOPED)
    if token is not None and not request.app[IDENTITY].auth.is_service_admin(principal):
        request.app[SCOPES].check(token, principal.tenant)


async def charge(request: web.Request, principal: Principal) -> None:
    """One token of the tenant's request bucket on this node, once per request (a
    forwarded request spent it where it arrived); 429 past the tenant's rate. The
    quota is one read within the last second (``TenantQuotas.fresh``), else it is read
    from the store (the tenant's ref at least): a thread."""
    if request.get(PEER) is not None or request.get(CHARGED):
        return
    request[CHARGED] = True
    config = request.app[CONFIG]
    tenant = principal.tenant if config.auth_enabled else named_tenant(request)
    tenant = tenant or config.default_tenant
    quotas = request.app[QUOTAS]
    known, quota = quotas.fresh(tenant)
    if not known:
        quota = await request.app[METASTORE].read_point(quotas.of, tenant)
    if quota is not None and quota.requests_per_second > 0:
        wait = request.app[RATES].take(tenant, quota.requests_per_second, quota.capacity)
        if wait:
            raise TooManyRequests(
                f"tenant {tenant!r} is over its request rate ({quota.requests_per_second:g}"
                f" per second on this node, quota.requests-per-second); retry in {wait} s",
                wait,
            )


def guard_quota(request: web.Request, updates: Mapping[str, str], removals: Sequence[str]) -> None:
    """A tenant properties change naming ``quota.*``: valid values, and a service admin's
    (403 for anyone else; with authentication off every caller may)."""
    if not names_quota(updates, removals):
        return
    check_properties(updates, removals)
    if request.app[CONFIG].auth_enabled:
        principal = caller(request)
        if not request.app[IDENTITY].auth.is_service_admin(principal):
            raise Forbidden(
                f"principal {principal.id!r} may not change quota.* properties:"
                " a tenant's quota is set by a service admin"
            )


def setup_tenancy(app: web.Application) -> None:
    """The tenancy state: request buckets and the consistency tokens' tenant tags."""
    app[RATES] = RateLimiter(SystemClock())
    app[SCOPES] = TokenScopes(app[CONFIG].cluster_key)
