"""``ETag`` and ``If-None-Match`` on table loads, with raw HTTP (as iceberg-js polls):
a current tag answers 304 with no body, a stale one 200 with the new tag; create,
register and commit answers carry the tag a later load answers."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from harness.node import NodeProcess
from tests.iceberg.support import SCHEMA, Http, assert_error

SCHEMA_JSON = json.loads(SCHEMA.model_dump_json())
TABLE = "/namespaces/db/tables/t"
PROPERTY = {"updates": [{"action": "set-properties", "updates": {"k": "v"}}]}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    root = tmp_path_factory.mktemp("etags")
    with NodeProcess(root / "data", log_path=root / "node.log") as process:
        yield process
    assert "Traceback" not in Path(process.log_path).read_text(errors="replace")


@pytest.fixture
def http(node: NodeProcess) -> Http:
    name = f"c{uuid.uuid4().hex[:10]}"
    reply = requests.post(
        f"{node.url}/api/v1/tenants/default/catalogs", json={"name": name}, timeout=60
    )
    assert reply.status_code == 201, reply.text
    http = Http(node.url, name)
    assert http.call("POST", "/namespaces", json={"namespace": ["db"]}).status_code == 200
    return http


def _create(http: Http, name: str = "t") -> requests.Response:
    reply = http.call("POST", "/namespaces/db/tables", json={"name": name, "schema": SCHEMA_JSON})
    assert reply.status_code == 200, reply.text
    return reply


def _load(http: Http, etag: str | None = None, **params: str) -> requests.Response:
    headers = {} if etag is None else {"If-None-Match": etag}
    return http.call("GET", TABLE, headers=headers, params=params)


def test_a_current_etag_is_a_304_and_a_stale_one_a_200_with_the_new_tag(http: Http) -> None:
    created = _create(http)
    loaded = _load(http)
    etag = loaded.headers["ETag"]
    assert etag.startswith('"') and etag.endswith('"'), etag  # strong: no W/
    assert created.headers["ETag"] == etag  # the create's tag is the load's
    unchanged = _load(http, etag)
    assert unchanged.status_code == 304 and unchanged.content == b""
    assert unchanged.headers["ETag"] == etag
    assert _load(http, f"W/{etag}").status_code == 304  # weak comparison, as for GET
    assert _load(http, f'"other", {etag}').status_code == 304
    assert _load(http, "*").status_code == 304
    committed = http.call("POST", TABLE, json=PROPERTY)
    assert committed.status_code == 200, committed.text
    stale = _load(http, etag)
    assert stale.status_code == 200 and stale.json()["metadata"]["properties"]["k"] == "v"
    assert stale.headers["ETag"] not in (etag, None)
    assert committed.headers["ETag"] == stale.headers["ETag"]  # the commit's tag is the load's
    assert _load(http, committed.headers["ETag"]).status_code == 304


def test_the_snapshots_filter_has_its_own_tag(http: Http) -> None:
    _create(http)
    everything, referenced = _load(http), _load(http, snapshots="refs")
    assert everything.headers["ETag"] != referenced.headers["ETag"]
    assert _load(http, everything.headers["ETag"], snapshots="refs").status_code == 200
    assert _load(http, referenced.headers["ETag"], snapshots="refs").status_code == 304


def test_a_load_with_access_delegation_has_its_own_tag(http: Http) -> None:
    """What an ``X-Iceberg-Access-Delegation`` header asks for changes the answer, so
    it changes the tag (spelled in any order or case, one delegation is one tag)."""
    _create(http)
    plain = _load(http).headers["ETag"]
    header = "X-Iceberg-Access-Delegation"
    delegated = http.call("GET", TABLE, headers={header: "vended-credentials,remote-signing"})
    assert delegated.status_code == 200, delegated.text
    tag = delegated.headers["ETag"]
    assert tag != plain
    again = {header: "Remote-Signing, vended-credentials", "If-None-Match": tag}
    assert http.call("GET", TABLE, headers=again).status_code == 304
    stale = {header: "vended-credentials,remote-signing", "If-None-Match": plain}
    assert http.call("GET", TABLE, headers=stale).status_code == 200
    assert _load(http, tag).status_code == 200  # the plain load is not the delegated one


def test_register_and_an_idempotent_replay_carry_the_loads_tag(http: Http) -> None:
    key = {"Idempotency-Key": f"k-{uuid.uuid4().hex}"}
    body = {"name": "t", "schema": SCHEMA_JSON}
    first = http.call("POST", "/namespaces/db/tables", json=body, headers=key)
    replay = http.call("POST", "/namespaces/db/tables", json=body, headers=key)
    assert first.status_code == replay.status_code == 200, replay.text
    assert replay.headers["ETag"] == first.headers["ETag"] == _load(http).headers["ETag"]
    location = _load(http).json()["metadata-location"]
    again = {"name": "t", "metadata-location": location, "overwrite": True}
    registered = http.call("POST", "/namespaces/db/register", json=again)
    assert registered.status_code == 200, registered.text
    assert registered.headers["ETag"] == _load(http).headers["ETag"]


def test_an_etag_on_a_missing_table_is_still_a_404(http: Http) -> None:
    assert_error(_load(http, "*"), 404, "NoSuchTableException")
