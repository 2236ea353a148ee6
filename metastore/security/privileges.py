"""Privileges, where each can be granted, and what each implies.

The model is Apache Polaris's: a privilege is granted on a securable (a tenant, a
catalog, a namespace, a table or a view) and holds there and on everything below it
(tenant -> catalog -> namespace -> child namespaces -> tables and views). Every
privilege has a *level*, the kind of securable it is about (``TABLE_READ_DATA`` is
about a table, ``TABLE_CREATE`` about the namespace a table is created in); it may be
granted on that kind or on any kind above it, never below.

Some privileges imply others (``IMPLIES``): ``TABLE_WRITE_DATA`` implies
``TABLE_READ_DATA``, ``CATALOG_MANAGE_CONTENT`` everything about a catalog's content.
``implied(p)`` is the transitive closure, computed once at import, so a check never
walks the table.

``TENANT_CREATE`` and ``TENANT_DROP`` are service privileges: only service admins
hold them, and they cannot be granted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import Enum
from types import MappingProxyType


class Level(Enum):
    """What a privilege is about: a kind of securable (value: its name in the API)."""

    SERVICE = "service"
    TENANT = "tenant"
    CATALOG = "catalog"
    NAMESPACE = "namespace"
    TABLE = "table"
    VIEW = "view"

    @property
    def depth(self) -> int:
        """Distance from the root of the securable tree (tables and views are siblings)."""
        return _DEPTH[self]


_DEPTH = {
    Level.SERVICE: 0,
    Level.TENANT: 1,
    Level.CATALOG: 2,
    Level.NAMESPACE: 3,
    Level.TABLE: 4,
    Level.VIEW: 4,
}


class Privilege(Enum):
    """Value: (name, level); the name is what the API and the stored grants use."""

    # service: held by service admins only, never granted
    TENANT_CREATE = ("TENANT_CREATE", Level.SERVICE)
    TENANT_DROP = ("TENANT_DROP", Level.SERVICE)
    # tenant: granted to principal roles
    TENANT_READ_PROPERTIES = ("TENANT_READ_PROPERTIES", Level.TENANT)
    TENANT_WRITE_PROPERTIES = ("TENANT_WRITE_PROPERTIES", Level.TENANT)
    TENANT_READ_HISTORY = ("TENANT_READ_HISTORY", Level.TENANT)
    TENANT_MANAGE_ACCESS = ("TENANT_MANAGE_ACCESS", Level.TENANT)
    CATALOG_CREATE = ("CATALOG_CREATE", Level.TENANT)
    CATALOG_LIST = ("CATALOG_LIST", Level.TENANT)
    PRINCIPAL_CREATE = ("PRINCIPAL_CREATE", Level.TENANT)
    PRINCIPAL_LIST = ("PRINCIPAL_LIST", Level.TENANT)
    PRINCIPAL_READ_PROPERTIES = ("PRINCIPAL_READ_PROPERTIES", Level.TENANT)
    PRINCIPAL_WRITE_PROPERTIES = ("PRINCIPAL_WRITE_PROPERTIES", Level.TENANT)
    PRINCIPAL_ROTATE_CREDENTIALS = ("PRINCIPAL_ROTATE_CREDENTIALS", Level.TENANT)
    PRINCIPAL_DROP = ("PRINCIPAL_DROP", Level.TENANT)
    PRINCIPAL_ROLE_CREATE = ("PRINCIPAL_ROLE_CREATE", Level.TENANT)
    PRINCIPAL_ROLE_LIST = ("PRINCIPAL_ROLE_LIST", Level.TENANT)
    PRINCIPAL_ROLE_READ_PROPERTIES = ("PRINCIPAL_ROLE_READ_PROPERTIES", Level.TENANT)
    PRINCIPAL_ROLE_DROP = ("PRINCIPAL_ROLE_DROP", Level.TENANT)
    # catalog: granted to catalog roles on their catalog, or to principal roles on the tenant
    CATALOG_READ_PROPERTIES = ("CATALOG_READ_PROPERTIES", Level.CATALOG)
    CATALOG_WRITE_PROPERTIES = ("CATALOG_WRITE_PROPERTIES", Level.CATALOG)
    CATALOG_DROP = ("CATALOG_DROP", Level.CATALOG)
    CATALOG_READ_HISTORY = ("CATALOG_READ_HISTORY", Level.CATALOG)
    CATALOG_RESET_REF = ("CATALOG_RESET_REF", Level.CATALOG)
    CATALOG_MANAGE_ACCESS = ("CATALOG_MANAGE_ACCESS", Level.CATALOG)
    CATALOG_MANAGE_CONTENT = ("CATALOG_MANAGE_CONTENT", Level.CATALOG)
    # namespace
    NAMESPACE_CREATE = ("NAMESPACE_CREATE", Level.NAMESPACE)
    NAMESPACE_LIST = ("NAMESPACE_LIST", Level.NAMESPACE)
    NAMESPACE_READ_PROPERTIES = ("NAMESPACE_READ_PROPERTIES", Level.NAMESPACE)
    NAMESPACE_WRITE_PROPERTIES = ("NAMESPACE_WRITE_PROPERTIES", Level.NAMESPACE)
    NAMESPACE_DROP = ("NAMESPACE_DROP", Level.NAMESPACE)
    TABLE_CREATE = ("TABLE_CREATE", Level.NAMESPACE)
    TABLE_LIST = ("TABLE_LIST", Level.NAMESPACE)
    VIEW_CREATE = ("VIEW_CREATE", Level.NAMESPACE)
    VIEW_LIST = ("VIEW_LIST", Level.NAMESPACE)
    # table
    TABLE_READ_PROPERTIES = ("TABLE_READ_PROPERTIES", Level.TABLE)
    TABLE_WRITE_PROPERTIES = ("TABLE_WRITE_PROPERTIES", Level.TABLE)
    TABLE_READ_DATA = ("TABLE_READ_DATA", Level.TABLE)
    TABLE_WRITE_DATA = ("TABLE_WRITE_DATA", Level.TABLE)
    TABLE_DROP = ("TABLE_DROP", Level.TABLE)
    # view
    VIEW_READ = ("VIEW_READ", Level.VIEW)
    VIEW_WRITE = ("VIEW_WRITE", Level.VIEW)
    VIEW_DROP = ("VIEW_DROP", Level.VIEW)

    @property
    def level(self) -> Level:
        return self.value[1]

    @property
    def grantable(self) -> bool:
        return self.level is not Level.SERVICE

    def grantable_on(self, kind: Level) -> bool:
        """True iff the privilege may be granted on a securable of ``kind``: its own
        level or one above it (a table privilege on a namespace, catalog or tenant)."""
        if not self.grantable or kind is Level.SERVICE:
            return False
        if kind is self.level:
            return True
        if kind in (Level.TABLE, Level.VIEW):  # a leaf holds only its own privileges
            return False
        return kind.depth < self.level.depth

    @classmethod
    def named(cls, name: str) -> Privilege:
        """The privilege called ``name`` (KeyError for anything else)."""
        return _BY_NAME[name]


_BY_NAME = {p.name: p for p in Privilege}
P = Privilege
_NAMESPACE_CONTENT = (
    P.NAMESPACE_CREATE,
    P.NAMESPACE_LIST,
    P.NAMESPACE_READ_PROPERTIES,
    P.NAMESPACE_WRITE_PROPERTIES,
    P.NAMESPACE_DROP,
    P.TABLE_CREATE,
    P.TABLE_LIST,
    P.TABLE_READ_PROPERTIES,
    P.TABLE_WRITE_PROPERTIES,
    P.TABLE_READ_DATA,
    P.TABLE_WRITE_DATA,
    P.TABLE_DROP,
    P.VIEW_CREATE,
    P.VIEW_LIST,
    P.VIEW_READ,
    P.VIEW_WRITE,
    P.VIEW_DROP,
)

# privilege -> what holding it directly also grants (closed transitively below)
IMPLIES: Mapping[Privilege, tuple[Privilege, ...]] = MappingProxyType(
    {
        P.TENANT_WRITE_PROPERTIES: (P.TENANT_READ_PROPERTIES,),
        P.TENANT_MANAGE_ACCESS: (
            P.TENANT_READ_PROPERTIES,
            P.TENANT_READ_HISTORY,
            P.PRINCIPAL_LIST,
            P.PRINCIPAL_READ_PROPERTIES,
            P.PRINCIPAL_ROLE_CREATE,
            P.PRINCIPAL_ROLE_READ_PROPERTIES,
            P.PRINCIPAL_ROLE_DROP,
            P.CATALOG_LIST,
            P.CATALOG_MANAGE_ACCESS,
        ),
        P.CATALOG_CREATE: (P.CATALOG_LIST,),
        P.PRINCIPAL_CREATE: (P.PRINCIPAL_LIST,),
        P.PRINCIPAL_READ_PROPERTIES: (P.PRINCIPAL_LIST,),
        P.PRINCIPAL_WRITE_PROPERTIES: (P.PRINCIPAL_READ_PROPERTIES,),
        P.PRINCIPAL_ROTATE_CREDENTIALS: (P.PRINCIPAL_READ_PROPERTIES,),
        P.PRINCIPAL_DROP: (P.PRINCIPAL_LIST,),
        P.PRINCIPAL_ROLE_CREATE: (P.PRINCIPAL_ROLE_LIST,),
        P.PRINCIPAL_ROLE_READ_PROPERTIES: (P.PRINCIPAL_ROLE_LIST,),
        P.PRINCIPAL_ROLE_DROP: (P.PRINCIPAL_ROLE_LIST,),
        # on the tenant, reading every catalog's properties includes listing them
        P.CATALOG_READ_PROPERTIES: (P.CATALOG_LIST,),
        P.CATALOG_WRITE_PROPERTIES: (P.CATALOG_READ_PROPERTIES,),
        P.CATALOG_RESET_REF: (P.CATALOG_READ_HISTORY,),
        P.CATALOG_MANAGE_CONTENT: (
            P.CATALOG_READ_PROPERTIES,
            P.CATALOG_WRITE_PROPERTIES,
            P.CATALOG_READ_HISTORY,
            *_NAMESPACE_CONTENT,
        ),
        P.NAMESPACE_CREATE: (P.NAMESPACE_LIST,),
        P.NAMESPACE_READ_PROPERTIES: (P.NAMESPACE_LIST,),
        P.NAMESPACE_WRITE_PROPERTIES: (P.NAMESPACE_READ_PROPERTIES,),
        P.NAMESPACE_DROP: (P.NAMESPACE_LIST,),
        P.TABLE_CREATE: (P.TABLE_LIST,),
        P.TABLE_READ_PROPERTIES: (P.TABLE_LIST,),
        P.TABLE_WRITE_PROPERTIES: (P.TABLE_READ_PROPERTIES,),
        P.TABLE_READ_DATA: (P.TABLE_READ_PROPERTIES,),
        P.TABLE_WRITE_DATA: (P.TABLE_READ_DATA, P.TABLE_WRITE_PROPERTIES),
        P.TABLE_DROP: (P.TABLE_LIST,),
        P.VIEW_CREATE: (P.VIEW_LIST,),
        P.VIEW_READ: (P.VIEW_LIST,),
        P.VIEW_WRITE: (P.VIEW_READ,),
        P.VIEW_DROP: (P.VIEW_LIST,),
    }
)


def _closure(privilege: Privilege) -> frozenset[Privilege]:
    seen = {privilege}
    todo = [privilege]
    while todo:
        for implied_one in IMPLIES.get(todo.pop(), ()):
            if implied_one not in seen:
                seen.add(implied_one)
                todo.append(implied_one)
    return frozenset(seen)


_CLOSURE = {p: _closure(p) for p in Privilege}
ALL: frozenset[Privilege] = frozenset(Privilege)
GRANTABLE: frozenset[Privilege] = frozenset(p for p in Privilege if p.grantable)


def implied(privilege: Privilege) -> frozenset[Privilege]:
    """``privilege`` and everything holding it grants (transitively)."""
    return _CLOSURE[privilege]


def expand(privileges: Iterable[Privilege]) -> frozenset[Privilege]:
    """Every privilege the given ones grant together."""
    result: set[Privilege] = set()
    for privilege in privileges:
        result |= _CLOSURE[privilege]
    return frozenset(result)
