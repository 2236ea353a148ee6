"""Native API locations: the containment and uniqueness rules of the Iceberg API, the same module.

A table's or view's location must lie below its catalog's root in the node's
warehouse (normalized: ``..``, ``.``, duplicate slashes, ambiguous %-escapes), and no
two live tables or views of a catalog share or nest locations, whichever API made them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from harness.node import NodeProcess
from tests.native.support import Catalog, assert_error, assert_status, entity_ref, unique

SCHEMA = {"type": "struct", "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}


@pytest.fixture
def place(node: NodeProcess, catalog: Catalog) -> Callable[[str], str]:
    root = (node.data_dir.resolve() / "warehouse" / catalog.tenant / catalog.name).as_uri()
    return lambda path: f"{root}/{path}" if path else root


OUTSIDE = [
    "file:///etc",
    "s3://bucket/t",
    "relative/t",
    "ROOT",
    "ROOT/../c2/t",
    "ROOT/ns/%2e%2e/%2e%2e/c2/t",
    "ROOT/ns/%252E%252E/%252E%252E/c2/t",
    "ROOT/ns/a%2Fb",
    "ROOT/ns/a\\b",
    "ROOT2/t",  # a catalog whose name extends this one's: not inside it
]


@pytest.mark.parametrize("location", OUTSIDE)
async def test_a_location_outside_the_catalog_is_refused_everywhere(
    catalog: Catalog, place: Callable[[str], str], location: str
) -> None:
    api = catalog.api
    await catalog.create_namespace("ns")
    await catalog.create(("ns",), "t", location=place("ns/t"))
    location = location.replace("ROOT", place(""))
    head = await catalog.head()
    for kind in ("tables", "views"):
        reply = await api.post(catalog.ns("ns") + f"/{kind}", {"name": "x", "location": location})
        assert_error(reply, 400)
    reply = await api.post(catalog.entity(("ns",), "t"), {"updates": {}, "location": location})
    assert_error(reply, 400)
    change = {"action": "create", "entity": entity_ref("table", "ns", "y"), "location": location}
    assert_error(await catalog.commit({"changes": [change]}), 400)
    assert await catalog.head() == head


async def test_locations_are_stored_normalized_and_may_be_cleared(
    catalog: Catalog, place: Callable[[str], str]
) -> None:
    api = catalog.api
    await catalog.create_namespace("ns")
    table = await catalog.create(("ns",), "t", location=place("ns//x/../t/"))
    assert table["location"] == place("ns/t"), table
    cleared = await api.ok("POST", catalog.entity(("ns",), "t"), {"location": None})
    assert cleared["location"] is None, cleared
    again = await catalog.create(("ns",), "u", location=place("ns/t"))  # free again
    assert again["location"] == place("ns/t")


async def test_two_live_entities_never_share_or_nest_locations(
    catalog: Catalog, place: Callable[[str], str]
) -> None:
    api = catalog.api
    await catalog.create_namespace("ns")
    await catalog.create(("ns",), "t", location=place("ns/t"))
    for location in ("ns/t", "ns/t/inner", "ns"):
        for kind in ("tables", "views"):
            body: dict[str, Any] = {"name": unique("x"), "location": place(location)}
            reply = await api.post(catalog.ns("ns") + f"/{kind}", body)
            assert_error(reply, 400)
    await catalog.create(("ns",), "u", location=place("ns/t2"))
    reply = await api.post(catalog.entity(("ns",), "u"), {"location": place("ns/t/deeper")})
    assert_error(reply, 400)
    both = {
        "changes": [
            {"action": "create", "entity": entity_ref("view", "ns", "a"), "location": place("v")},
            {"action": "create", "entity": entity_ref("view", "ns", "b"), "location": place("v")},
        ]
    }
    assert_error(await catalog.commit(both), 400)
    # a rename keeps the location; a drop keeps it for an undrop or its namespace
    rename = {
        "source": entity_ref("table", "ns", "t"),
        "destination": entity_ref("table", "ns", "r"),
    }
    assert_status(await api.post(catalog.path + "/rename", rename), 200, 204)
    assert_error(
        await api.post(catalog.ns("ns") + "/tables", {"name": "t", "location": place("ns/t")}), 400
    )
    assert_status(await api.delete(catalog.entity(("ns",), "r")), 204)
    await catalog.create_namespace("other")
    assert_error(
        await api.post(catalog.ns("other") + "/tables", {"name": "t", "location": place("ns/t")}),
        400,
    )
    await catalog.create(("ns",), "t", location=place("ns/t"))


async def test_native_and_iceberg_tables_share_one_location_index(catalog: Catalog) -> None:
    """A native table cannot take an Iceberg table's location (nor the other way)."""
    api = catalog.api
    name = unique("c")
    await api.ok("POST", "/api/v1/tenants/default/catalogs", {"name": name}, 201)
    native = Catalog(api, "default", name)
    await native.create_namespace("db")
    iceberg = f"/v1/{name}/namespaces/db/tables"
    created = assert_status(await api.post(iceberg, {"name": "ice", "schema": SCHEMA}))
    location = created["metadata"]["location"]
    reply = await api.post(native.ns("db") + "/tables", {"name": "n", "location": location})
    assert_error(reply, 400)
    await native.create(("db",), "n", location=location + "-native")
    clash = {"name": "ice2", "schema": SCHEMA, "location": location + "-native/sub"}
    assert_error(await api.post(iceberg, clash), 400)
