"""The privilege table: implications, where each privilege may be granted."""

from __future__ import annotations

import pytest

from metastore.engine.location_index import MAY_READ_PRIVILEGE
from metastore.security.privileges import IMPLIES, Level, Privilege, expand, implied

P = Privilege


def test_write_data_implies_reading_and_writing_properties() -> None:
    assert implied(P.TABLE_WRITE_DATA) >= {
        P.TABLE_READ_DATA,
        P.TABLE_READ_PROPERTIES,
        P.TABLE_WRITE_PROPERTIES,
        P.TABLE_LIST,
    }
    assert P.TABLE_WRITE_DATA not in implied(P.TABLE_READ_DATA)
    assert P.TABLE_DROP not in implied(P.TABLE_WRITE_DATA)


def test_manage_content_is_every_content_privilege_but_not_access_or_reset() -> None:
    content = implied(P.CATALOG_MANAGE_CONTENT)
    for privilege in Privilege:
        if privilege.level in (Level.NAMESPACE, Level.TABLE, Level.VIEW):
            assert privilege in content, privilege
    assert P.CATALOG_READ_PROPERTIES in content and P.CATALOG_READ_HISTORY in content
    assert P.CATALOG_MANAGE_ACCESS not in content
    assert P.CATALOG_RESET_REF not in content
    assert P.CATALOG_DROP not in content


def test_implication_is_transitive_and_never_reaches_a_service_privilege() -> None:
    assert P.TABLE_LIST in implied(P.TABLE_WRITE_DATA)  # WRITE_DATA > READ_DATA > ... > LIST
    everything = expand(Privilege)
    assert everything == frozenset(Privilege)
    for privilege, implied_ones in IMPLIES.items():
        assert privilege.grantable
        assert all(p.grantable for p in implied_ones), privilege


@pytest.mark.parametrize(
    ("privilege", "kind", "grantable"),
    [
        (P.TABLE_READ_DATA, Level.TABLE, True),
        (P.TABLE_READ_DATA, Level.NAMESPACE, True),
        (P.TABLE_READ_DATA, Level.CATALOG, True),
        (P.TABLE_READ_DATA, Level.TENANT, True),
        (P.TABLE_READ_DATA, Level.VIEW, False),
        (P.VIEW_READ, Level.TABLE, False),
        (P.TABLE_CREATE, Level.TABLE, False),  # created in a namespace
        (P.TABLE_CREATE, Level.NAMESPACE, True),
        (P.NAMESPACE_CREATE, Level.CATALOG, True),
        (P.CATALOG_DROP, Level.NAMESPACE, False),
        (P.CATALOG_CREATE, Level.CATALOG, False),
        (P.PRINCIPAL_CREATE, Level.TENANT, True),
        (P.TENANT_CREATE, Level.TENANT, False),  # service admins only
        (P.TENANT_DROP, Level.SERVICE, False),
    ],
)
def test_grantable_on(privilege: Privilege, kind: Level, grantable: bool) -> None:
    assert privilege.grantable_on(kind) is grantable


def test_names_round_trip() -> None:
    for privilege in Privilege:
        assert Privilege.named(privilege.name) is privilege
    with pytest.raises(KeyError):
        Privilege.named("TABLE_EAT")


def test_the_location_index_names_the_privilege_its_check_asks_about() -> None:
    """The engine names it without importing the security layer above it."""
    assert Privilege[MAY_READ_PRIVILEGE] is Privilege.TABLE_READ_DATA
