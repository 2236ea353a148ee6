"""Iceberg prefixes and warehouses: one catalog, one prefix, whoever asks."""

from __future__ import annotations

import pytest

from metastore.errors import InvalidName
from metastore.iceberg.prefixes import decode_prefix, decode_warehouse, encode_prefix

DEFAULT = "default"


@pytest.mark.parametrize(
    ("tenant", "catalog", "prefix"),
    [("default", "sales", "sales"), ("acme", "sales", "acme~sales"), ("a.b-c_1", "x", "a.b-c_1~x")],
)
def test_prefixes_round_trip(tenant: str, catalog: str, prefix: str) -> None:
    assert encode_prefix(tenant, catalog, DEFAULT) == prefix
    assert decode_prefix(prefix, DEFAULT) == (tenant, catalog)


def test_the_default_tenant_may_be_spelled_out() -> None:
    assert decode_prefix("default~sales", DEFAULT) == ("default", "sales")


@pytest.mark.parametrize("prefix", ["", "~sales", "acme~", "a~b~c", "bad name", "a/b", "-x"])
def test_malformed_prefixes_are_refused(prefix: str) -> None:
    with pytest.raises(InvalidName):
        decode_prefix(prefix, DEFAULT)


def test_a_bare_warehouse_is_in_the_callers_tenant() -> None:
    assert decode_warehouse("sales", "acme") == ("acme", "sales")
    assert decode_warehouse("beta/sales", "acme") == ("beta", "sales")


@pytest.mark.parametrize("warehouse", ["", "/sales", "acme/", "a/b/c", "acme~sales", "bad name"])
def test_malformed_warehouses_are_refused(warehouse: str) -> None:
    with pytest.raises(InvalidName, match="tenant/catalog"):
        decode_warehouse(warehouse, "acme")


def test_the_catalog_namespaces_never_has_a_bare_prefix() -> None:
    """``/v1/namespaces/...`` is the routes without a prefix (the default catalog's)."""
    assert encode_prefix("default", "namespaces", DEFAULT) == "default~namespaces"
    assert decode_prefix("default~namespaces", DEFAULT) == ("default", "namespaces")
    assert encode_prefix("acme", "namespaces", DEFAULT) == "acme~namespaces"
    with pytest.raises(InvalidName, match="default~namespaces"):
        decode_prefix("namespaces", DEFAULT)
