"""What each roles-and-grants operation writes, worked out from a policy as read
(``metastore.security.policy_changes``): plain policies in, plain changes out."""

from __future__ import annotations

from itertools import count

from metastore.model.changes import CreateEntity, DeleteEntity, UpdateEntity
from metastore.model.keys import Kind
from metastore.model.records import Entity
from metastore.model.requirements import AssertEntityId, AssertVersion
from metastore.security import policy_changes as changes
from metastore.security.grants import (
    PRINCIPAL,
    TENANT_ADMIN,
    Grant,
    Grantee,
    Record,
    catalog_role_record,
    grant_record,
    member_record,
    principal_role_key,
    role_grant_record,
    system_key,
)
from metastore.security.policy import Policy
from metastore.security.privileges import Level, Privilege

_ids = count(1000)


def record(key_and_props: Record, version: int = 1) -> Entity:
    key, properties = key_and_props
    return Entity(next(_ids), Kind.SYSTEM, key.path, properties, None, version, 0, 0)


def named(name: str, properties: dict[str, str] | None = None) -> Entity:
    return record((system_key(name), properties or {}))


def role(name: str) -> Entity:
    return record((principal_role_key(name), {}))


def test_a_principal_role_is_deleted_with_every_link_to_it() -> None:
    eng, ops = role("eng"), role("ops")
    ana = named(PRINCIPAL + "ana")
    grant = Grant(Grantee("eng"), Privilege.named("CATALOG_LIST"), Level.TENANT, ())
    other = Grant(Grantee("ops"), Privilege.named("CATALOG_LIST"), Level.TENANT, ())
    policy = Policy(
        7,
        [
            eng,
            ops,
            ana,
            record(member_record("eng", str(eng.entity_id), "ana", str(ana.entity_id))),
            record(member_record("ops", str(ops.entity_id), "ana", str(ana.entity_id))),
            record(role_grant_record("eng", str(eng.entity_id), "c1", "readers", "1")),
            record(grant_record(grant, str(eng.entity_id))),
            record(grant_record(other, str(ops.entity_id))),
        ],
    )
    change = changes.delete_principal_role(policy, "eng", eng)
    deleted = {c.key for c in change.changes if isinstance(c, DeleteEntity)}
    assert len(deleted) == len(change.changes)
    assert deleted == {
        principal_role_key("eng"),
        changes.member_key("eng", "ana"),
        changes.role_grant_key("eng", "c1", "readers"),
        grant.key,
    }
    assert change.requirements == (AssertEntityId(principal_role_key("eng"), eng.entity_id),)
    assert change.operation == "delete principal role"


def test_a_membership_is_written_once_and_names_the_ids_it_links() -> None:
    eng, ana = role("eng"), named(PRINCIPAL + "ana")
    empty = Policy(1, [eng, ana])
    change = changes.add_member(empty, "eng", eng, "ana", ana)
    assert change is not None
    (create,) = change.changes
    assert isinstance(create, CreateEntity)
    assert create.properties == {"role-id": str(eng.entity_id), "principal-id": str(ana.entity_id)}
    assert set(change.requirements) == {
        AssertEntityId(eng.key, eng.entity_id),
        AssertEntityId(ana.key, ana.entity_id),
    }

    held = Policy(2, [eng, ana, record((create.key, dict(create.properties)))])
    assert changes.add_member(held, "eng", eng, "ana", ana) is None  # nothing to write


def test_a_stale_membership_is_updated_only_if_still_the_one_read() -> None:
    eng, ana = role("eng"), named(PRINCIPAL + "ana")
    stale = record(member_record("eng", "1", "ana", "2"), version=3)  # of an older eng
    change = changes.add_member(Policy(1, [eng, ana, stale]), "eng", eng, "ana", ana)
    assert change is not None
    (update,) = change.changes
    assert isinstance(update, UpdateEntity)
    assert AssertVersion(stale.key, 3) in change.requirements


def test_the_built_in_tenant_admin_role_has_no_record_to_require() -> None:
    ana = named(PRINCIPAL + "ana")
    change = changes.add_member(Policy(1, [ana]), TENANT_ADMIN, None, "ana", ana)
    assert change is not None
    assert change.requirements == (AssertEntityId(ana.key, ana.entity_id),)


def test_a_catalog_role_over_a_stale_one_replaces_it_and_its_links() -> None:
    stale = record(catalog_role_record("c1", "readers", 5, {"a": "1"}), version=2)
    eng = role("eng")
    grant = Grant(
        Grantee("readers", "c1"), Privilege.named("TABLE_READ_DATA"), Level.CATALOG, ("c1",)
    )
    policy = Policy(
        1,
        [
            stale,
            eng,
            record(role_grant_record("eng", str(eng.entity_id), "c1", "readers", "x")),
            record(grant_record(grant, str(stale.entity_id))),
        ],
    )
    change = changes.create_catalog_role(policy, "c1", "readers", 9, {"b": "2"})
    update, *links = change.changes
    assert isinstance(update, UpdateEntity) and update.removals == ("a",)
    assert update.updates == {"b": "2", "metastore.catalog-id": "9"}
    assert {c.key for c in links} == {changes.role_grant_key("eng", "c1", "readers"), grant.key}
    assert change.requirements == (AssertVersion(stale.key, 2),)

    fresh = changes.create_catalog_role(Policy(1, []), "c1", "readers", 9, {})
    assert [type(c) for c in fresh.changes] == [CreateEntity] and fresh.requirements == ()
