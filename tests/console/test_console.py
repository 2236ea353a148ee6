"""The web console in headless Chromium against a real node (authentication off).

Data is made the way clients make it (PyIceberg through the Iceberg REST API, the
native API over HTTP); the browser then shows it. Each test fails on any browser
console error or uncaught exception (``conftest.page``).
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote

import pyarrow as pa
import pytest
import requests
from playwright.sync_api import Page, expect
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType
from pyiceberg.view.metadata import SQLViewRepresentation, ViewVersion

from harness.node import NodeProcess
from tests.console.conftest import console_node

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "region", StringType(), required=False),
)
SPEC = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "region"))
ROWS = pa.table(
    {"id": [1, 2], "region": ["eu", "us"]},
    schema=pa.schema([pa.field("id", pa.int64(), False), pa.field("region", pa.string())]),
)
NATIVE = "/api/v1/tenants/default/catalogs/default"
HOSTILE = '<img src=x onerror="window.pwned=1">'


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    with console_node(tmp_path_factory.mktemp("console")) as process:
        yield process
    assert "Traceback" not in process.log_path.read_text(errors="replace")


@pytest.fixture(scope="module")
def iceberg(node: NodeProcess) -> RestCatalog:
    return RestCatalog("console", uri=node.url, warehouse="default")


def hash_path(*parts: str) -> str:
    return "#/" + "/".join(quote(p, safe="") for p in parts)


def test_every_page_shows_what_the_apis_hold(
    page: Page, node: NodeProcess, iceberg: RestCatalog
) -> None:
    iceberg.create_namespace(("shop",), {"owner": "team-a"})
    iceberg.create_namespace(("shop", "eu"))
    table = iceberg.create_table("shop.orders", SCHEMA, partition_spec=SPEC)
    table.append(ROWS)
    table.append(ROWS)
    iceberg.create_view("shop.recent", SCHEMA, _view_version("select id from shop.orders"))

    page.goto(node.url + "/")
    expect(page.locator("#catalogs")).to_contain_text("default")  # one tenant: its catalogs
    page.goto(node.url + "/" + hash_path("t", "default", "c", "default", "ns", "shop"))
    expect(page.locator("#tables")).to_contain_text("shop.orders")
    expect(page.locator("#namespaces")).to_contain_text("shop.eu")
    expect(page.locator("main")).to_contain_text("team-a")

    page.goto(
        node.url + "/" + hash_path("t", "default", "c", "default", "tables", "shop", "orders")
    )
    expect(page.locator("#schema")).to_contain_text("region")
    expect(page.locator("#partition-spec")).to_contain_text("identity")
    expect(page.locator("#snapshots tbody tr")).to_have_count(2)
    expect(page.locator("#timeline .dot")).to_have_count(2)
    expect(page.locator("#metadata-location")).to_have_text(table.refresh().metadata_location)
    current = table.current_snapshot()
    assert current is not None
    # 64-bit snapshot ids shown exactly (a browser's numbers would round them)
    expect(page.locator("#snapshots")).to_contain_text(str(current.snapshot_id))

    page.goto(node.url + "/" + hash_path("t", "default", "c", "default", "views", "shop", "recent"))
    expect(page.locator("main")).to_contain_text("select id from shop.orders")
    expect(page.locator("#schema")).to_contain_text("region")

    page.goto(node.url + "/#/cluster")
    expect(page.locator("#embedded")).to_contain_text("Embedded mode")


def _view_version(sql: str) -> ViewVersion:
    return ViewVersion(
        version_id=1,
        schema_id=0,
        timestamp_ms=1,
        summary={"engine-name": "test"},
        representations=[SQLViewRepresentation(type="sql", sql=sql, dialect="spark")],
        default_namespace=["shop"],
    )


def test_navigation_by_clicks(page: Page, node: NodeProcess, iceberg: RestCatalog) -> None:
    iceberg.create_namespace(("nav",))
    iceberg.create_namespace(("nav", "inner"))
    iceberg.create_table("nav.items", SCHEMA)

    page.goto(node.url + "/")
    page.locator("#catalogs a", has_text="default").click()
    expect(page.locator("h1")).to_have_text("Catalog default")
    page.locator('#tree li[data-ns="nav"] > button.toggle').click()
    expect(page.locator('#tree li[data-ns="nav"] > ul')).to_contain_text("inner")
    page.locator('#tree li[data-ns="nav"] > a').click()
    expect(page.locator("h1")).to_have_text("Namespace nav")
    page.locator("#tables a", has_text="nav.items").click()
    expect(page.locator("h1")).to_have_text("Table nav.items")
    assert page.url.endswith(hash_path("t", "default", "c", "default", "tables", "nav", "items"))
    page.locator("nav.tabs a", has_text="History").click()
    expect(page.locator("#history")).to_contain_text("create table")
    page.go_back()
    expect(page.locator("h1")).to_have_text("Table nav.items")


def test_a_commit_through_the_api_appears_in_the_live_feed_and_the_history(
    page: Page, node: NodeProcess, iceberg: RestCatalog
) -> None:
    iceberg.create_namespace(("live_ns",))
    table = iceberg.create_table(("live_ns", "events"), SCHEMA)
    page.goto(node.url + "/" + hash_path("t", "default", "c", "default", "feed"))
    expect(page.locator("#feed-status")).to_have_text("live")

    table.append(ROWS)  # a commit made by a client while the page is open
    snapshot = table.current_snapshot()
    assert snapshot is not None
    row = page.locator("#feed tbody tr", has_text="live_ns.events")
    expect(row).to_contain_text("update")
    expect(row).to_contain_text(str(snapshot.snapshot_id))

    row.locator("a.mono").click()  # the commit's diff
    expect(page.locator("h1")).to_contain_text("Commit")
    changes = page.locator("#changes")
    expect(changes).to_contain_text("iceberg.current-snapshot-id")
    expect(changes).to_contain_text(str(snapshot.snapshot_id))

    page.locator("nav.tabs a", has_text="History").click()
    expect(page.locator("#history tbody tr").first).to_contain_text("live_ns.events")


def test_names_and_properties_are_shown_as_text_never_run(
    page: Page, node: NodeProcess, iceberg: RestCatalog
) -> None:
    iceberg.create_namespace(("xss",), {"note": HOSTILE})
    iceberg.create_table("xss.t", SCHEMA, properties={"comment": HOSTILE})
    page.goto(node.url + "/" + hash_path("t", "default", "c", "default", "ns", "xss"))
    expect(page.locator("main")).to_contain_text(HOSTILE)
    page.goto(node.url + "/" + hash_path("t", "default", "c", "default", "tables", "xss", "t"))
    expect(page.locator("main")).to_contain_text(HOSTILE)
    assert page.locator("main img").count() == 0
    assert page.evaluate("window.pwned") is None


def test_assets_are_served_with_a_strict_policy_and_nothing_else_is(node: NodeProcess) -> None:
    index = requests.get(node.url + "/", timeout=10)
    assert index.status_code == 200
    assert "script-src 'self'" in index.headers["Content-Security-Policy"]
    assert index.headers["X-Frame-Options"] == "DENY"
    script = requests.get(node.url + "/console/app.js", timeout=10)
    assert script.status_code == 200 and script.headers["Content-Type"].startswith(
        "text/javascript"
    )
    for probe in ("/console/routes.py", "/console/..%2f__init__.py", "/console/%2e%2e/routes.py"):
        refused = requests.get(node.url + probe, timeout=10)
        assert refused.status_code == 404, probe
        assert refused.json()["error"]["code"] == 404


def test_the_native_api_s_commit_diff_refuses_what_is_not_a_commit(node: NodeProcess) -> None:
    for raw in ("abc", "²", "1" * 21, "123"):
        reply = requests.get(f"{node.url}{NATIVE}/commits/{quote(raw)}/diff", timeout=10)
        assert reply.status_code == 404, raw
        assert reply.json()["error"]["type"]


def test_a_dropped_table_is_restored_from_the_namespace_page(
    page: Page, node: NodeProcess, iceberg: RestCatalog
) -> None:
    iceberg.create_namespace(("kept",))
    table = iceberg.create_table("kept.orders", SCHEMA)
    table.append(ROWS)
    iceberg.drop_table("kept.orders")  # no purge: kept, restorable

    page.goto(node.url + "/" + hash_path("t", "default", "c", "default", "ns", "kept"))
    expect(page.locator("#dropped")).to_contain_text("orders")
    expect(page.locator("#tables")).not_to_contain_text("kept.orders")
    page.locator('#dropped button[data-undrop="orders"]').click()
    expect(page.locator("#tables")).to_contain_text("kept.orders")
    expect(page.locator("#dropped")).to_have_count(0)
    assert iceberg.load_table("kept.orders").scan().to_arrow().num_rows == ROWS.num_rows
