"""Hostile inputs: every one gets a 4xx in the Iceberg error shape and changes nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog

from tests.iceberg.conftest import Server
from tests.iceberg.support import SCHEMA, Http, assert_error

T = "/namespaces/db/tables/t"
SCHEMA_JSON = json.loads(SCHEMA.model_dump_json())


def _commit(*updates: Any, requirements: Any = ()) -> dict[str, Any]:
    return {"requirements": list(requirements), "updates": list(updates)}


def _field(field_id: int, name: str, type_: str = "long", **extra: Any) -> dict[str, Any]:
    return {"id": field_id, "name": name, "type": type_, "required": False, **extra}


_SCHEMA_1 = {"type": "struct", "schema-id": 1, "fields": [_field(1, "evil", "int")]}
_TWICE = {**_SCHEMA_1, "fields": [_field(1, "id"), _field(3, "x"), _field(3, "y")]}
_HUGE_DEFAULT = {
    **_SCHEMA_1,
    "fields": [
        _field(1, "id"),
        _field(3, "d", "decimal(38, 2)", **{"initial-default": "1e10000000"}),
    ],
}


def _with_type(type_: str) -> dict[str, Any]:
    return {**_SCHEMA_1, "fields": [_field(1, "id"), _field(3, "f", type_)]}


def _snapshot(snapshot_id: int) -> dict[str, Any]:
    return {
        "snapshot-id": snapshot_id,
        "timestamp-ms": 1,
        "sequence-number": 1,
        "manifest-list": "WAREHOUSE/db/t/metadata/snap.avro",
        "summary": {"operation": "append"},
    }


CASES: list[tuple[str, str, str, dict[str, Any], int]] = [
    # (case, method, path, request kwargs, status)
    ("malformed json", "POST", "/namespaces", {"data": b'{"namespace": ['}, 400),
    ("json array", "POST", "/namespaces", {"data": b"[1, 2]"}, 400),
    ("NaN", "POST", "/namespaces", {"data": b'{"namespace": ["a"], "properties": NaN}'}, 400),
    ("namespace not a list", "POST", "/namespaces", {"json": {"namespace": "a"}}, 400),
    (
        "property not a string",
        "POST",
        "/namespaces",
        {"json": {"namespace": ["a"], "properties": {"k": 1}}},
        400,
    ),
    ("unknown field", "POST", "/namespaces", {"json": {"namespace": ["a"], "x": 1}}, 400),
    ("control character", "POST", "/namespaces", {"json": {"namespace": ["a\u0001b"]}}, 400),
    ("empty level", "GET", "/namespaces/a%1F%1Fb", {}, 400),
    ("name too long", "GET", "/namespaces/db/tables/" + "x" * 300, {}, 400),
    (
        "huge body",
        "POST",
        "/namespaces",
        {"data": b'{"namespace": ["' + b"a" * (2 << 20) + b'"]}'},
        413,
    ),
    (
        "table name not a string",
        "POST",
        "/namespaces/db/tables",
        {"json": {"name": 5, "schema": SCHEMA_JSON}},
        400,
    ),
    (
        "schema fields not a list",
        "POST",
        "/namespaces/db/tables",
        {"json": {"name": "x", "schema": {"type": "struct", "fields": "no"}}},
        400,
    ),
    (
        "location outside the warehouse",
        "POST",
        "/namespaces/db/tables",
        {"json": {"name": "x", "schema": SCHEMA_JSON, "location": "file:///tmp/elsewhere"}},
        400,
    ),
    (
        "location climbing out",
        "POST",
        "/namespaces/db/tables",
        {"json": {"name": "x", "schema": SCHEMA_JSON, "location": "WAREHOUSE/db/../../x"}},
        400,
    ),
    ("unknown update action", "POST", T, {"json": _commit({"action": "explode"})}, 400),
    (
        "unknown requirement",
        "POST",
        T,
        {"json": _commit(requirements=[{"type": "assert-luck"}])},
        400,
    ),
    (
        "update of the wrong type",
        "POST",
        T,
        {"json": _commit({"action": "set-properties", "updates": "x"})},
        400,
    ),
    (
        "requirement of the wrong type",
        "POST",
        T,
        {
            "json": _commit(
                requirements=[
                    {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": "abc"}
                ]
            )
        },
        400,
    ),
    (
        "unknown schema",
        "POST",
        T,
        {"json": _commit({"action": "set-current-schema", "schema-id": 42})},
        400,
    ),
    (
        "server-owned uuid",
        "POST",
        T,
        {
            "json": _commit(
                {"action": "assign-uuid", "uuid": "00000000-0000-0000-0000-000000000001"}
            )
        },
        400,
    ),
    (
        "set-location outside",
        "POST",
        T,
        {"json": _commit({"action": "set-location", "location": "file:///etc"})},
        400,
    ),
    (
        "identifier of another table",
        "POST",
        T,
        {"json": {"identifier": {"namespace": ["db"], "name": "u"}, "updates": []}},
        400,
    ),
    ("bad page token", "GET", "/namespaces/db/tables", {"params": {"pageToken": "garbage"}}, 400),
    ("page size zero", "GET", "/namespaces", {"params": {"pageSize": "0"}}, 400),
    ("page size not a number", "GET", "/namespaces", {"params": {"pageSize": "ten"}}, 400),
    ("page size in other digits", "GET", "/namespaces", {"params": {"pageSize": "\u0661"}}, 400),
    ("page size of two signs", "GET", "/namespaces", {"params": {"pageSize": "+-5"}}, 400),
    ("purge flag not a boolean", "DELETE", T, {"params": {"purgeRequested": "maybe"}}, 400),
    (
        "transaction without identifier",
        "POST",
        "/transactions/commit",
        {"json": {"table-changes": [_commit()]}},
        400,
    ),
    (
        "rename without destination",
        "POST",
        "/tables/rename",
        {"json": {"source": {"namespace": ["db"], "name": "t"}}},
        400,
    ),
    (
        "register a missing file",
        "POST",
        "/namespaces/db/register",
        {"json": {"name": "r", "metadata-location": "WAREHOUSE/db/none.metadata.json"}},
        400,
    ),
    (
        "create without a partition spec",  # pyiceberg's lookup raised StopIteration: a hang
        "POST",
        "/namespaces/db/tables/new",
        {"json": _commit(requirements=[{"type": "assert-create"}])},
        400,
    ),
    (
        "transaction creating with only a schema",
        "POST",
        "/transactions/commit",
        {
            "json": {
                "table-changes": [
                    {
                        "identifier": {"namespace": ["db"], "name": "u"},
                        **_commit(
                            {"action": "add-schema", "schema": SCHEMA_JSON},
                            requirements=[{"type": "assert-create"}],
                        ),
                    }
                ]
            }
        },
        400,
    ),
    (
        "schema id taken",  # it replaced the current schema once the table was read back
        "POST",
        T,
        {"json": _commit({"action": "add-schema", "schema": {**_SCHEMA_1, "schema-id": 0}})},
        400,
    ),
    (
        "field id twice",
        "POST",
        T,
        {"json": _commit({"action": "add-schema", "schema": _TWICE})},
        400,
    ),
    (
        "decimal default past any precision",  # seconds to hours of CPU to make exact
        "POST",
        T,
        {"json": _commit({"action": "add-schema", "schema": _HUGE_DEFAULT})},
        400,
    ),
    (
        "lone surrogate in a property",  # no UTF-8 writer takes it: a 500 and its batch's
        "POST",
        "/namespaces",
        {"json": {"namespace": ["s"], "properties": {"k": "\ud800"}}},
        400,
    ),
    (
        "lone surrogate in a property key",
        "POST",
        T,
        {"json": _commit({"action": "set-properties", "updates": {"\udfff": "v"}})},
        400,
    ),
    (
        "lone surrogate in a field name",
        "POST",
        "/namespaces/db/tables",
        {"json": {"name": "x", "schema": {**_SCHEMA_1, "fields": [_field(1, "\ud800")]}}},
        400,
    ),
    (
        "snapshot id past 64 bits",
        "POST",
        T,
        {"json": _commit({"action": "add-snapshot", "snapshot": _snapshot(2**63)})},
        400,
    ),
    (
        "schema id past 32 bits",
        "POST",
        T,
        {"json": _commit({"action": "add-schema", "schema": {**_SCHEMA_1, "schema-id": 2**40}})},
        400,
    ),
    (
        "fixed of no bytes",
        "POST",
        T,
        {"json": _commit({"action": "add-schema", "schema": _with_type("fixed[0]")})},
        400,
    ),
    (
        "fixed of a terabyte",
        "POST",
        T,
        {"json": _commit({"action": "add-schema", "schema": _with_type(f"fixed[{2**40}]")})},
        400,
    ),
    (
        "bucket of zero",
        "POST",
        T,
        {
            "json": _commit(
                {
                    "action": "add-spec",
                    "spec": {
                        "spec-id": 1,
                        "fields": [
                            {
                                "source-id": 1,
                                "field-id": 1000,
                                "name": "b",
                                "transform": "bucket[0]",
                            }
                        ],
                    },
                }
            )
        },
        400,
    ),
    (
        "bad idempotency key",
        "POST",
        "/namespaces",
        {"json": {"namespace": ["k"]}, "headers": {"Idempotency-Key": "a b"}},
        400,
    ),
]


@pytest.fixture
def target(
    iceberg_server: Server, catalog_name: str, catalog: RestCatalog
) -> Iterator[tuple[Http, str]]:
    catalog.create_namespace(("db",))
    catalog.create_table(("db", "t"), SCHEMA)
    yield Http(iceberg_server.url, catalog_name), str(iceberg_server.warehouse(catalog_name))


@pytest.mark.parametrize(
    ("case", "method", "path", "kwargs", "status"), CASES, ids=[c[0] for c in CASES]
)
def test_hostile_input_changes_nothing(
    target: tuple[Http, str],
    case: str,
    method: str,
    path: str,
    kwargs: dict[str, Any],
    status: int,
) -> None:
    http, warehouse = target
    text = json.dumps(kwargs.get("json", {})).replace("WAREHOUSE", "file://" + warehouse)
    if "json" in kwargs:
        kwargs = {**kwargs, "json": json.loads(text)}
    head = http.head_commit()
    table = http.call("GET", T).json()["metadata-location"]
    assert_error(http.call(method, path, **kwargs), status)
    assert http.head_commit() == head, f"{case}: a failed request wrote a commit"
    assert http.call("GET", T).json()["metadata-location"] == table


def test_unknown_prefix_is_404(iceberg_server: Server) -> None:
    reply = Http(iceberg_server.url, "no-such-catalog").call("GET", "/namespaces")
    assert_error(reply, 404, "NoSuchWarehouseException")


def test_purge_flag_accepts_pyiceberg_spelling(target: tuple[Http, str]) -> None:
    http, _ = target
    assert http.call("DELETE", T, params={"purgeRequested": "False"}).status_code == 204
    assert_error(http.call("GET", T), 404, "NoSuchTableException")


def test_a_refused_create_leaves_its_name_free_to_create_and_commit(
    target: tuple[Http, str], catalog: RestCatalog
) -> None:
    """A create that brought no partition spec once never answered, and held the name's
    commit turn: every later commit to it waited forever, until a restart."""
    http, _ = target
    refused = http.call(
        "POST",
        "/namespaces/db/tables/new",
        json=_commit(requirements=[{"type": "assert-create"}]),
        timeout=30,
    )
    assert_error(refused, 400, "BadRequestException")
    table = catalog.create_table(("db", "new"), SCHEMA)
    table.transaction().set_properties(k="v").commit_transaction()
    assert catalog.load_table(("db", "new")).properties["k"] == "v"


def test_a_v3_column_default_out_of_any_range_is_refused_at_once(
    target: tuple[Http, str], catalog: RestCatalog
) -> None:
    http, _ = target
    catalog.create_table(("db", "v3"), SCHEMA, properties={"format-version": "3"})
    for value in ("1e10000000", "1E-999", "12e+100"):
        schema = {
            **_HUGE_DEFAULT,
            "fields": [
                _field(1, "id"),
                _field(3, "d", "decimal(38, 2)", **{"initial-default": value}),
            ],
        }
        body = _commit({"action": "add-schema", "schema": schema})
        refused = http.call("POST", "/namespaces/db/tables/v3", json=body, timeout=30)
        assert_error(refused, 400, "BadRequestException")
        assert "exponent past 99" in refused.json()["error"]["message"], refused.text
    fine = {
        **_HUGE_DEFAULT,
        "fields": [
            _field(1, "id"),
            _field(3, "d", "decimal(38, 2)", **{"initial-default": "1.5e2"}),
        ],
    }
    assert (
        http.call(
            "POST",
            "/namespaces/db/tables/v3",
            json=_commit({"action": "add-schema", "schema": fine}),
        ).status_code
        == 200
    )


def test_native_bodies_refuse_lone_surrogates(iceberg_server: Server) -> None:
    url = f"{iceberg_server.url}/api/v1/tenants/default/catalogs"
    for body in (
        {"name": "sur", "properties": {"k": "\ud800"}},
        {"name": "sur", "properties": {"\udfff": "v"}},
    ):
        assert_error(requests.post(url, json=body, timeout=30), 400, "BadRequestException")
    assert requests.get(f"{url}/sur", timeout=30).status_code == 404
