"""Storage keys and entity index keys: exact bytes, round trips, sort order, prefixes."""

from __future__ import annotations

import random

import pytest

from metastore.model.ids import compose
from metastore.model.keys import (
    SYSTEM_CATALOG,
    EntityKey,
    Kind,
    ObjKey,
    RefKey,
    catalog_prefix,
    children_prefix,
    kind_prefix,
    tenant_prefix,
)

# IDs whose 8 big-endian bytes contain 0x00 (the key separator) in various places.
AWKWARD_IDS = [
    0,
    1,
    0x100,
    0xFF00,
    1 << 56,
    (1 << 56) + 1,
    0x0100000000000001,
    0x7F00FF00FF00FF00,
    compose(1000, 0, 0),
    compose(40_000_000_000, 0, 1),
    2**63 - 1,
]

# --- ObjKey -----------------------------------------------------------------------


def test_obj_key_exact_bytes() -> None:
    key = ObjKey("acme", "prod", "commit", 1)
    assert key.encode() == b"acme\x00prod\x00commit\x00" + b"\x00" * 7 + b"\x01"


@pytest.mark.parametrize("obj_id", AWKWARD_IDS)
@pytest.mark.parametrize(
    ("tenant", "catalog", "obj_type"),
    [
        ("acme", "prod", "commit"),
        ("acme", SYSTEM_CATALOG, "entity"),
        ("t.1", "c-2_x", "node_lease"),
    ],
)
def test_obj_key_round_trip(tenant: str, catalog: str, obj_type: str, obj_id: int) -> None:
    key = ObjKey(tenant, catalog, obj_type, obj_id)
    raw = key.encode()
    assert raw.endswith(obj_id.to_bytes(8, "big"))
    assert len(raw) == len(tenant) + len(catalog) + len(obj_type) + 3 + 8
    decoded = ObjKey.decode(raw)
    assert decoded == key
    assert (decoded.tenant, decoded.catalog, decoded.type, decoded.id) == (
        tenant,
        catalog,
        obj_type,
        obj_id,
    )


def test_obj_key_bytes_sort_like_tuples() -> None:
    rng = random.Random(20250101)
    ids = AWKWARD_IDS + [rng.randrange(2**63) for _ in range(2000)]
    ids += [rng.randrange(2**16) for _ in range(200)]  # many leading zero bytes
    keys = [ObjKey("acme", "prod", "entity", i) for i in ids]
    rng.shuffle(keys)
    by_bytes = sorted(keys, key=ObjKey.encode)
    assert by_bytes == sorted(keys)
    assert [k.id for k in by_bytes] == sorted(ids)


def test_obj_keys_of_a_catalog_share_its_prefix() -> None:
    inside = [ObjKey("acme", "prod", t, i) for t in ("commit", "entity") for i in AWKWARD_IDS]
    outside = [
        ObjKey("acme", "prod2", "commit", 1),
        ObjKey("acme", "pro", "commit", 1),
        ObjKey("acme2", "prod", "commit", 1),
        ObjKey("acm", "eprod", "commit", 1),
    ]
    prefix = catalog_prefix("acme", "prod")
    assert prefix == b"acme\x00prod\x00"
    assert all(k.encode().startswith(prefix) for k in inside)
    assert not any(k.encode().startswith(prefix) for k in outside)
    assert RefKey("acme", "prod", "main").encode().startswith(prefix)


def test_tenant_prefix_does_not_match_a_longer_tenant_name() -> None:
    assert tenant_prefix("acme") == b"acme\x00"
    assert ObjKey("acme", "c", "commit", 5).encode().startswith(tenant_prefix("acme"))
    assert not ObjKey("acme2", "c", "commit", 5).encode().startswith(tenant_prefix("acme"))
    assert not ObjKey("acm", "c", "commit", 5).encode().startswith(tenant_prefix("acme"))


# --- RefKey -----------------------------------------------------------------------


def test_ref_key_exact_bytes() -> None:
    assert RefKey("acme", "prod", "main").encode() == b"acme\x00prod\x00main"


@pytest.mark.parametrize("name", ["main", "brånch", "feature.x-1", "日本", "a b"])
@pytest.mark.parametrize("catalog", ["prod", SYSTEM_CATALOG])
def test_ref_key_round_trip(catalog: str, name: str) -> None:
    key = RefKey("acme", catalog, name)
    assert RefKey.decode(key.encode()) == key


# --- EntityKey ----------------------------------------------------------------------

NAMESPACES = [(), ("a",), ("a", "b", "c"), ("ünï", "日本"), tuple(f"l{i}" for i in range(15))]


@pytest.mark.parametrize("name", ["t", "orders", "ünïcödé", "with.dot", "x" * 255])
@pytest.mark.parametrize("namespace", NAMESPACES, ids=lambda ns: ".".join(ns) or "root")
@pytest.mark.parametrize("kind", list(Kind))
def test_entity_key_round_trip(kind: Kind, namespace: tuple[str, ...], name: str) -> None:
    key = EntityKey(kind, namespace, name)
    assert EntityKey.decode(key.encode()) == key


def test_entity_key_exact_bytes() -> None:
    assert EntityKey(Kind.TABLE, ("a", "b"), "t").encode() == b"a\x1fb\x00tt"
    assert EntityKey(Kind.VIEW, (), "v").encode() == b"\x00vv"
    assert EntityKey.namespace_key(("a",)).encode() == b"\x00na"


def test_namespace_key_and_path() -> None:
    key = EntityKey.namespace_key(("a", "b", "c"))
    assert key == EntityKey(Kind.NAMESPACE, ("a", "b"), "c")
    assert key.path == ("a", "b", "c")
    assert key.display() == "a.b.c"
    assert EntityKey.decode(key.encode()).path == ("a", "b", "c")
    assert Kind.TABLE.label == "table"


# --- children and kind prefixes ---------------------------------------------------------


def _children_of_a() -> list[EntityKey]:
    return [
        EntityKey.namespace_key(("a", "x")),
        EntityKey.namespace_key(("a", "b")),
        EntityKey(Kind.TABLE, ("a",), "t"),
        EntityKey(Kind.TABLE, ("a",), "vt"),  # a table whose name starts with the view byte
        EntityKey(Kind.VIEW, ("a",), "v"),
    ]


def _not_children_of_a() -> list[EntityKey]:
    return [
        EntityKey.namespace_key(("a",)),  # the namespace itself
        EntityKey.namespace_key(("a", "x", "y")),  # grandchild namespace
        EntityKey(Kind.TABLE, ("a", "x"), "t"),  # grandchild table
        EntityKey(Kind.VIEW, ("a", "x"), "v"),  # grandchild view
        EntityKey.namespace_key(("ab",)),  # sibling whose name extends "a"
        EntityKey.namespace_key(("ab", "x")),
        EntityKey(Kind.TABLE, ("ab",), "t"),
        EntityKey(Kind.VIEW, ("ab",), "v"),
        EntityKey(Kind.TABLE, (), "a"),
        EntityKey(Kind.TABLE, ("b",), "t"),
        EntityKey(Kind.TABLE, ("b", "a"), "t"),
    ]


def test_children_prefix_selects_exactly_the_direct_children() -> None:
    prefix = children_prefix(("a",))
    assert prefix == b"a\x00"
    for key in _children_of_a():
        assert key.encode().startswith(prefix), key
    for key in _not_children_of_a():
        assert not key.encode().startswith(prefix), key


def test_children_prefix_of_the_catalog_root() -> None:
    prefix = children_prefix(())
    assert prefix == b"\x00"
    roots = [
        EntityKey.namespace_key(("a",)),
        EntityKey.namespace_key(("ab",)),
        EntityKey(Kind.TABLE, (), "t"),
    ]
    assert all(k.encode().startswith(prefix) for k in roots)
    assert not any(k.encode().startswith(prefix) for k in _children_of_a())


def test_children_of_a_nested_namespace() -> None:
    prefix = children_prefix(("a", "b"))
    assert prefix == b"a\x1fb\x00"
    assert EntityKey(Kind.TABLE, ("a", "b"), "t").encode().startswith(prefix)
    assert not EntityKey(Kind.TABLE, ("a", "bc"), "t").encode().startswith(prefix)
    assert not EntityKey(Kind.TABLE, ("a", "b", "c"), "t").encode().startswith(prefix)
    assert not EntityKey(Kind.TABLE, ("a",), "b").encode().startswith(prefix)


def test_direct_children_form_one_contiguous_sorted_range() -> None:
    children = _children_of_a()
    everything = [*children, *_not_children_of_a()]
    ordered = sorted(everything, key=EntityKey.encode)
    positions = [ordered.index(c) for c in children]
    assert max(positions) - min(positions) == len(children) - 1


def test_kind_prefix_separates_tables_from_views() -> None:
    ns = ("a",)
    tables = [EntityKey(Kind.TABLE, ns, n) for n in ("t", "vt", "zz", "ü")]
    views = [EntityKey(Kind.VIEW, ns, n) for n in ("v", "tv", "aa", "ü")]
    namespaces = [EntityKey.namespace_key(("a", n)) for n in ("t", "v")]
    table_prefix = kind_prefix(ns, Kind.TABLE)
    view_prefix = kind_prefix(ns, Kind.VIEW)
    assert table_prefix == b"a\x00t"
    assert view_prefix == b"a\x00v"
    assert all(k.encode().startswith(table_prefix) for k in tables)
    assert not any(k.encode().startswith(view_prefix) for k in tables)
    assert all(k.encode().startswith(view_prefix) for k in views)
    assert not any(k.encode().startswith(table_prefix) for k in views)
    for key in namespaces:
        assert key.encode().startswith(kind_prefix(ns, Kind.NAMESPACE))
        assert not key.encode().startswith(table_prefix)
        assert not key.encode().startswith(view_prefix)
    # Kinds are contiguous: every table sorts before every view of the same namespace.
    assert max(k.encode() for k in tables) < min(k.encode() for k in views)
