"""Pages of other origins against the default embedded node (loopback, auth off).

A browser lets any page send a POST anywhere, the node on the user's machine included;
the API takes a JSON body whatever its content type, so no preflight stops it. A page
the user merely visited created namespaces and renamed tables. Now such a write is a
403 (``metastore.http.origins``): here real Chromium visits a page served from another
origin that tries, and the catalog is checked afterwards. The console itself, on the
node's own origin, still writes.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from playwright.sync_api import Browser

from harness.node import NodeProcess
from harness.process import free_port
from tests.console.conftest import console_node

NAMESPACES = "/api/v1/tenants/default/catalogs/default/namespaces"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    with console_node(tmp_path_factory.mktemp("cross-origin")) as process:
        reply = requests.post(process.url + NAMESPACES, json={"namespace": ["shop"]}, timeout=30)
        assert reply.status_code == 201, reply.text
        yield process


def _serve(page: str) -> tuple[http.server.HTTPServer, str]:
    body = page.encode()

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", free_port()), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://localhost:{server.server_port}/"


def _namespaces(node: NodeProcess) -> list[list[str]]:
    reply = requests.get(node.url + NAMESPACES, timeout=30)
    assert reply.status_code == 200, reply.text
    return [n["namespace"] for n in reply.json()["namespaces"]]


def test_a_page_of_another_origin_cannot_write(node: NodeProcess, browser: Browser) -> None:
    script = f"""<!doctype html><script>
      const post = (path, body) => fetch("{node.url}" + path,
          {{method: "POST", mode: "no-cors", body: JSON.stringify(body)}});
      (async () => {{
        await post("{NAMESPACES}", {{namespace: ["csrf"]}});
        await post("/v1/namespaces/shop", {{removals: [], updates: {{owner: "attacker"}}}});
        document.title = "sent";
      }})();
    </script>"""
    server, url = _serve(script)
    try:
        page = browser.new_page()
        page.goto(url)
        page.wait_for_function("document.title === 'sent'")
        page.close()
    finally:
        server.shutdown()
        server.server_close()
    assert _namespaces(node) == [["shop"]]
    shop = requests.get(f"{node.url}/v1/namespaces/shop", timeout=30).json()
    assert "owner" not in shop["properties"], shop


def test_writes_without_an_origin_or_from_the_nodes_own_go_through(node: NodeProcess) -> None:
    """Clients that are not browsers send no Origin; the console sends the node's own."""
    for name, headers in (("plain", {}), ("own", {"Origin": node.url})):
        reply = requests.post(
            node.url + NAMESPACES, json={"namespace": [name]}, headers=headers, timeout=30
        )
        assert reply.status_code == 201, reply.text
    refused = requests.post(
        node.url + NAMESPACES,
        json={"namespace": ["evil"]},
        headers={"Origin": "http://evil.example"},
        timeout=30,
    )
    assert refused.status_code == 403 and "cross-origin" in refused.text, refused.text
    assert ["evil"] not in _namespaces(node)


@pytest.mark.parametrize(
    "host", ["attacker.example", "attacker.example:80", "10.0.0.1", "[::2]", "[bad", "a]b"]
)
def test_a_name_that_is_not_loopback_gets_nothing(node: NodeProcess, host: str) -> None:
    """A domain re-pointed at 127.0.0.1 (DNS rebinding) is same-origin with the node in
    the browser's eyes: its pages could read everything. Its name is refused."""
    reply = requests.get(node.url + NAMESPACES, headers={"Host": host}, timeout=30)
    assert reply.status_code == 403 and "loopback names" in reply.text, reply.text


@pytest.mark.parametrize("host", ["localhost", "app.localhost", "127.0.0.1", "127.1.2.3", "[::1]"])
def test_loopback_names_are_answered(node: NodeProcess, host: str) -> None:
    port = node.url.rsplit(":", 1)[1]
    reply = requests.get(node.url + NAMESPACES, headers={"Host": f"{host}:{port}"}, timeout=30)
    assert reply.status_code == 200, reply.text


def test_a_node_with_auth_on_takes_any_name(tmp_path: Path) -> None:
    env = {"METASTORE_AUTH": "on", "METASTORE_AUTH_CLIENTS": "root:root-secret-1"}
    with console_node(tmp_path, env) as process:
        reply = requests.get(
            process.url + "/health", headers={"Host": "catalog.example"}, timeout=30
        )
        assert reply.status_code == 200, reply.text
