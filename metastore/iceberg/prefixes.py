"""Which tenant and catalog an Iceberg request names: the REST ``warehouse`` and ``prefix``.

An Iceberg client asks ``GET /v1/config?warehouse=<w>`` once, then puts the
``overrides.prefix`` it got into every path. A warehouse is ``catalog`` (a catalog of
the caller's own tenant; with authentication off, of the default tenant) or
``tenant/catalog``. The prefix names both whoever sends it, so one URL means one
catalog to every caller, every node and every idempotency fingerprint: the bare
catalog name in the default tenant (so the prefixes clients stored before other
tenants were reachable keep working) and ``tenant~catalog`` elsewhere. Tenant and
catalog names are ``A-Za-z0-9_.-``, so neither ``/`` nor ``~`` can be part of one, and
``~`` is unreserved in URLs: the prefix needs no escaping in a path.

A client that never asked ``/v1/config`` calls the routes without a prefix
(``/v1/namespaces``, ...; ``metastore.iceberg.routes.unprefixed``), which serve the catalog
``/v1/config`` gives without a warehouse. ``/v1/namespaces/namespaces`` would then read
both as "namespace ``namespaces`` of that catalog" and as "the namespaces of catalog
``namespaces``", so ``namespaces`` is never a bare prefix: that catalog of the default
tenant has the prefix ``default~namespaces`` (the router gives a path both route kinds
match to the route without a prefix, and a bare ``namespaces`` elsewhere is a 400).

Parsing is pure (no reads): the authorization check of a request runs on the names
alone, so a principal probing another tenant's prefixes learns nothing about which
of them exist.
"""

from __future__ import annotations

from metastore.errors import InvalidName
from metastore.model.names import check_system_name

TENANT_SEPARATOR = "~"  # in a prefix: tenant~catalog
WAREHOUSE_SEPARATOR = "/"  # in a warehouse: tenant/catalog
# the first segment of the routes without a prefix whose second segment is a name
UNPREFIXED_HEAD = "namespaces"


def decode_prefix(prefix: str, default_tenant: str) -> tuple[str, str]:
    """``(tenant, catalog)`` a prefix names; 400 for a malformed one."""
    tenant, separator, catalog = prefix.partition(TENANT_SEPARATOR)
    if not separator:
        if prefix == UNPREFIXED_HEAD:
            raise InvalidName(
                f"the prefix {prefix!r} is ambiguous with the routes without a prefix: "
                f"use {default_tenant}{TENANT_SEPARATOR}{prefix} (as /v1/config answers)"
            )
        return default_tenant, check_system_name("catalog (prefix)", prefix)
    return check_system_name("tenant (prefix)", tenant), check_system_name("catalog", catalog)


def encode_prefix(tenant: str, catalog: str, default_tenant: str) -> str:
    """The one prefix ``/v1/config`` gives for a catalog (``decode_prefix`` reads it back)."""
    if tenant == default_tenant and catalog != UNPREFIXED_HEAD:
        return catalog
    return f"{tenant}{TENANT_SEPARATOR}{catalog}"


def decode_warehouse(warehouse: str, own_tenant: str) -> tuple[str, str]:
    """``(tenant, catalog)`` of a ``warehouse`` client property: ``catalog`` (in
    ``own_tenant``) or ``tenant/catalog``; 400 for anything else."""
    tenant, separator, catalog = warehouse.partition(WAREHOUSE_SEPARATOR)
    if not separator:
        tenant, catalog = own_tenant, warehouse
    try:
        return check_system_name("tenant", tenant), check_system_name("catalog", catalog)
    except InvalidName as exc:
        raise InvalidName(
            f"invalid warehouse {warehouse!r}: use 'catalog' or 'tenant/catalog' ({exc.message})"
        ) from None
