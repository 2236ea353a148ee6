"""The web console with authentication on: sign-in with client credentials, and a
principal sees only what its grants let it read (every call is the principal's own)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pytest
import requests
from playwright.sync_api import Page, expect
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from harness.node import NodeProcess
from tests.console.conftest import Console, console_node

ROOT = ("root", "root-secret-1")
READER_SECRET = "reader-secret-long-1"
TENANT = "/api/v1/tenants/default"
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))
ROWS = pa.table({"id": [1, 2, 3]})


class Admin:
    def __init__(self, url: str) -> None:
        self.url = url
        form = {"grant_type": "client_credentials", "client_id": ROOT[0], "client_secret": ROOT[1]}
        reply = requests.post(f"{url}/v1/oauth/tokens", data=form, timeout=10)
        reply.raise_for_status()
        self.headers = {"Authorization": f"Bearer {reply.json()['access_token']}"}

    def post(self, path: str, body: dict[str, Any]) -> Any:
        reply = requests.post(self.url + path, json=body, headers=self.headers, timeout=10)
        assert reply.status_code in (200, 201), reply.text
        return reply.json()


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    env = {
        "METASTORE_AUTH": "on",
        "METASTORE_AUTH_CLIENTS": f"{ROOT[0]}:{ROOT[1]}",
        "METASTORE_AUTH_ADMINS": ROOT[0],
    }
    with console_node(tmp_path_factory.mktemp("console-auth"), env) as process:
        yield process
    assert "Traceback" not in process.log_path.read_text(errors="replace")


@pytest.fixture(scope="module")
def world(node: NodeProcess) -> dict[str, Any]:
    """``shop.visible`` readable by the principal ``reader``; ``shop.secret`` not."""
    iceberg = RestCatalog(
        "root",
        uri=node.url,
        warehouse="default",
        credential=":".join(ROOT),
        **{"oauth2-server-uri": f"{node.url}/v1/oauth/tokens"},
    )
    iceberg.create_namespace(("shop",))
    visible = iceberg.create_table("shop.visible", SCHEMA)
    secret = iceberg.create_table("shop.secret", SCHEMA)
    secret.append(ROWS)
    admin = Admin(node.url)
    reader = admin.post(f"{TENANT}/principals", {"name": "reader", "secret": READER_SECRET})
    admin.post(f"{TENANT}/principal-roles", {"name": "readers"})
    admin.post(f"{TENANT}/principal-roles/readers/principals", {"principal": "reader"})
    roles = f"{TENANT}/catalogs/default/catalog-roles"
    admin.post(roles, {"name": "shop_readers"})
    for privilege, kind, path in (
        ("CATALOG_READ_HISTORY", "catalog", []),
        ("NAMESPACE_READ_PROPERTIES", "namespace", ["shop"]),
        ("TABLE_READ_DATA", "table", ["shop", "visible"]),
    ):
        body = {"privilege": privilege, "securable": {"kind": kind, "path": path}}
        admin.post(f"{roles}/shop_readers/grants", body)
    admin.post(
        f"{TENANT}/principal-roles/readers/catalog-roles",
        {"catalog": "default", "catalog-role": "shop_readers"},
    )
    return {"iceberg": iceberg, "visible": visible, "secret": secret, "reader": str(reader["id"])}


def sign_in(page: Page, client_id: str, secret: str) -> None:
    page.fill("#client-id", client_id)
    page.fill("#client-secret", secret)
    page.click("#login button[type=submit]")


def signed_in(page: Page, client_id: str) -> None:
    """Signed in and on the landing page (the one tenant's catalogs), so a test's next
    navigation is not overtaken by the landing page's own."""
    sign_in(page, client_id, READER_SECRET)
    expect(page.locator("#principal")).to_have_text("default/reader")
    expect(page.locator("#catalogs")).to_contain_text("default")


def test_sign_in_then_only_granted_data_is_shown(
    page: Page, console: Console, node: NodeProcess, world: dict[str, Any]
) -> None:
    page.goto(node.url + "/")
    expect(page.locator("#login")).to_be_visible()
    console.expected.append("status of 401")  # the refused sign-in below
    sign_in(page, world["reader"], "not-the-secret-at-all")
    expect(page.locator("#login-error")).not_to_be_empty()

    signed_in(page, world["reader"])
    page.goto(node.url + "/#/t/default/c/default/ns/shop")
    expect(page.locator("#tables")).to_contain_text("shop.visible")
    expect(page.locator("#tables")).not_to_contain_text("shop.secret")

    page.goto(node.url + "/#/t/default/c/default/history")
    secret_commit = page.locator("#history tbody tr", has_text="create table").filter(
        has_text="shop.secret"
    )
    secret_commit.locator("a.mono").click()
    expect(page.locator("#changes")).to_contain_text("You may not read this entity.")
    location = world["secret"].refresh().metadata_location
    expect(page.locator("main")).not_to_contain_text(location)

    page.goto(node.url + "/#/cluster")
    expect(page.locator("main")).to_contain_text("shown to service admins")

    page.locator("#who button", has_text="Sign out").click()
    expect(page.locator("#login")).to_be_visible()


def test_the_live_feed_shows_only_granted_entities(
    page: Page, node: NodeProcess, world: dict[str, Any]
) -> None:
    page.goto(node.url + "/")
    signed_in(page, world["reader"])
    page.goto(node.url + "/#/t/default/c/default/feed")
    expect(page.locator("#feed-status")).to_have_text("live")
    world["secret"].append(ROWS)  # first the one the reader may not see, then its own
    world["visible"].append(ROWS)
    expect(page.locator("#feed tbody tr", has_text="shop.visible")).to_have_count(1)
    # events arrive in commit order: had the secret table's been shown, it would be here
    expect(page.locator("#feed")).not_to_contain_text("shop.secret")


def test_a_direct_link_to_a_denied_table_shows_the_refusal(
    page: Page, console: Console, node: NodeProcess, world: dict[str, Any]
) -> None:
    page.goto(node.url + "/")
    signed_in(page, world["reader"])
    console.expected.append("status of 403")  # the load this test provokes
    page.goto(node.url + "/#/t/default/c/default/tables/shop/" + quote("secret"))
    expect(page.locator("main")).to_contain_text("403")
    expect(page.locator("main")).not_to_contain_text(world["secret"].refresh().metadata_location)
