"""Multi-table transactions (all or nothing) and concurrent PyIceberg writers on one table."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import CommitFailedException

from tests.iceberg.conftest import Server
from tests.iceberg.support import SCHEMA, Http, assert_error, rows


def _change(name: str, requirements: list[dict[str, Any]], props: dict[str, str]) -> Any:
    return {
        "identifier": {"namespace": ["db"], "name": name},
        "requirements": requirements,
        "updates": [{"action": "set-properties", "updates": props}],
    }


def test_multi_table_transaction_is_all_or_nothing(
    iceberg_server: Server, catalog_name: str, catalog: RestCatalog
) -> None:
    catalog.create_namespace(("db",))
    tables = {n: catalog.create_table(("db", n), SCHEMA) for n in ("a", "b", "c")}
    http = Http(iceberg_server.url, catalog_name)
    uuid_of = {n: str(t.metadata.table_uuid) for n, t in tables.items()}
    before = {n: catalog.load_table(("db", n)).metadata_location for n in tables}
    head = http.head_commit()

    failing = {
        "table-changes": [
            _change("a", [{"type": "assert-table-uuid", "uuid": uuid_of["a"]}], {"x": "1"}),
            _change("b", [{"type": "assert-current-schema-id", "current-schema-id": 7}], {}),
            _change("c", [], {"x": "1"}),
        ]
    }
    reply = http.call("POST", "/transactions/commit", json=failing)
    assert_error(reply, 409, "CommitFailedException")
    assert {n: catalog.load_table(("db", n)).metadata_location for n in tables} == before
    assert "x" not in catalog.load_table(("db", "a")).properties
    assert http.head_commit() == head

    passing = {
        "table-changes": [
            _change("a", [{"type": "assert-table-uuid", "uuid": uuid_of["a"]}], {"x": "1"}),
            _change(
                "b", [{"type": "assert-current-schema-id", "current-schema-id": 0}], {"x": "2"}
            ),
        ]
    }
    assert http.call("POST", "/transactions/commit", json=passing).status_code == 204
    assert catalog.load_table(("db", "a")).properties["x"] == "1"
    assert catalog.load_table(("db", "b")).properties["x"] == "2"
    assert catalog.load_table(("db", "c")).metadata_location == before["c"]
    latest = requests.get(
        f"{iceberg_server.url}/api/v1/tenants/default/catalogs/{catalog_name}/commits",
        params={"pageSize": 1},
        timeout=30,
    ).json()["commits"][0]
    assert sorted(c["path"][-1] for c in latest["changes"]) == ["a", "b"]  # one commit
    assert latest["parent"] == head

    missing = {"table-changes": [_change("a", [], {}), _change("nope", [], {"y": "1"})]}
    assert_error(http.call("POST", "/transactions/commit", json=missing), 404)
    twice = {"table-changes": [_change("a", [], {"y": "1"}), _change("a", [], {"y": "2"})]}
    assert_error(http.call("POST", "/transactions/commit", json=twice), 400)


@pytest.mark.slow
def test_concurrent_appends_each_land_in_exactly_one_snapshot(
    iceberg_server: Server, catalog_name: str, catalog: RestCatalog
) -> None:
    """8 PyIceberg clients append to one table; a client whose requirement failed refreshes
    and retries, as Iceberg clients do. Every append is present once, in exactly one snapshot."""
    clients, appends = 8, 2
    catalog.create_namespace(("db",))
    catalog.create_table(("db", "hot"), SCHEMA)
    start = threading.Barrier(clients)
    errors: list[BaseException] = []

    def writer(index: int) -> None:
        try:
            client = iceberg_server.client(catalog_name)
            table = client.load_table(("db", "hot"))
            start.wait(timeout=60)
            for n in range(appends):
                marker = index * 1000 + n
                for _ in range(100):
                    try:
                        table.append(rows([marker], region=f"w{index}"))
                        break
                    except CommitFailedException:  # pyiceberg's own retries ran out
                        table = client.load_table(("db", "hot"))
                else:
                    raise AssertionError(f"writer {index} never committed append {n}")
            client.close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)

    table = catalog.load_table(("db", "hot"))
    ids = sorted(table.scan().to_arrow()["id"].to_pylist())
    expected = sorted(i * 1000 + n for i in range(clients) for n in range(appends))
    assert ids == expected  # every append present, none twice
    snapshots = table.metadata.snapshots
    assert len(snapshots) == clients * appends
    assert all(s.summary is not None and s.summary["added-records"] == "1" for s in snapshots)
    # Each append's rows were added by exactly one snapshot: the chain is linear.
    chain, current = [], table.current_snapshot()
    while current is not None:
        chain.append(current.snapshot_id)
        parent = current.parent_snapshot_id
        current = table.snapshot_by_id(parent) if parent is not None else None
    assert sorted(chain) == sorted(s.snapshot_id for s in snapshots)
