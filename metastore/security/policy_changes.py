"""Changes to a tenant's access policy as data: what each roles-and-grants operation
writes, worked out from the policy as read (``metastore.security.policy``).

Each function returns a ``PolicyChange``: the records (``metastore.security.grants``)
to create, update or delete and the requirements that make the commit fail if the
policy moved in between; ``Metastore.change`` commits it to the tenant's system
catalog (``PolicyChange.commit``). A link record names the ids of what it links, so
every link requires those records to still be the ones read (``AssertEntityId``): a
role deleted and created again meanwhile is another role. Operations that find the
record already as given return None: nothing to write. The functions are pure; the
native API's handlers parse, authorize, read the policy, call one, commit, render.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from metastore.catalog.service import Metastore
from metastore.engine.commits import CommitOutcome
from metastore.engine.commits import Record as CommitRecord
from metastore.model.changes import Change, CreateEntity, DeleteEntity, UpdateEntity
from metastore.model.keys import SYSTEM_CATALOG, EntityKey
from metastore.model.records import Entity
from metastore.model.requirements import AssertEntityId, AssertVersion, Requirement
from metastore.security.grants import (
    GRANT,
    MEMBER,
    ROLE_GRANT,
    Grant,
    Record,
    catalog_role_record,
    grant_record,
    member_record,
    principal_role_key,
    role_grant_record,
    system_key,
)
from metastore.security.policy import CatalogRole, Policy


@dataclass(frozen=True, slots=True)
class PolicyChange:
    requirements: tuple[Requirement, ...]
    changes: tuple[Change, ...]
    operation: str  # as the tenant's history names it

    async def commit(
        self, metastore: Metastore, tenant: str, principal: str, record: CommitRecord | None
    ) -> CommitOutcome:
        """One commit to the tenant's system catalog as ``principal``; ``record``: the
        idempotency record built from the commit's id."""
        return await metastore.change(
            tenant,
            SYSTEM_CATALOG,
            self.changes,
            principal,
            self.operation,
            self.requirements,
            record,
        )


def _change(
    requirements: Sequence[Requirement], changes: Sequence[Change], operation: str
) -> PolicyChange:
    return PolicyChange(tuple(requirements), tuple(changes), operation)


def _put(policy: Policy, record: Record) -> tuple[list[Requirement], Change] | None:
    """The change writing a link record: None if it is there already as given; an update
    of a stale one (a link of a deleted role, say) that must still be the one read."""
    key, properties = record
    current = policy.records.get(key.name)
    if current is None:
        return [], CreateEntity(key, properties)
    if dict(current.properties) == properties:
        return None
    stale = [k for k in current.properties if k not in properties]
    return [AssertVersion(key, current.version)], UpdateEntity(key, properties, tuple(stale))


def _deletions(policy: Policy, *prefixes: str) -> list[Change]:
    return [DeleteEntity(system_key(name)) for name in policy.dependents(*prefixes)]


def entity_id(entity: Entity | None) -> str:
    """The id a link names: "" for the built-in ``tenant_admin`` (no record)."""
    return "" if entity is None else str(entity.entity_id)


def _same(key: EntityKey, entity: Entity | None) -> list[Requirement]:
    """The linked record is still the one read (not deleted, maybe re-created, since)."""
    return [] if entity is None else [AssertEntityId(key, entity.entity_id)]


def _delete(key: EntityKey, operation: str) -> PolicyChange:
    return _change((), (DeleteEntity(key),), operation)


# --- principal roles and their members ------------------------------------------------------


def create_principal_role(name: str, properties: dict[str, str]) -> PolicyChange:
    change = CreateEntity(principal_role_key(name), properties)
    return _change((), (change,), "create principal role")


def delete_principal_role(policy: Policy, role: str, entity: Entity) -> PolicyChange:
    """The role and every link to it: memberships, catalog roles granted, grants."""
    key = principal_role_key(role)
    changes = [
        DeleteEntity(key),
        *_deletions(policy, f"{MEMBER}{role}:", f"{ROLE_GRANT}{role}:", f"{GRANT}p:{role}:"),
    ]
    return _change(_same(key, entity), changes, "delete principal role")


def add_member(
    policy: Policy, role: str, role_entity: Entity | None, name: str, principal: Entity
) -> PolicyChange | None:
    """Principal ``name`` holds ``role`` (``role_entity`` None: ``tenant_admin``)."""
    put = _put(policy, member_record(role, entity_id(role_entity), name, entity_id(principal)))
    if put is None:
        return None
    requirements, change = put
    requirements += _same(principal_role_key(role), role_entity) + _same(principal.key, principal)
    return _change(requirements, (change,), "give principal role")


def member_key(role: str, name: str) -> EntityKey:
    key, _ = member_record(role, "", name, "")
    return key


def remove_member(role: str, name: str) -> PolicyChange:
    return _delete(member_key(role, name), "take principal role")


# --- catalog roles granted to principal roles -------------------------------------------------


def grant_catalog_role(
    policy: Policy, role: str, role_entity: Entity, target: CatalogRole
) -> PolicyChange | None:
    record = role_grant_record(
        role, entity_id(role_entity), target.catalog, target.name, entity_id(target.entity)
    )
    put = _put(policy, record)
    if put is None:
        return None
    requirements, change = put
    requirements += _same(principal_role_key(role), role_entity)
    requirements += _same(target.entity.key, target.entity)
    return _change(requirements, (change,), "grant catalog role")


def role_grant_key(role: str, catalog: str, name: str) -> EntityKey:
    key, _ = role_grant_record(role, "", catalog, name, "")
    return key


def revoke_catalog_role(role: str, catalog: str, name: str) -> PolicyChange:
    return _delete(role_grant_key(role, catalog, name), "revoke catalog role")


# --- privileges -------------------------------------------------------------------------------


def grant(policy: Policy, grant: Grant, grantee: Entity) -> PolicyChange | None:
    put = _put(policy, grant_record(grant, str(grantee.entity_id)))
    if put is None:
        return None
    requirements, change = put
    requirements += _same(grantee.key, grantee)
    return _change(requirements, (change,), f"grant {grant.privilege.name}")


def revoke(grant: Grant) -> PolicyChange:
    return _delete(grant.key, f"revoke {grant.privilege.name}")


# --- catalog roles ----------------------------------------------------------------------------


def create_catalog_role(
    policy: Policy, catalog: str, name: str, catalog_id: int, properties: dict[str, str]
) -> PolicyChange:
    """A catalog role of the catalog as it is now: a role of an earlier catalog of the
    same name (deleted since) is replaced, with every link to it."""
    key, props = catalog_role_record(catalog, name, catalog_id, properties)
    stale = policy.records.get(key.name)
    if stale is None:
        return _change((), (CreateEntity(key, props),), "create catalog role")
    removed = tuple(k for k in stale.properties if k not in props)
    changes = [UpdateEntity(key, props, removed), *_catalog_role_links(policy, catalog, name)]
    return _change([AssertVersion(key, stale.version)], changes, "create catalog role")


def delete_catalog_role(policy: Policy, role: CatalogRole) -> PolicyChange:
    key = role.entity.key
    changes = [DeleteEntity(key), *_catalog_role_links(policy, role.catalog, role.name)]
    return _change(_same(key, role.entity), changes, "delete catalog role")


def _catalog_role_links(policy: Policy, catalog: str, name: str) -> list[Change]:
    """Deletions of what links to catalog role ``name``: its grants, its role grants."""
    suffix = f":{catalog}:{name}"
    role_grants = [
        DeleteEntity(system_key(n))
        for n in policy.dependents(ROLE_GRANT)
        if n.endswith(suffix) and n.count(":") == 3
    ]
    return [*role_grants, *_deletions(policy, f"{GRANT}c:{catalog}:{name}:")]
