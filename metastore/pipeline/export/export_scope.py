"""Which of a tenant's access records an export of one catalog keeps.

A tenant's principals, roles and grants are records of the tenant, not of a catalog,
so an export narrowed to one catalog keeps only the access that reaches into it:
the catalog's own roles (``catalog-role:<catalog>:…``), their privileges
(``grant:c:<catalog>:…``) and their grants to principal roles
(``role-grant:<role>:<catalog>:…``); the principal roles holding them and the
memberships of those roles; and the principals that are members. Privileges of
principal roles are on the tenant itself (never on a catalog), so none is kept, and
nor is the built-in ``tenant_admin``, which holds its privileges without records.
"""

from __future__ import annotations

from collections.abc import Iterable

from metastore.security.grants import CATALOG_ROLE, GRANT, MEMBER, PRINCIPAL_ROLE, ROLE_GRANT
from metastore.security.principal_records import PRINCIPAL_PREFIX


def on_catalog(names: Iterable[str], catalog: str) -> set[str]:
    """The names of the records among ``names`` (a tenant's system records) that an
    export of ``catalog`` keeps."""
    names = list(names)
    kept = {
        name
        for name in names
        if name.startswith((f"{CATALOG_ROLE}{catalog}:", f"{GRANT}c:{catalog}:"))
    }
    holders = set()
    for name in names:
        if name.startswith(ROLE_GRANT):
            role, role_catalog, _ = name[len(ROLE_GRANT) :].split(":", 2)
            if role_catalog == catalog:
                kept.add(name)
                holders.add(role)
    kept |= {f"{PRINCIPAL_ROLE}{role}" for role in holders}
    for name in names:
        if name.startswith(MEMBER):
            role, principal = name[len(MEMBER) :].split(":", 1)
            if role in holders:
                kept |= {name, f"{PRINCIPAL_PREFIX}{principal}"}
    return kept & set(names)
