"""The PyIceberg benchmark's REST client floor (``bench.scenarios.client_floor``): a
node's answers recorded, replayed from memory by ``bench.floor_app`` to a real
``RestCatalog``, and the floor measured beside other catalogs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table.update import SetPropertiesUpdate

from bench.floor_app import kind_of
from bench.scenarios.client_floor import FLOOR, FloorApp, record, run, summary_rows
from bench.scenarios.iceberg_workload import SCHEMA
from harness.node import NodeProcess


@pytest.mark.parametrize(
    ("method", "path", "kind"),
    [
        ("GET", "/v1/config", "config"),
        ("POST", "/v1/namespaces/ns/tables", "create"),
        ("POST", "/v1/default/namespaces/ns/tables", "create"),  # a catalog's prefix
        ("POST", "/v1/default/namespaces/ns/tables/t", "commit"),
        ("GET", "/v1/default/namespaces/ns/tables/t", "load"),
        ("GET", "/v1/default/namespaces/ns/tables", None),  # a listing: not recorded
        ("DELETE", "/v1/default/namespaces/ns/tables/t", None),
        ("POST", "/v1/default/namespaces", None),
        ("GET", "/v1/default/namespaces/ns/views/v", None),
        ("GET", "/health/x", None),
    ],
)
def test_a_request_gets_the_answer_recorded_for_its_kind(
    method: str, path: str, kind: str | None
) -> None:
    assert kind_of(method, path) == kind


def test_the_client_gets_the_node_s_own_answers_from_memory(tmp_path: Path) -> None:
    with NodeProcess(tmp_path / "data", log_path=tmp_path / "node.log") as node:
        answers = record(node.url)
        # the node keeps the table the answers came from, as a client made it
        recorded = RestCatalog("check", uri=node.url).load_table(("floor_recorded", "recorded"))
    assert recorded.properties["round"] == "0" and len(recorded.metadata.snapshots) == 5
    assert set(answers) == {"config", "create", "commit", "load"}
    # the load answer is the table as it stands: after the commit step and the snapshots
    assert json.loads(answers["load"]["body"])["metadata-location"] == recorded.metadata_location
    commit = json.loads(answers["commit"]["body"])["metadata"]
    assert commit["properties"]["round"] == "0" and not commit.get("snapshots")
    path = tmp_path / "answers.json"
    path.write_text(json.dumps(answers))
    with FloorApp(path, tmp_path / "floor.log") as app:
        client = RestCatalog("floor", uri=app.url)
        made = client.create_table(("any", "name"), SCHEMA)  # no table exists: it is replayed
        assert made.metadata_location == json.loads(answers["create"]["body"])["metadata-location"]
        client.commit_table(made, (), (SetPropertiesUpdate(updates={"round": "9"}),))
        loaded = client.load_table(("other", "name"))
        assert loaded.metadata_location == recorded.metadata_location
        assert len(loaded.metadata.snapshots) == 5
        answer = requests.get(f"{app.url}/v1/default/namespaces/ns/tables", timeout=10)
        assert answer.status_code == 404  # what was not recorded is not made up


def test_the_floor_is_measured_beside_other_catalogs_and_compared(tmp_path: Path) -> None:
    (tmp_path / "wh").mkdir()
    sqlite = SqlCatalog(
        "s", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=(tmp_path / "wh").as_uri()
    )
    args = argparse.Namespace(warmup=1, tables=4, commits=4, loads=4, rounds=2)
    with NodeProcess(tmp_path / "data", log_path=tmp_path / "node.log") as node:
        node_catalog = RestCatalog("bench", uri=node.url)
        work = tmp_path / "floor"
        work.mkdir()
        results = run({"metastore": node_catalog, "sql-sqlite": sqlite}, node.url, work, args)
        # each real catalog made its own tables: the warm-up's one and the measured four
        assert len(node_catalog.list_tables("floor")) == 2 + 1 + 4
    assert len(sqlite.list_tables("floor")) == 2 + 1 + 4
    assert list(results) == [FLOOR, "metastore", "sql-sqlite"]
    for figures in results.values():
        assert figures["create_table_per_s"] > 0 and figures["load_table_per_s"] > 0
        assert figures["commit_step_p50_ms"] > 0 and figures["load_client_cpu_ms"] >= 0
    rows = {row.measure: row for row in summary_rows(results, "metastore", "sql-sqlite")}
    floor_row = rows["load_table/s: REST client floor vs sql-sqlite"]
    assert floor_row.ratio == pytest.approx(
        results[FLOOR]["load_table_per_s"] / results["sql-sqlite"]["load_table_per_s"]
    )
    assert "create_table/s: metastore vs REST client floor" in rows
    assert all(row.target is None for row in rows.values())  # they bound targets, not meet them
    assert len(rows) == 6
