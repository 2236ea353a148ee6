"""Settings that name principals: the bootstrap clients and the service admins.

Checked at startup like every setting (``metastore.util.setting_rules``), but with the
rules of principal ids (``principal``): a reserved name, the default tenant, the
identity provider's tenant.
"""

from __future__ import annotations

from collections.abc import Collection

from metastore.security.principal import DEFAULT_TENANT, RESERVED_NAMES, Principal
from metastore.util.setting_rules import CLIENT_ID, ConfigError, check_secret


def parse_clients(setting: str, text: str) -> dict[str, str]:
    """``id:secret[,id:secret...]`` -> {id: secret}; never quotes a secret in a message.

    An id is 1-128 of ``A-Za-z0-9_.-`` starting with a letter or digit, not
    ``anonymous`` or ``system`` (it names a service principal of the default tenant
    and appears in the commit history); a secret is 8-1024
    characters, none of them control characters, without surrounding whitespace
    (a pasted newline is a mistake, not part of a secret). An id given twice is
    refused: which secret would count is not for the node to guess.
    """
    clients: dict[str, str] = {}
    if not text:
        return clients
    for position, entry in enumerate(text.split(","), start=1):
        client, sep, secret = entry.partition(":")
        where = f"entry {position}"
        if not sep:
            raise ConfigError(setting, f"{where} is not id:secret")
        if not CLIENT_ID.fullmatch(client):
            raise ConfigError(
                setting,
                f"{where}: the client id must be 1-128 of A-Z a-z 0-9 _ . - starting with"
                " a letter or digit",
            )
        where = f"client {client!r}"
        if client in clients:
            raise ConfigError(setting, f"{where} is listed twice")
        if client in RESERVED_NAMES:
            raise ConfigError(setting, f"{where}: the id is reserved")
        try:
            clients[client] = check_secret(secret)
        except ValueError as exc:
            raise ConfigError(setting, f"{where}: {exc}") from None
    return clients


ADMIN_KINDS = ("service", "user")  # what an entry of the service-admin list may name


def parse_admins(
    setting: str, text: str, provider_tenant: str | None, clients: Collection[str]
) -> frozenset[tuple[str, str]]:
    """``entry[,entry...]`` -> {(kind, principal id)}: each entry ``id``,
    ``service:id`` or ``user:id``, an id ``name`` (the default tenant) or
    ``name@tenant``.

    A service principal and a user of the identity provider may share a name, and
    the service principal's record may come and go (a routine delete), so an entry
    names one kind: a bare id names a service principal, unless it lies in the
    provider's tenant (``provider_tenant``), where it could name either and is
    refused unless it is a bootstrap client (``clients``, service principals). Were
    the kind guessed from which record exists, deleting service principal ``ops``
    would make any provider user who signs in as ``ops`` a service admin."""
    admins: set[tuple[str, str]] = set()
    if not text:
        return frozenset()
    for position, entry in enumerate(text.split(","), start=1):
        kind, colon, principal = entry.rpartition(":")
        if colon and kind not in ADMIN_KINDS:
            raise ConfigError(setting, f"entry {position}: the kind must be service or user")
        name, at, tenant = principal.partition("@")
        if not CLIENT_ID.fullmatch(name) or (at and not CLIENT_ID.fullmatch(tenant)):
            raise ConfigError(
                setting,
                f"entry {position} is not a principal id: name or name@tenant, each 1-128 of"
                " A-Z a-z 0-9 _ . - starting with a letter or digit, with an optional"
                " service: or user: before it",
            )
        if name in RESERVED_NAMES:
            raise ConfigError(setting, f"entry {position}: {name!r} is reserved")
        tenant = tenant if at else DEFAULT_TENANT
        ident = Principal(tenant, name, "service").id  # name@default is name
        if not colon:
            if tenant == provider_tenant and ident not in clients:
                raise ConfigError(
                    setting,
                    f"entry {position} ({principal}) is in the identity provider's tenant"
                    f" {tenant}, where it may be a service principal or a provider user:"
                    f" write service:{principal} or user:{principal}",
                )
            kind = "service"
        admins.add((kind, ident))
    return frozenset(admins)
