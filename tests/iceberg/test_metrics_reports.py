"""Metrics reports (``POST .../tables/{table}/metrics``): validated, answered 204,
counted in ``/metrics``, the last ones per table readable through the native API; and
``/v1/config`` advertises exactly the endpoints the node serves.

PyIceberg (0.12, the newest release) does not send metrics reports at all, so the
reports here are built from what a real PyIceberg scan and commit did (snapshot,
schema, projected fields, planned files) and sent the way the Java client's
``RESTMetricsReporter`` sends them, to the URL PyIceberg builds for the table.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog

from harness.node import NodeProcess
from metastore.config.server_config import ServerConfig
from metastore.iceberg.reports import KEEP
from metastore.node.app import create_app
from tests.iceberg.support import SCHEMA, Http, assert_error, rows

SCHEMA_JSON = json.loads(SCHEMA.model_dump_json())


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    root = tmp_path_factory.mktemp("reports")
    with NodeProcess(root / "data", log_path=root / "node.log") as process:
        yield process
    assert "Traceback" not in Path(process.log_path).read_text(errors="replace")


@pytest.fixture
def catalog_name(node: NodeProcess) -> str:
    name = f"c{uuid.uuid4().hex[:10]}"
    reply = requests.post(
        f"{node.url}/api/v1/tenants/default/catalogs", json={"name": name}, timeout=60
    )
    assert reply.status_code == 201, reply.text
    return name


def _counter(node: NodeProcess, kind: str) -> int:
    text = requests.get(f"{node.url}/metrics", timeout=60).text
    found = re.search(
        rf'^metastore_iceberg_metrics_reports_total{{type="{kind}"}} (\d+)$', text, re.M
    )
    assert found, text
    return int(found.group(1))


def _reports(node: NodeProcess, catalog: str, table: str) -> requests.Response:
    path = f"/api/v1/tenants/default/catalogs/{catalog}/namespaces/db/tables/{table}"
    return requests.get(f"{node.url}{path}/metrics-reports", timeout=60)


def _scan_report(table: str, snapshot_id: int, files: int, **extra: Any) -> dict[str, Any]:
    return {
        "report-type": "scan-report",
        "table-name": table,
        "snapshot-id": snapshot_id,
        "filter": {"type": "gt", "term": "id", "value": 1},
        "schema-id": 0,
        "projected-field-ids": [1, 2],
        "projected-field-names": ["id", "region"],
        "metrics": {
            "total-planning-duration": {
                "count": 1,
                "time-unit": "nanoseconds",
                "total-duration": 2644235,
            },
            "result-data-files": {"unit": "count", "value": files},
            "result-delete-files": {"unit": "count", "value": 0},
        },
        "metadata": {"engine": "pyiceberg"},
        **extra,
    }


def test_a_real_scan_and_commit_are_reported_counted_and_readable(
    node: NodeProcess, catalog_name: str
) -> None:
    catalog = RestCatalog("reports", uri=node.url, warehouse=catalog_name)
    catalog.create_namespace(("db",))
    table = catalog.create_table(("db", "t"), SCHEMA)
    table.append(rows([1, 2, 3]))
    table.append(rows([4]))
    table = catalog.load_table(("db", "t"))
    scan = table.scan(row_filter="id > 1", selected_fields=("id", "region"))
    planned = list(scan.plan_files())
    assert len(scan.to_arrow()) == 3
    snapshot = table.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    url = catalog.url("namespaces/db/tables/t/metrics")  # with the prefix /v1/config gave
    scans, commits = _counter(node, "scan-report"), _counter(node, "commit-report")
    scan_report = _scan_report("reports.db.t", snapshot.snapshot_id, len(planned))
    commit_report = {
        "report-type": "commit-report",
        "table-name": "reports.db.t",
        "snapshot-id": snapshot.snapshot_id,
        "sequence-number": snapshot.sequence_number,
        "operation": snapshot.summary.operation.value,
        "metrics": {"added-data-files": {"unit": "count", "value": 1}},
    }
    for report in (commit_report, scan_report):
        reply = requests.post(url, json=report, timeout=60)
        assert reply.status_code == 204 and reply.content == b"", reply.text
    assert _counter(node, "scan-report") == scans + 1
    assert _counter(node, "commit-report") == commits + 1
    kept = _reports(node, catalog_name, "t")
    assert kept.status_code == 200, kept.text
    assert [r["report"] for r in kept.json()["reports"]] == [scan_report, commit_report]
    assert all(isinstance(r["received-at-ms"], int) for r in kept.json()["reports"])
    # a renamed table keeps its reports (they belong to the table, not its name)
    catalog.rename_table(("db", "t"), ("db", "moved"))
    assert len(_reports(node, catalog_name, "moved").json()["reports"]) == 2


def test_the_last_reports_are_kept_newest_first(node: NodeProcess, catalog_name: str) -> None:
    http = Http(node.url, catalog_name)
    RestCatalog("k", uri=node.url, warehouse=catalog_name).create_namespace(("db",))
    assert http.call("POST", "/namespaces/db/tables", json={"name": "t", "schema": SCHEMA_JSON}).ok
    for files in range(KEEP + 3):
        body = _scan_report("db.t", -1, files)
        reply = http.call("POST", "/namespaces/db/tables/t/metrics", json=body)
        assert reply.status_code == 204, reply.text
    kept = [r["report"]["metrics"]["result-data-files"]["value"] for r in
            _reports(node, catalog_name, "t").json()["reports"]]  # fmt: skip
    assert kept == list(range(KEEP + 2, 2, -1))


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"report-type": "query-report", "table-name": "db.t"},
        {k: v for k, v in _scan_report("db.t", 1, 1).items() if k != "filter"},
        _scan_report("db.t", 1, 1, **{"schema-id": "zero"}),
        {**_scan_report("db.t", 1, 1), "metrics": {"result-data-files": {"unit": "count"}}},
        {"report-type": "commit-report", "table-name": "db.t", "snapshot-id": 1, "metrics": {}},
        {**_scan_report("db.t", 1, 1), "snapshot-id": 2**63},
    ],
    ids=[
        "empty", "unknown type", "no filter", "bad schema id", "bad counter",
        "commit without operation", "snapshot id past a long",
    ],
)  # fmt: skip
def test_a_bad_report_is_a_400_and_not_counted(
    node: NodeProcess, catalog_name: str, body: dict[str, Any]
) -> None:
    http = Http(node.url, catalog_name)
    RestCatalog("b", uri=node.url, warehouse=catalog_name).create_namespace(("db",))
    assert http.call("POST", "/namespaces/db/tables", json={"name": "t", "schema": SCHEMA_JSON}).ok
    counts = {kind: _counter(node, kind) for kind in ("scan-report", "commit-report")}
    assert_error(http.call("POST", "/namespaces/db/tables/t/metrics", json=body), 400)
    assert_error(http.call("POST", "/namespaces/db/tables/t/metrics", data=b"[1"), 400)
    assert counts == {kind: _counter(node, kind) for kind in counts}
    assert _reports(node, catalog_name, "t").json() == {"reports": []}


def test_a_report_on_a_missing_table_is_a_404(node: NodeProcess, catalog_name: str) -> None:
    http = Http(node.url, catalog_name)
    RestCatalog("m", uri=node.url, warehouse=catalog_name).create_namespace(("db",))
    scans = _counter(node, "scan-report")
    reply = http.call("POST", "/namespaces/db/tables/nope/metrics", json=_scan_report("x", 1, 1))
    assert_error(reply, 404, "NoSuchTableException")
    assert _counter(node, "scan-report") == scans
    assert_error(_reports(node, catalog_name, "nope"), 404)
    # the default catalog's table, without a prefix
    bare = f"{node.url}/v1/namespaces/db/tables/nope/metrics"
    assert_error(requests.post(bare, json=_scan_report("x", 1, 1), timeout=60), 404)


def test_config_advertises_exactly_the_endpoints_served(node: NodeProcess, tmp_path: Path) -> None:
    """Every endpoint ``/v1/config`` lists is a route of the node and every route under
    the prefix is listed (aiohttp's ``HEAD`` twins of ``GET`` routes aside); server-side
    scan planning is not implemented, so not advertised."""
    advertised = requests.get(f"{node.url}/v1/config", timeout=60).json()["endpoints"]
    app = create_app(ServerConfig(data_dir=tmp_path))
    served = {
        (r.method, r.resource.canonical)
        for r in app.router.routes()
        if r.resource is not None and r.resource.canonical.startswith("/v1/{prefix}/")
    }
    listed = {tuple(e.split(" ", 1)) for e in advertised}
    assert len(listed) == len(advertised)
    assert listed <= served, sorted(listed - served)
    head_twins = {("HEAD", t) for m, t in served if m == "GET"}
    assert served - listed <= head_twins, sorted(served - listed - head_twins)
    assert ("POST", "/v1/{prefix}/namespaces/{namespace}/tables/{table}/metrics") in listed
    assert not [e for e in advertised if e.endswith(("/plan", "/tasks"))]
    assert not [e for e in advertised if "/plan/" in e]
