"""The Iceberg API's namespace separator (``METASTORE_ICEBERG_NAMESPACE_SEPARATOR``)
against one real node with authentication on: ``/v1/config`` advertises it, PyIceberg
picks it up and works with it, 0x1F keeps working, authorization decodes a path's
namespace exactly as the handler does (hostile mixes of both separators included),
names holding the separator are refused once it is set, and bad settings stop the node.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog

from harness.node import NodeProcess
from metastore.config.server_config import ServerConfig
from metastore.util.setting_rules import ConfigError
from tests.config.test_config import assert_refused, serve
from tests.iceberg.support import assert_error

TENANT = "default"
ROOT = ("root", "root-secret-1")
ALICE = ("alice", "alice-secret-1")
GRANTED = ("p", "q")  # alice reads this namespace (and what lies inside it), nothing else
NAMESPACES = [("p",), ("p", "q"), ("p", "q", "r"), ("s",), ("s", "q"), ("q",)]
SCHEMA = pa.schema([pa.field("id", pa.int64())])


@dataclass(frozen=True)
class Node:
    url: str
    catalog: str
    tokens: dict[str, str]

    def call(self, who: str, method: str, path: str, **kwargs: Any) -> requests.Response:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"}
        return requests.request(method, self.url + path, headers=headers, timeout=60, **kwargs)

    def ok(self, path: str, body: dict[str, Any], status: int = 201) -> Any:
        reply = self.call("root", "POST", path, json=body)
        assert reply.status_code == status, reply.text
        return reply.json()

    def client(self, who: tuple[str, str]) -> RestCatalog:
        return RestCatalog(
            "sep",
            uri=self.url,
            warehouse=self.catalog,
            credential=":".join(who),
            **{"oauth2-server-uri": f"{self.url}/v1/oauth/tokens"},
        )


def _token(url: str, who: tuple[str, str]) -> str:
    form = {"grant_type": "client_credentials", "client_id": who[0], "client_secret": who[1]}
    reply = requests.post(f"{url}/v1/oauth/tokens", data=form, timeout=30)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["access_token"])


def _grant_alice(node: Node) -> None:
    tenant, catalog = f"/api/v1/tenants/{TENANT}", node.catalog
    node.ok(f"{tenant}/principal-roles", {"name": "readers"})
    node.ok(f"{tenant}/principal-roles/readers/principals", {"principal": ALICE[0]})
    node.ok(f"{tenant}/catalogs/{catalog}/catalog-roles", {"name": "readers"})
    link = {"catalog": catalog, "catalog-role": "readers"}
    node.ok(f"{tenant}/principal-roles/readers/catalog-roles", link)
    securable = {"kind": "namespace", "path": list(GRANTED)}
    for privilege in ("NAMESPACE_READ_PROPERTIES", "TABLE_READ_DATA"):
        grant = {"privilege": privilege, "securable": securable}
        node.ok(f"{tenant}/catalogs/{catalog}/catalog-roles/readers/grants", grant)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    root = tmp_path_factory.mktemp("namespace-separator")
    env = {
        "METASTORE_AUTH": "on",
        "METASTORE_AUTH_CLIENTS": ",".join(f"{c}:{s}" for c, s in (ROOT, ALICE)),
        "METASTORE_AUTH_ADMINS": ROOT[0],
        "METASTORE_ICEBERG_NAMESPACE_SEPARATOR": "%2E",
    }
    process = NodeProcess(root / "data", log_path=root / "node.log", env=env)
    with process:
        tokens = {who[0]: _token(process.url, who) for who in (ROOT, ALICE)}
        here = Node(process.url, f"c{uuid.uuid4().hex[:10]}", tokens)
        here.ok(f"/api/v1/tenants/{TENANT}/catalogs", {"name": here.catalog})
        client = here.client(ROOT)
        for levels in NAMESPACES:
            client.create_namespace(levels)
        for levels in (("p", "q"), ("s", "q")):
            client.create_table((*levels, "t"), SCHEMA)
        _grant_alice(here)
        yield here
    log = process.log_path.read_text(errors="replace")
    assert "Traceback" not in log, process.log_tail(80)


def test_config_advertises_the_separator_url_encoded(node: Node) -> None:
    reply = node.call("root", "GET", f"/v1/config?warehouse={node.catalog}")
    assert reply.status_code == 200, reply.text
    assert reply.json()["overrides"]["namespace-separator"] == "%2E"


def test_pyiceberg_picks_the_separator_up_and_works_with_it(node: Node) -> None:
    client = node.client(ROOT)
    assert client._namespace_separator == "."  # what the client joins levels with
    base = f"n{uuid.uuid4().hex[:8]}"
    client.create_namespace((base,))
    client.create_namespace((base, "child"))
    assert (base, "child") in client.list_namespaces((base,))
    table = client.create_table((base, "child", "events"), SCHEMA)
    table.append(pa.table({"id": pa.array([1, 2], pa.int64())}))
    assert client.list_tables((base, "child")) == [(base, "child", "events")]
    loaded = client.load_table((base, "child", "events"))
    assert loaded.name() == (base, "child", "events")
    assert loaded.scan().to_arrow()["id"].to_pylist() == [1, 2]
    # a client that joins levels with 0x1F (the default) names the same table
    raw = node.call("root", "GET", f"/v1/{node.catalog}/namespaces/{base}%1Fchild/tables/events")
    assert raw.status_code == 200, raw.text
    assert raw.json()["metadata-location"] == loaded.metadata_location
    listed = node.call("root", "GET", f"/v1/{node.catalog}/namespaces?parent={base}%1Fchild")
    assert listed.status_code == 200 and listed.json()["namespaces"] == [], listed.text


def _levels(raw: str) -> tuple[str, ...]:
    """What a path's namespace names: URL-decoded, then split on 0x1F and on '.'."""
    return tuple(unquote(raw).replace(".", "\x1f").split("\x1f"))


HOSTILE = [
    "p.q",
    "p%1Fq",
    "p%2Eq",
    "p%2eq",
    "s.q",
    "s%1Fq",
    "s%2Eq",
    "p.q%1Fr",
    "p%1Fq.r",
    "p%1Fq%2Er",
    "s%1Fq.r",
    "p.q.x",
    "p%1Fq%1Fx",
    "q",
    "p",
    "q.p",
    "p..q",
    "p%1F%2Eq",
    "p.%1Fq",
    ".p.q",
    "p.q.",
    "p.q%1F",
    "%1Fp.q",
    "p%252Eq",
    "p%2Fq",
]


def _expected(levels: tuple[str, ...]) -> int:
    if "" in levels:
        return 400
    if levels[: len(GRANTED)] != GRANTED:
        return 403  # outside alice's grant: refused before anything is looked up
    return 200 if levels in NAMESPACES else 404


@pytest.mark.parametrize("raw", HOSTILE)
def test_authorization_names_the_namespace_the_handler_acts_on(node: Node, raw: str) -> None:
    """Alice reads (p, q) and what is inside it only: every path she sends is answered
    for the namespace both separators name, so none reaches another namespace."""
    levels = _levels(raw)
    status = _expected(levels)
    reply = node.call("alice", "GET", f"/v1/{node.catalog}/namespaces/{raw}")
    if status != 200:
        assert_error(reply, status)
    else:
        assert reply.status_code == 200, reply.text
        assert tuple(reply.json()["namespace"]) == levels
    # the same namespace through a table route (the table exists in (p, q) and (s, q))
    table = node.call("alice", "GET", f"/v1/{node.catalog}/namespaces/{raw}/tables/t")
    if levels in (("p", "q"), ("s", "q")):
        mine = node.call("root", "GET", f"/v1/{node.catalog}/namespaces/{raw}/tables/t")
        assert mine.status_code == 200, mine.text
        location = mine.json()["metadata-location"]
        assert f"/{levels[0]}/{levels[1]}/t" in location, location  # root's: that table
        if levels == GRANTED:
            assert table.status_code == 200, table.text
            assert table.json()["metadata-location"] == location
        else:
            assert_error(table, 403)
    elif status != 400:
        assert table.status_code in (403, 404), table.text
        assert table.status_code == 404 or levels[: len(GRANTED)] != GRANTED, table.text
    else:
        assert_error(table, 400)


@pytest.mark.parametrize("raw", ["p", "p.q", "p%1Fq", "s%2Eq", "p.%1Fq"])
def test_a_listing_parent_is_decoded_as_a_path_is(node: Node, raw: str) -> None:
    levels = _levels(raw)
    reply = node.call("root", "GET", f"/v1/{node.catalog}/namespaces?parent={raw}")
    if "" in levels:
        assert_error(reply, 400)
        return
    assert reply.status_code == 200, reply.text
    children = {tuple(n) for n in reply.json()["namespaces"]}
    assert children == {n for n in NAMESPACES if n[:-1] == levels}


def test_names_holding_the_separator_are_refused_once_set(node: Node) -> None:
    head = node.call("root", "GET", f"/api/v1/tenants/{TENANT}/catalogs/{node.catalog}/ref")
    before = head.json()["head"]
    iceberg = node.call(
        "root", "POST", f"/v1/{node.catalog}/namespaces", json={"namespace": ["p", "a.b"]}
    )
    assert_error(iceberg, 400)
    assert "separates namespace levels" in iceberg.json()["error"]["message"]
    native = f"/api/v1/tenants/{TENANT}/catalogs/{node.catalog}"
    one = node.call("root", "POST", f"{native}/namespaces", json={"namespace": ["a.b"]})
    assert_error(one, 400)
    batch = {"changes": [{"action": "create", "entity": {"kind": "namespace", "path": ["x.y"]}}]}
    many = node.call("root", "POST", f"{native}/commit", json=batch)
    assert_error(many, 400)
    after = node.call("root", "GET", f"{native}/ref")
    assert after.json()["head"] == before  # nothing written
    # the native API keeps 0x1F alone: a '.' in its paths is part of a name
    dotted = node.call("root", "GET", f"{native}/namespaces/p.q")
    assert dotted.status_code == 404, dotted.text


@pytest.mark.parametrize("value", ["%1F", "\x1f", "%2E", ".", "%2e", "~", "%7E", "-", "_"])
def test_accepted_separators(value: str) -> None:
    config = ServerConfig.load({}, env={"METASTORE_ICEBERG_NAMESPACE_SEPARATOR": value})
    assert config.namespace_separator == unquote(value)


@pytest.mark.parametrize(
    "value", ["", "%2F", "/", "a", "..", "%00", "%252E", "%", "%2", "::", ",", "%20", "é"]
)
def test_bad_separators_are_refused(value: str) -> None:
    with pytest.raises(ConfigError) as refused:
        ServerConfig.load({}, env={"METASTORE_ICEBERG_NAMESPACE_SEPARATOR": value})
    message = str(refused.value)
    assert message.startswith("METASTORE_ICEBERG_NAMESPACE_SEPARATOR: must be %1F"), message


def test_serve_refuses_a_bad_separator_with_one_line(tmp_path: Path) -> None:
    done = serve(tmp_path, env={"METASTORE_ICEBERG_NAMESPACE_SEPARATOR": "%2F"})
    assert_refused(done, "METASTORE_ICEBERG_NAMESPACE_SEPARATOR", "'%2F'")
    assert not (tmp_path / "data").exists()


def test_without_the_setting_nothing_changes(tmp_path: Path) -> None:
    """The default: 0x1F alone separates levels, '.' is part of a name, /v1/config says
    nothing (clients keep their own default, 0x1F)."""
    with NodeProcess(tmp_path / "data", log_path=tmp_path / "node.log") as process:
        config = requests.get(f"{process.url}/v1/config", timeout=60)
        assert config.status_code == 200, config.text
        assert "namespace-separator" not in config.json()["overrides"]
        client = RestCatalog("plain", uri=process.url)
        assert client._namespace_separator == "\x1f"
        client.create_namespace(("a.b",))
        client.create_namespace(("a.b", "c"))
        assert client.list_namespaces(("a.b",)) == [("a.b", "c")]
        one = requests.get(f"{process.url}/v1/namespaces/a.b", timeout=60)
        assert one.status_code == 200 and one.json()["namespace"] == ["a.b"], one.text
        two = requests.get(f"{process.url}/v1/namespaces/a.b%1Fc", timeout=60)
        assert two.status_code == 200 and two.json()["namespace"] == ["a.b", "c"], two.text
