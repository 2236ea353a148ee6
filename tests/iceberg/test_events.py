"""The change feed of a catalog PyIceberg writes to: table commits name their new snapshot."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog

from harness.node import NodeProcess
from tests.iceberg.conftest import TENANT, Server
from tests.iceberg.support import SCHEMA, rows


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root: Path = tmp_path_factory.mktemp("iceberg-events")
    process = NodeProcess(root / "data", log_path=root / "node.log")
    with process:
        yield Server(process.url, (root / "data").resolve())
    assert "Traceback" not in process.log_path.read_text(errors="replace"), process.log_tail(60)


def test_table_commits_name_the_new_snapshot_and_its_operation(server: Server) -> None:
    name = server.new_catalog()
    catalog: RestCatalog = server.client(name)
    catalog.create_namespace(("sales",))
    table = catalog.create_table(("sales", "orders"), SCHEMA)
    table.append(rows([1, 2]))
    table.append(rows([3]))
    with table.transaction() as tx:
        tx.set_properties(owner="ana")  # no new snapshot
    snapshots = [s.snapshot_id for s in table.refresh().snapshots()]
    catalog.close()

    url = f"{server.url}/api/v1/tenants/{TENANT}/catalogs/{name}/events"
    reply = requests.get(url, timeout=30)
    assert reply.status_code == 200, reply.text
    events = [e for e in reply.json()["events"] if e["kind"] == "table"]
    got = [(e["operation"], e.get("snapshot-id"), e.get("snapshot-operation")) for e in events]
    assert got == [
        ("create", None, None),
        ("update", snapshots[0], "append"),
        ("update", snapshots[1], "append"),
        ("update", None, None),
    ]
    assert [e["after-version"] for e in events] == [1, 2, 3, 4]
