"""Securables: what a privilege is granted on and checked against.

A securable is a tenant, a catalog, a namespace, a table or a view of one tenant.
Inside its tenant it is named by a *path*, a tuple of strings in which every
ancestor's path is a prefix: ``()`` the tenant, ``(catalog,)`` a catalog,
``(catalog, level, ...)`` a namespace, and for a table or view the namespace's path
plus one leaf element ``"\\x00t" + name`` or ``"\\x00v" + name``. Names never hold
control characters, so a leaf element can never equal a namespace level, and
inheritance down the tree is a prefix test: a grant on path ``g`` covers every
securable whose path starts with ``g``.
"""

from __future__ import annotations

from dataclasses import dataclass

from metastore.model.keys import EntityKey, Kind
from metastore.security.privileges import Level

Path = tuple[str, ...]
_LEAF = {Level.TABLE: "\x00t", Level.VIEW: "\x00v"}
_KIND_LEVEL = {Kind.NAMESPACE: Level.NAMESPACE, Kind.TABLE: Level.TABLE, Kind.VIEW: Level.VIEW}


def leaf(kind: Level, name: str) -> str:
    """The path element of a table or view."""
    return _LEAF[kind] + name


def is_leaf(element: str) -> bool:
    return element.startswith("\x00")


def leaf_of(element: str, kind: Level) -> str | None:
    """The name of a table or view element of ``kind``, else None."""
    marker = _LEAF[kind]
    return element[len(marker) :] if element.startswith(marker) else None


@dataclass(frozen=True, slots=True)
class Securable:
    tenant: str
    path: Path
    kind: Level

    @classmethod
    def of_service(cls) -> Securable:
        """The whole service (what only service admins act on: tenants themselves)."""
        return cls("", (), Level.SERVICE)

    @classmethod
    def of_tenant(cls, tenant: str) -> Securable:
        return cls(tenant, (), Level.TENANT)

    @classmethod
    def of_catalog(cls, tenant: str, catalog: str) -> Securable:
        return cls(tenant, (catalog,), Level.CATALOG)

    @classmethod
    def of_namespace(cls, tenant: str, catalog: str, levels: tuple[str, ...]) -> Securable:
        """A namespace; ``()`` is the catalog itself (the parent of top-level namespaces)."""
        if not levels:
            return cls.of_catalog(tenant, catalog)
        return cls(tenant, (catalog, *levels), Level.NAMESPACE)

    @classmethod
    def of_entity(cls, tenant: str, catalog: str, key: EntityKey) -> Securable:
        """The namespace, table or view an entity key names."""
        level = _KIND_LEVEL[key.kind]
        if level is Level.NAMESPACE:
            return cls(tenant, (catalog, *key.path), level)
        return cls(tenant, (catalog, *key.namespace, leaf(level, key.name)), level)

    @property
    def catalog(self) -> str | None:
        return self.path[0] if self.path else None

    def describe(self) -> str:
        """For people: ``tenant t``, ``catalog c``, ``table c.ns.orders``..."""
        if self.kind is Level.SERVICE:
            return "the service"
        if self.kind is Level.TENANT:
            return f"tenant {self.tenant}"
        names = [e[2:] if is_leaf(e) else e for e in self.path]
        return f"{self.kind.value} {'.'.join(names)}"
