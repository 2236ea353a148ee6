"""Roles and grants as data: the records of one tenant's access policy.

Every record is a system entity of the tenant's system catalog, so it is written by
a commit (with history: who granted what, when), replicates through the changelog
like any entity, and is deleted with the tenant. Names in keys are tenant, catalog,
role and principal names, which never hold ``:``, so keys split unambiguously.

=========================================  ==============================================
key                                        meaning, properties
=========================================  ==============================================
``principal-role:<role>``                  a principal role; the caller's properties
``member:<role>:<principal>``              the principal holds the role; ``role-id``,
                                           ``principal-id``
``catalog-role:<catalog>:<role>``          a catalog role; the caller's properties plus
                                           ``metastore.catalog-id``: the catalog it is for
``role-grant:<principal-role>:<catalog>:   the catalog role is granted to the principal
<catalog-role>``                           role; ``role-id``, ``catalog-role-id``
``grant:<grantee>:<digest>``               a privilege on a securable: ``privilege``,
                                           ``securable`` (JSON ``{"kind", "path"}``),
                                           ``role-id`` (the grantee's); grantee
                                           ``p:<principal-role>`` (on the tenant) or
                                           ``c:<catalog>:<catalog-role>``
=========================================  ==============================================

A record links others by name and names the *ids* they had when it was written
(an entity id is stable across the versions of one record and new for a record
created again; ``tenant_admin``, which has no record, has the id ""). A link whose
ids no longer match holds nothing: a principal, role or catalog deleted and created
again under the same name is a different one, and the old memberships, grants and
catalog roles do not apply to it, even if a commit racing the deletion wrote them.
Namespaces, tables and views are named by path only: one dropped and created again
under the same name keeps the grants on its path.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from metastore.errors import BadRequest
from metastore.model.keys import EntityKey, Kind
from metastore.model.names import check_name, check_namespace
from metastore.security.privileges import Level, Privilege
from metastore.security.securables import Path, is_leaf, leaf

PRINCIPAL_ROLE = "principal-role:"
MEMBER = "member:"
CATALOG_ROLE = "catalog-role:"
ROLE_GRANT = "role-grant:"
GRANT = "grant:"
PRINCIPAL = "principal:"  # the principal records (metastore.security.principal_records)
RESERVED_PROPERTY = "metastore."  # properties a caller may not set on a role
CATALOG_ID = RESERVED_PROPERTY + "catalog-id"
# the ids a link record names: the records it links when it was written
ROLE_ID = "role-id"
PRINCIPAL_ID = "principal-id"
CATALOG_ROLE_ID = "catalog-role-id"
TENANT_ADMIN = "tenant_admin"  # the built-in principal role: every privilege in its tenant


def system_key(name: str) -> EntityKey:
    return EntityKey(Kind.SYSTEM, (), name)


def principal_role_key(role: str) -> EntityKey:
    return system_key(f"{PRINCIPAL_ROLE}{role}")


def member_key(role: str, principal: str) -> EntityKey:
    return system_key(f"{MEMBER}{role}:{principal}")


def catalog_role_key(catalog: str, role: str) -> EntityKey:
    return system_key(f"{CATALOG_ROLE}{catalog}:{role}")


def role_grant_key(principal_role: str, catalog: str, catalog_role: str) -> EntityKey:
    return system_key(f"{ROLE_GRANT}{principal_role}:{catalog}:{catalog_role}")


@dataclass(frozen=True, slots=True)
class Grantee:
    """Who holds a grant: a principal role (tenant-level) or a catalog role."""

    role: str
    catalog: str | None = None  # None: a principal role

    @property
    def code(self) -> str:
        return f"p:{self.role}" if self.catalog is None else f"c:{self.catalog}:{self.role}"

    @classmethod
    def parse(cls, code: str) -> Grantee | None:
        kind, _, rest = code.partition(":")
        if kind == "p" and rest:
            return cls(rest)
        catalog, _, role = rest.partition(":")
        return cls(role, catalog) if kind == "c" and catalog and role else None


@dataclass(frozen=True, slots=True)
class Grant:
    """A privilege on a securable, held by a grantee. ``path`` is the securable's path
    in the tenant (``metastore.security.securables``); for a catalog role's grant it
    starts with the role's catalog."""

    grantee: Grantee
    privilege: Privilege
    kind: Level
    path: Path

    @property
    def key(self) -> EntityKey:
        text = json.dumps([self.privilege.name, self.kind.value, list(self.path)])
        digest = hashlib.sha256(text.encode()).hexdigest()[:32]
        return system_key(f"{GRANT}{self.grantee.code}:{digest}")

    def properties(self) -> dict[str, str]:
        return {
            "privilege": self.privilege.name,
            "securable": json.dumps(securable_json(self.kind, self.path)),
        }

    @classmethod
    def of(cls, name: str, properties: Mapping[str, str]) -> Grant | None:
        """The grant a record holds, or None if it is not one this version wrote."""
        code, _, _ = name.removeprefix(GRANT).rpartition(":")
        grantee = Grantee.parse(code)
        try:
            privilege = Privilege.named(properties["privilege"])
            on = json.loads(properties["securable"])
            kind, path = securable_path(on, grantee.catalog if grantee else None)
        except (KeyError, ValueError, TypeError, BadRequest):
            return None
        if grantee is None:
            return None
        return cls(grantee, privilege, kind, path)


def securable_json(kind: Level, path: Path) -> dict[str, Any]:
    """The API form of a securable inside a catalog role's catalog (or the tenant):
    ``{"kind": "table", "path": ["ns", "orders"]}``; the catalog is not repeated."""
    names = [e[2:] if is_leaf(e) else e for e in path[1:]]
    return {"kind": kind.value, "path": names}


_KINDS = {level.value: level for level in Level if level is not Level.SERVICE}


def securable_path(value: Any, catalog: str | None) -> tuple[Level, Path]:
    """``{"kind", "path"}`` (already schema-checked for shape) -> (kind, tenant path).

    ``catalog`` is the catalog role's catalog (None for a principal role's grant, which
    is always on the tenant itself). 400 for a securable outside it.
    """
    if not isinstance(value, dict):
        raise BadRequest("a securable is {kind, path}")
    kind = _KINDS.get(value.get("kind", ""))
    names = value.get("path", [])
    if kind is None or not isinstance(names, list):
        raise BadRequest("a securable's kind is tenant, catalog, namespace, table or view")
    if catalog is None:
        if kind is not Level.TENANT or names:
            raise BadRequest(
                "a principal role holds privileges on its tenant only; grant privileges on a"
                " catalog or what it holds to a catalog role"
            )
        return kind, ()
    if kind is Level.TENANT:
        raise BadRequest("a catalog role holds privileges inside its catalog, not on the tenant")
    if kind is Level.CATALOG:
        if names:
            raise BadRequest("a catalog securable has an empty path")
        return kind, (catalog,)
    if kind is Level.NAMESPACE:
        return kind, (catalog, *check_namespace(names))
    if len(names) < 2:
        raise BadRequest(f"a {kind.value} path needs a namespace and a name")
    levels = check_namespace(names[:-1])
    return kind, (catalog, *levels, leaf(kind, check_name(kind.value, names[-1])))


def user_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """A role's properties as its creator gave them (without the reserved ones)."""
    return {k: v for k, v in properties.items() if not k.startswith(RESERVED_PROPERTY)}


def check_user_properties(properties: Mapping[str, str]) -> dict[str, str]:
    reserved = sorted(k for k in properties if k.startswith(RESERVED_PROPERTY))
    if reserved:
        raise BadRequest(f"properties starting with {RESERVED_PROPERTY!r} are reserved: {reserved}")
    return dict(properties)


# --- the records as (key, properties), as the grants API writes them -----------------


Record = tuple[EntityKey, dict[str, str]]


def member_record(role: str, role_id: str, principal: str, principal_id: str) -> Record:
    return member_key(role, principal), {ROLE_ID: role_id, PRINCIPAL_ID: principal_id}


def catalog_role_record(
    catalog: str, role: str, catalog_id: int, properties: Mapping[str, str]
) -> Record:
    return catalog_role_key(catalog, role), {**properties, CATALOG_ID: str(catalog_id)}


def role_grant_record(
    principal_role: str, role_id: str, catalog: str, catalog_role: str, catalog_role_id: str
) -> Record:
    key = role_grant_key(principal_role, catalog, catalog_role)
    return key, {ROLE_ID: role_id, CATALOG_ROLE_ID: catalog_role_id}


def grant_record(grant: Grant, grantee_id: str) -> Record:
    return grant.key, {**grant.properties(), ROLE_ID: grantee_id}
