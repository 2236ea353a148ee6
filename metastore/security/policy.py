"""One tenant's access policy as an immutable snapshot, cached by its commit.

The records of ``metastore.security.grants`` live in the tenant's system catalog, so
the policy as of one commit of that catalog never changes: ``Policy.build`` reads it
once (a few prefix scans of that commit's index) and ``Policies`` keeps the latest
snapshot per tenant, keyed by the HEAD it was read at. A check reads the tenant's
ref (refs are never cached, so a grant or revoke applies from the first request
after its commit reached this node's store) and, while HEAD stays put, costs a few
dict lookups: ``Policy.access`` resolves a principal's roles to the privileges it
holds on each path once per snapshot and remembers the answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from metastore.catalog.service import Metastore
from metastore.errors import NotFound
from metastore.model.keys import SYSTEM_CATALOG, Kind, kind_prefix
from metastore.model.records import Entity
from metastore.security.grants import (
    CATALOG_ID,
    CATALOG_ROLE,
    CATALOG_ROLE_ID,
    GRANT,
    MEMBER,
    PRINCIPAL,
    PRINCIPAL_ID,
    PRINCIPAL_ROLE,
    ROLE_GRANT,
    ROLE_ID,
    TENANT_ADMIN,
    Grant,
    Grantee,
)
from metastore.security.principal import Principal
from metastore.security.privileges import ALL, Level, Privilege, expand
from metastore.security.securables import Path, is_leaf, leaf_of
from metastore.util.memory_only import check as may_wait

_SYSTEM = kind_prefix((), Kind.SYSTEM)
_MAX_REMEMBERED = 10_000  # principals per snapshot, tenants per cache, before starting over
LIST_PRIVILEGE = {
    Level.CATALOG: Privilege.CATALOG_LIST,
    Level.NAMESPACE: Privilege.NAMESPACE_LIST,
    Level.TABLE: Privilege.TABLE_LIST,
    Level.VIEW: Privilege.VIEW_LIST,
}
CatalogIds = Callable[[str], int | None]  # catalog name -> id of its record now (None: absent)


@dataclass(frozen=True, slots=True)
class Visibility:
    """Which items of one listing a principal may see: all, or these names (with the
    ids a name must have, when the listing is of catalogs)."""

    all: bool
    names: Mapping[str, frozenset[int] | None] = field(default_factory=dict)

    def shows(self, name: str, entity_id: int | None = None) -> bool:
        if self.all:
            return True
        ids = self.names.get(name, frozenset())
        return ids is None or entity_id in ids


EVERYTHING = Visibility(True)


@dataclass(frozen=True, slots=True)
class PathGrants:
    """Privileges held in one catalog (one incarnation of it), by securable path."""

    held: Mapping[Path, frozenset[Privilege]]

    def holds(self, privilege: Privilege, path: Path) -> bool:
        for end in range(len(path), 0, -1):
            privileges = self.held.get(path[:end])
            if privileges is not None and privilege in privileges:
                return True
        return False


@dataclass(frozen=True, slots=True)
class Access:
    """What one principal may do in its tenant, as of one policy snapshot."""

    admin: bool  # holds tenant_admin: every privilege in the tenant
    tenant: frozenset[Privilege]  # held on the tenant itself, so everywhere in it
    catalogs: Mapping[str, Mapping[int, PathGrants]]  # catalog -> catalog id -> grants

    @property
    def anything(self) -> bool:
        return self.admin or bool(self.tenant) or bool(self.catalogs)

    def allows(self, privilege: Privilege, path: Path, catalog_id: CatalogIds) -> bool:
        if self.admin or privilege in self.tenant:
            return True
        grants = self._grants(path, catalog_id)
        return grants is not None and grants.holds(privilege, path)

    def _grants(self, path: Path, catalog_id: CatalogIds) -> PathGrants | None:
        if not path:
            return None
        incarnations = self.catalogs.get(path[0])
        if not incarnations:
            return None
        current = catalog_id(path[0])
        return None if current is None else incarnations.get(current)

    def browse(self, parent: Path, kind: Level, catalog_id: CatalogIds) -> Visibility | None:
        """The ``kind`` children of ``parent`` this principal may see, or None when it
        holds nothing at, above or below ``parent`` (then it may not list it at all).

        Holding the kind's LIST privilege on ``parent`` (or above) shows every child;
        else a child shows iff the principal holds some privilege on it or below it.
        """
        if self.allows(LIST_PRIVILEGE[kind], parent, catalog_id):
            return EVERYTHING
        if kind is Level.CATALOG:
            return self._catalogs()
        grants = self._grants(parent, catalog_id)
        if grants is None:
            return None
        names: dict[str, frozenset[int] | None] = {}
        related = False
        depth = len(parent)
        for path in grants.held:
            if path[:depth] == parent:
                related = True
                if len(path) > depth:
                    name = _child(path[depth], kind, last=len(path) == depth + 1)
                    if name is not None:
                        names[name] = None
            elif parent[: len(path)] == path:
                related = True  # granted above the parent (something else than listing)
        return Visibility(False, names) if related else None

    def _catalogs(self) -> Visibility:
        names = {name: frozenset(ids) for name, ids in self.catalogs.items()}
        return Visibility(False, names)


def _child(element: str, kind: Level, *, last: bool) -> str | None:
    if kind is Level.NAMESPACE:
        return None if is_leaf(element) else element
    return leaf_of(element, kind) if last else None


ADMIN_ACCESS = Access(True, ALL, MappingProxyType({}))
NO_ACCESS = Access(False, frozenset(), MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class CatalogRole:
    catalog: str
    name: str
    catalog_id: int  # the catalog record it was created for
    entity: Entity

    @classmethod
    def of(cls, name: str, entity: Entity) -> CatalogRole | None:
        catalog, _, role = name.removeprefix(CATALOG_ROLE).partition(":")
        try:
            return cls(catalog, role, int(entity.properties[CATALOG_ID]), entity)
        except (KeyError, ValueError):
            return None


class Policy:
    """One tenant's principal roles, catalog roles and grants as of one commit.

    Every relation record names the ids of the records it links (``grants``); one
    whose ids no longer match (a role or principal deleted, maybe created again) is
    kept in ``records`` for cleanup but holds nothing.
    """

    def __init__(self, head: int | None, entities: Iterable[Entity]) -> None:
        self.head = head
        self.records: dict[str, Entity] = {}  # every policy record by name (not principals)
        self.principal_roles: dict[str, Entity] = {}
        self.catalog_roles: dict[tuple[str, str], CatalogRole] = {}
        self.principal_ids: dict[str, str] = {}  # principal name -> its record's id
        for entity in entities:
            name = entity.path[-1]
            if name.startswith(PRINCIPAL):
                self.principal_ids[name.removeprefix(PRINCIPAL)] = str(entity.entity_id)
                continue
            self.records[name] = entity
            if name.startswith(PRINCIPAL_ROLE):
                self.principal_roles[name.removeprefix(PRINCIPAL_ROLE)] = entity
            elif name.startswith(CATALOG_ROLE):
                role = CatalogRole.of(name, entity)
                if role is not None:
                    self.catalog_roles[(role.catalog, role.name)] = role
        self.members: dict[str, set[str]] = {}  # principal role -> principals (valid links)
        self.role_grants: dict[str, set[tuple[str, str]]] = {}  # principal role -> catalog roles
        self.grants: dict[Grantee, list[Grant]] = {}
        for name, entity in self.records.items():
            self._link(name, entity.properties)
        self._access: dict[tuple[str, frozenset[str]], Access] = {}

    def role_id(self, role: str) -> str | None:
        """The id a link to principal role ``role`` must name (None: no such role)."""
        if role == TENANT_ADMIN:
            return ""
        entity = self.principal_roles.get(role)
        return None if entity is None else str(entity.entity_id)

    def _catalog_role_id(self, catalog: str, role: str) -> str | None:
        found = self.catalog_roles.get((catalog, role))
        return None if found is None else str(found.entity.entity_id)

    def _link(self, name: str, properties: Mapping[str, str]) -> None:
        role_id = properties.get(ROLE_ID)
        if name.startswith(MEMBER):
            role, _, principal = name.removeprefix(MEMBER).partition(":")
            bound = properties.get(PRINCIPAL_ID)
            if role_id == self.role_id(role) and bound == self.principal_ids.get(principal):
                self.members.setdefault(role, set()).add(principal)
        elif name.startswith(ROLE_GRANT):
            role, _, target = name.removeprefix(ROLE_GRANT).partition(":")
            catalog, _, catalog_role = target.partition(":")
            if role_id == self.role_id(role) and properties.get(
                CATALOG_ROLE_ID
            ) == self._catalog_role_id(catalog, catalog_role):
                self.role_grants.setdefault(role, set()).add((catalog, catalog_role))
        elif name.startswith(GRANT):
            grant = Grant.of(name, properties)
            if grant is None:
                return
            grantee = grant.grantee
            if grantee.catalog is None:
                expected = self.role_id(grantee.role)
            else:
                expected = self._catalog_role_id(grantee.catalog, grantee.role)
            if role_id == expected and grantee.role != TENANT_ADMIN:
                self.grants.setdefault(grantee, []).append(grant)

    @classmethod
    def build(cls, metastore: Metastore, tenant: str, head: int) -> Policy:
        """Read the policy at commit ``head`` of the tenant's system catalog."""
        return cls(head, _records(metastore, tenant, head))

    # --- who holds what -----------------------------------------------------------------

    def is_member(self, role: str, principal: str) -> bool:
        return principal in self.members.get(role, ())

    def roles_of(self, principal: Principal) -> frozenset[str]:
        """The principal roles a principal holds: its valid memberships, plus the roles
        its external identity provider asserts that exist here."""
        held = {role for role, members in self.members.items() if principal.name in members}
        held |= {r for r in principal.roles if r in self.principal_roles or r == TENANT_ADMIN}
        return frozenset(held)

    def access(self, principal: Principal) -> Access:
        """What ``principal`` (of this tenant) may do; computed once per snapshot."""
        memo = (principal.name, principal.roles)
        found = self._access.get(memo)
        if found is None:
            if len(self._access) >= _MAX_REMEMBERED:
                self._access.clear()
            found = self._access[memo] = self._resolve(self.roles_of(principal))
        return found

    def _resolve(self, roles: frozenset[str]) -> Access:
        if TENANT_ADMIN in roles:
            return ADMIN_ACCESS
        tenant: list[Privilege] = []
        held: dict[str, dict[int, dict[Path, set[Privilege]]]] = {}
        for role in roles:
            tenant += (g.privilege for g in self.grants.get(Grantee(role), ()))
            for catalog, name in self.role_grants.get(role, ()):
                catalog_role = self.catalog_roles.get((catalog, name))
                if catalog_role is None:
                    continue
                paths = held.setdefault(catalog, {}).setdefault(catalog_role.catalog_id, {})
                for grant in self.grants.get(Grantee(name, catalog), ()):
                    paths.setdefault(grant.path, set()).add(grant.privilege)
        catalogs = {
            catalog: MappingProxyType(
                {
                    catalog_id: PathGrants(
                        MappingProxyType({p: expand(privs) for p, privs in paths.items()})
                    )
                    for catalog_id, paths in incarnations.items()
                    if paths
                }
            )
            for catalog, incarnations in held.items()
        }
        catalogs = {catalog: ids for catalog, ids in catalogs.items() if ids}
        if not tenant and not catalogs:
            return NO_ACCESS
        return Access(False, expand(tenant), MappingProxyType(catalogs))

    # --- reading the policy back (the grants API) ---------------------------------------

    def catalog_roles_of(self, catalog: str, catalog_id: int) -> list[CatalogRole]:
        """The live catalog roles of a catalog (those written for its current record)."""
        live = (
            role
            for (name, _), role in self.catalog_roles.items()
            if name == catalog and role.catalog_id == catalog_id
        )
        return sorted(live, key=lambda role: role.name)

    def catalog_role(self, catalog: str, name: str, catalog_id: int) -> CatalogRole | None:
        role = self.catalog_roles.get((catalog, name))
        return role if role is not None and role.catalog_id == catalog_id else None

    def members_of(self, role: str) -> list[str]:
        return sorted(self.members.get(role, ()))

    def dependents(self, *prefixes: str) -> list[str]:
        """Names of the records starting with any of ``prefixes`` (valid links or not)."""
        return sorted(name for name in self.records if name.startswith(prefixes))


def _records(metastore: Metastore, tenant: str, head: int) -> Iterator[Entity]:
    objects = metastore.objects(tenant, SYSTEM_CATALOG)
    view = objects.index(objects.commit(head))
    if view is None:
        return
    for prefix in (PRINCIPAL_ROLE, MEMBER, CATALOG_ROLE, ROLE_GRANT, GRANT, PRINCIPAL):
        for _, value in view.items(_SYSTEM + prefix.encode()):
            yield objects.entity(value[1])


class Policies:
    """The latest policy snapshot of each tenant this node has checked."""

    def __init__(self, metastore: Metastore) -> None:
        self._metastore = metastore
        self._latest: dict[str, Policy] = {}

    def head(self, tenant: str) -> int | None:
        """The HEAD of the tenant's system catalog (None: no such tenant)."""
        try:
            return self._metastore.get_ref(tenant, SYSTEM_CATALOG).head
        except NotFound:
            return None

    def get(self, tenant: str) -> Policy:
        """The tenant's policy now (an empty one for a tenant that does not exist)."""
        head = self.head(tenant)
        cached = self._latest.get(tenant)
        if cached is not None and cached.head == head:
            return cached
        may_wait()  # a changed policy: a tenant may hold many records to read and join
        policy = Policy(None, ()) if head is None else Policy.build(self._metastore, tenant, head)
        self._remember(tenant, policy)
        return policy

    async def ready(self, tenant: str) -> Policy:
        """``get`` as a point read: on the event loop while the tenant's HEAD and its
        policy are in memory; a HEAD to read from the database, or a changed policy to
        build, in a worker thread (a tenant may hold many records; the event loop must
        not wait on them)."""
        return await self._metastore.read_point(self.get, tenant)

    def _remember(self, tenant: str, policy: Policy) -> None:
        if len(self._latest) >= _MAX_REMEMBERED and tenant not in self._latest:
            self._latest.clear()
        self._latest[tenant] = policy
