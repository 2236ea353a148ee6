"""The authorizer on the real engine (memory backend): roles, grants, inheritance, the
ids records bind to, visibility in listings, and the snapshot cache."""

from __future__ import annotations

import pytest

from metastore.catalog.service import Metastore
from metastore.engine.commits import CommitRequest
from metastore.errors import Forbidden
from metastore.model.changes import CreateEntity, DeleteEntity
from metastore.model.keys import SYSTEM_CATALOG, EntityKey, Kind
from metastore.security.authorizer import Authorizer
from metastore.security.grants import (
    PRINCIPAL,
    TENANT_ADMIN,
    Grant,
    Grantee,
    catalog_role_record,
    grant_record,
    member_record,
    principal_role_key,
    role_grant_record,
    system_key,
)
from metastore.security.principal import Principal
from metastore.security.privileges import Level, Privilege
from metastore.security.securables import Path, Securable, leaf

P = Privilege
T = "t1"
ANA = Principal(T, "ana", "service")


def table(*path: str, catalog: str = "c1", tenant: str = T) -> Securable:
    key = EntityKey(Kind.TABLE, tuple(path[:-1]), path[-1])
    return Securable.of_entity(tenant, catalog, key)


def namespace(*levels: str, catalog: str = "c1") -> Securable:
    return Securable.of_namespace(T, catalog, levels)


async def put(metastore: Metastore, *changes: CreateEntity | DeleteEntity, tenant: str = T) -> None:
    request = CommitRequest(changes=changes, principal="test", operation="test")
    await metastore.commit(tenant, SYSTEM_CATALOG, request)


def entity_id(metastore: Metastore, name: str, tenant: str = T) -> str:
    return str(metastore.get_entity(tenant, SYSTEM_CATALOG, system_key(name)).entity_id)


class Setup:
    """Tenant t1 with catalogs c1 and c2, principal ana, principal role eng."""

    def __init__(self, metastore: Metastore) -> None:
        self.metastore = metastore
        self.admins: set[str] = set()
        self.authorizer = Authorizer(metastore, lambda p: p.id in self.admins)

    async def start(self) -> Setup:
        await self.metastore.create_tenant(T, {}, "test")
        await self.metastore.create_tenant("t2", {}, "test")
        for catalog in ("c1", "c2"):
            await self.metastore.create_catalog(T, catalog, {}, "test")
        await self.principal("ana")
        await put(self.metastore, CreateEntity(principal_role_key("eng")))
        await self.member("eng", "ana")
        return self

    async def principal(self, name: str) -> None:
        await put(self.metastore, CreateEntity(system_key(PRINCIPAL + name), {"type": "service"}))

    async def member(self, role: str, principal: str) -> None:
        role_id = (
            "" if role == TENANT_ADMIN else entity_id(self.metastore, f"principal-role:{role}")
        )
        principal_id = entity_id(self.metastore, PRINCIPAL + principal)
        key, props = member_record(role, role_id, principal, principal_id)
        await put(self.metastore, CreateEntity(key, props))

    async def catalog_role(self, catalog: str, role: str, *grants: tuple[P, Level, Path]) -> None:
        catalog_id = self.metastore.get_catalog(T, catalog).entity_id
        key, props = catalog_role_record(catalog, role, catalog_id, {})
        await put(self.metastore, CreateEntity(key, props))
        role_id = entity_id(self.metastore, f"catalog-role:{catalog}:{role}")
        for privilege, kind, path in grants:
            grant = Grant(Grantee(role, catalog), privilege, kind, (catalog, *path))
            key, props = grant_record(grant, role_id)
            await put(self.metastore, CreateEntity(key, props))
        key, props = role_grant_record(
            "eng", entity_id(self.metastore, "principal-role:eng"), catalog, role, role_id
        )
        await put(self.metastore, CreateEntity(key, props))

    def allows(self, privilege: P, securable: Securable, who: Principal = ANA) -> bool:
        return self.authorizer.allows(who, privilege, securable)


@pytest.fixture
async def setup(service: Metastore) -> Setup:
    return await Setup(service).start()


async def test_no_grant_no_privilege(setup: Setup) -> None:
    assert not setup.allows(P.TABLE_READ_DATA, table("sales", "orders"))
    with pytest.raises(Forbidden, match=r"TABLE_READ_DATA on table c1\.sales\.orders"):
        setup.authorizer.require(ANA, P.TABLE_READ_DATA, table("sales", "orders"))


async def test_a_namespace_grant_holds_below_it_and_implies_weaker_privileges(
    setup: Setup,
) -> None:
    await setup.catalog_role("c1", "readers", (P.TABLE_READ_DATA, Level.NAMESPACE, ("sales",)))
    assert setup.allows(P.TABLE_READ_DATA, table("sales", "orders"))
    assert setup.allows(P.TABLE_READ_DATA, table("sales", "eu", "orders"))  # child namespace
    assert setup.allows(P.TABLE_READ_PROPERTIES, table("sales", "orders"))  # implied
    assert setup.allows(P.TABLE_LIST, namespace("sales"))  # implied, on the namespace itself
    assert not setup.allows(P.TABLE_WRITE_DATA, table("sales", "orders"))
    assert not setup.allows(P.TABLE_READ_DATA, table("hr", "salaries"))
    assert not setup.allows(P.TABLE_READ_DATA, table("sales", "orders", catalog="c2"))
    assert not setup.allows(P.NAMESPACE_READ_PROPERTIES, namespace("sales"))
    assert not setup.allows(P.TABLE_READ_DATA, table("sales", "orders", tenant="t2"))
    # a view of the same name is another securable
    view = Securable.of_entity(T, "c1", EntityKey(Kind.VIEW, ("sales",), "orders"))
    assert not setup.allows(P.VIEW_READ, view)


async def test_a_table_grant_holds_on_that_table_only(setup: Setup) -> None:
    await setup.catalog_role(
        "c1", "one", (P.TABLE_WRITE_DATA, Level.TABLE, ("s", leaf(Level.TABLE, "t")))
    )
    assert setup.allows(P.TABLE_WRITE_DATA, table("s", "t"))
    assert not setup.allows(P.TABLE_WRITE_DATA, table("s", "u"))
    assert not setup.allows(P.TABLE_CREATE, namespace("s"))
    # a namespace named like the table is not under it
    assert not setup.allows(P.NAMESPACE_READ_PROPERTIES, namespace("s", "t"))


async def test_a_revoke_applies_from_the_next_check(setup: Setup) -> None:
    await setup.catalog_role("c1", "readers", (P.TABLE_READ_DATA, Level.CATALOG, ()))
    assert setup.allows(P.TABLE_READ_DATA, table("a", "b"))
    grant = Grant(Grantee("readers", "c1"), P.TABLE_READ_DATA, Level.CATALOG, ("c1",))
    await put(setup.metastore, DeleteEntity(grant.key))
    assert not setup.allows(P.TABLE_READ_DATA, table("a", "b"))


async def test_the_policy_is_read_once_per_commit(setup: Setup) -> None:
    policies = setup.authorizer.policies
    first = policies.get(T)
    assert policies.get(T) is first
    await setup.principal("bo")
    assert policies.get(T) is not first


async def test_a_principal_created_again_does_not_inherit_the_old_memberships(
    setup: Setup,
) -> None:
    await setup.catalog_role("c1", "readers", (P.TABLE_READ_DATA, Level.CATALOG, ()))
    assert setup.allows(P.TABLE_READ_DATA, table("a", "b"))
    await put(setup.metastore, DeleteEntity(system_key(PRINCIPAL + "ana")))
    await setup.principal("ana")
    assert not setup.allows(P.TABLE_READ_DATA, table("a", "b"))


async def test_a_role_created_again_does_not_inherit_the_old_links(setup: Setup) -> None:
    await setup.catalog_role("c1", "readers", (P.TABLE_READ_DATA, Level.CATALOG, ()))
    await put(setup.metastore, DeleteEntity(principal_role_key("eng")))
    await put(setup.metastore, CreateEntity(principal_role_key("eng")))
    assert not setup.allows(P.TABLE_READ_DATA, table("a", "b"))


async def test_a_catalog_created_again_does_not_inherit_its_catalog_roles(setup: Setup) -> None:
    await setup.metastore.create_catalog(T, "c3", {}, "test")
    await setup.catalog_role("c3", "readers", (P.TABLE_READ_DATA, Level.CATALOG, ()))
    assert setup.allows(P.TABLE_READ_DATA, table("a", "b", catalog="c3"))
    await setup.metastore.delete_catalog(T, "c3", "test")
    assert not setup.allows(P.TABLE_READ_DATA, table("a", "b", catalog="c3"))
    await setup.metastore.create_catalog(T, "c3", {}, "test")
    assert not setup.allows(P.TABLE_READ_DATA, table("a", "b", catalog="c3"))


async def test_the_catalog_id_is_remembered_across_many_commits(setup: Setup) -> None:
    await setup.catalog_role("c1", "readers", (P.TABLE_READ_DATA, Level.CATALOG, ()))
    for i in range(60):  # far past the ref's window of recent HEADs, checked every 7
        request = CommitRequest(changes=(CreateEntity(EntityKey(Kind.NAMESPACE, (), f"n{i}")),))
        await setup.metastore.commit(T, "c1", request)
        if i % 7 == 0:
            assert setup.allows(P.TABLE_READ_DATA, table("a", "b"))
    assert setup.allows(P.TABLE_READ_DATA, table("a", "b"))


async def test_tenant_level_grants_hold_in_every_catalog(setup: Setup) -> None:
    role_id = entity_id(setup.metastore, "principal-role:eng")
    grant = Grant(Grantee("eng"), P.CATALOG_MANAGE_CONTENT, Level.TENANT, ())
    key, props = grant_record(grant, role_id)
    await put(setup.metastore, CreateEntity(key, props))
    for catalog in ("c1", "c2", "not-yet-created"):
        assert setup.allows(P.TABLE_DROP, table("x", "y", catalog=catalog))
    assert setup.allows(P.CATALOG_LIST, Securable.of_tenant(T))  # implied on the tenant
    assert not setup.allows(P.CATALOG_DROP, Securable.of_catalog(T, "c1"))
    assert not setup.allows(P.PRINCIPAL_CREATE, Securable.of_tenant(T))


async def test_tenant_admin_holds_everything_in_its_tenant_only(setup: Setup) -> None:
    await setup.principal("root")
    await setup.member(TENANT_ADMIN, "root")
    root = Principal(T, "root", "service")
    for privilege in Privilege:
        if privilege.grantable:
            assert setup.allows(privilege, table("a", "b"), root), privilege
    assert not setup.allows(P.TENANT_CREATE, Securable.of_tenant(T), root)
    assert not setup.allows(P.TABLE_READ_DATA, table("a", "b", tenant="t2"), root)


async def test_roles_asserted_by_an_identity_provider(setup: Setup) -> None:
    await setup.catalog_role("c1", "readers", (P.TABLE_READ_DATA, Level.CATALOG, ()))
    user = Principal(T, "eve", "user", frozenset({"eng", "no-such-role"}))
    assert setup.allows(P.TABLE_READ_DATA, table("a", "b"), user)
    outsider = Principal(T, "mallory", "user", frozenset({"no-such-role"}))
    assert not setup.allows(P.TABLE_READ_DATA, table("a", "b"), outsider)


async def test_service_admins_may_do_everything_everywhere(setup: Setup) -> None:
    setup.admins.add("boss@t2")
    boss = Principal("t2", "boss", "service")
    assert setup.allows(P.TENANT_CREATE, Securable.of_tenant(T), boss)
    assert setup.allows(P.TABLE_DROP, table("a", "b"), boss)


async def test_listings_show_what_the_principal_holds_something_on(setup: Setup) -> None:
    await setup.catalog_role(
        "c1",
        "mixed",
        (P.TABLE_READ_DATA, Level.TABLE, ("sales", leaf(Level.TABLE, "orders"))),
        (P.NAMESPACE_READ_PROPERTIES, Level.NAMESPACE, ("hr", "payroll")),
    )
    checker = setup.authorizer.checker(ANA)
    top = checker.browse(Securable.of_catalog(T, "c1"), Level.NAMESPACE)
    assert not top.all and set(top.names) == {"sales", "hr"}
    tables = checker.browse(namespace("sales"), Level.TABLE)
    assert tables.shows("orders") and not tables.shows("customers")
    # NAMESPACE_READ_PROPERTIES on hr.payroll implies NAMESPACE_LIST there: all children
    assert checker.browse(namespace("hr", "payroll"), Level.NAMESPACE).all
    with pytest.raises(Forbidden):
        checker.browse(namespace("finance"), Level.TABLE)
    with pytest.raises(Forbidden):
        checker.browse(Securable.of_catalog(T, "c2"), Level.NAMESPACE)
    catalogs = checker.browse(Securable.of_tenant(T), Level.CATALOG)
    c1 = setup.metastore.get_catalog(T, "c1").entity_id
    assert catalogs.shows("c1", c1) and not catalogs.shows("c2", c1)
