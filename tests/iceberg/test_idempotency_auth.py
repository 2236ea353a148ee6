"""Idempotency-Key replays the first outcome; OAuth2 client credentials and bearer tokens."""

from __future__ import annotations

import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import UnauthorizedError

from tests.iceberg.conftest import Server
from tests.iceberg.support import SCHEMA, Http, assert_error, rows

KEY = {"Idempotency-Key": "018f6c1e-7d3a-7b1c-9f00-000000000001"}


def test_retried_mutations_return_the_first_outcome(
    iceberg_server: Server, catalog_name: str, catalog: RestCatalog
) -> None:
    http = Http(iceberg_server.url, catalog_name)
    body = {"namespace": ["db"], "properties": {"a": "1"}}
    first = http.call("POST", "/namespaces", json=body, headers=KEY)
    again = http.call("POST", "/namespaces", json=body, headers=KEY)
    assert first.status_code == again.status_code == 200
    assert first.json() == again.json()
    assert_error(http.call("POST", "/namespaces", json=body), 409, "AlreadyExistsException")
    other = http.call("POST", "/namespaces/db/properties", json={"updates": {}}, headers=KEY)
    assert_error(other, 400)  # the key belongs to another request

    table = catalog.create_table(("db", "t"), SCHEMA)
    path = http.table_path(("db",), "t")
    change = {
        "requirements": [{"type": "assert-table-uuid", "uuid": str(table.metadata.table_uuid)}],
        "updates": [{"action": "set-properties", "updates": {"step": "1"}}],
    }
    key = {"Idempotency-Key": "commit-1"}
    committed = http.call("POST", path, json=change, headers=key)
    assert committed.status_code == 200, committed.text
    catalog.load_table(("db", "t")).append(rows([1]))  # the table moves on
    head = http.head_commit()
    retried = http.call("POST", path, json=change, headers=key)
    assert retried.status_code == 200
    assert retried.json()["metadata-location"] == committed.json()["metadata-location"]
    assert retried.json()["metadata"] == committed.json()["metadata"]
    assert http.head_commit() == head  # the retry wrote nothing

    drop = {"Idempotency-Key": "drop-1"}
    assert http.call("DELETE", path, headers=drop).status_code == 204
    assert http.call("DELETE", path, headers=drop).status_code == 204
    assert_error(http.call("DELETE", path), 404, "NoSuchTableException")


def test_a_key_reused_for_another_body_or_query_is_refused_and_writes_nothing(
    iceberg_server: Server, catalog_name: str, catalog: RestCatalog
) -> None:
    http = Http(iceberg_server.url, catalog_name)
    key = {"Idempotency-Key": "reused-1"}
    first = http.call("POST", "/namespaces", json={"namespace": ["a"]}, headers=key)
    assert first.status_code == 200, first.text
    head = http.head_commit()
    other = http.call("POST", "/namespaces", json={"namespace": ["b"]}, headers=key)
    assert_error(other, 400)  # not the first request's 200
    assert http.head_commit() == head
    assert_error(http.call("GET", "/namespaces/b"), 404, "NoSuchNamespaceException")
    assert http.call("POST", "/namespaces", json={"namespace": ["b"]}).status_code == 200

    catalog.create_table(("a", "t"), SCHEMA)
    path = http.table_path(("a",), "t")
    drop = {"Idempotency-Key": "drop-q"}
    kept = http.call("DELETE", path, params={"purgeRequested": "false"}, headers=drop)
    assert kept.status_code == 204, kept.text
    purge = http.call("DELETE", path, params={"purgeRequested": "true"}, headers=drop)
    assert_error(purge, 400)  # another query is another request


def test_tokens_are_required_when_auth_is_on(secured_server: Server) -> None:
    url = secured_server.url
    assert requests.get(f"{url}/health", timeout=30).status_code == 200
    for headers in ({}, {"Authorization": "Bearer None"}, {"Authorization": "Bearer x.y"}):
        reply = requests.get(f"{url}/v1/config", headers=headers, timeout=30)
        assert_error(reply, 401, "NotAuthorizedException")
    assert_error(requests.get(f"{url}/api/v1/tenants", timeout=30), 401)

    form = {"grant_type": "client_credentials", "client_id": "alice", "client_secret": "wrong"}
    refused = requests.post(f"{url}/v1/oauth/tokens", data=form, timeout=30)
    assert refused.status_code == 401 and refused.json()["error"] == "invalid_client"
    form["client_secret"] = "s3cret-alice"
    token = requests.post(f"{url}/v1/oauth/tokens", data=form, timeout=30).json()
    assert token["token_type"] == "bearer" and token["expires_in"] > 0
    bearer = {"Authorization": f"Bearer {token['access_token']}"}
    assert requests.get(f"{url}/v1/config", headers=bearer, timeout=30).status_code == 200
    forged = {"Authorization": f"Bearer {token['access_token'][:-2]}xx"}
    assert_error(requests.get(f"{url}/v1/config", headers=forged, timeout=30), 401)

    with pytest.raises(UnauthorizedError):
        RestCatalog("anonymous", uri=url)
    client = RestCatalog(
        "alice",
        uri=url,
        credential="alice:s3cret-alice",
        **{"oauth2-server-uri": f"{url}/v1/oauth/tokens"},
    )
    client.create_namespace(("secure",))
    client.create_table(("secure", "t"), SCHEMA).append(rows([1]))
    assert client.load_table(("secure", "t")).scan().to_arrow()["id"].to_pylist() == [1]
    history = requests.get(
        f"{url}/api/v1/tenants/default/catalogs/default/commits", headers=bearer, timeout=30
    ).json()["commits"]
    assert history[0]["principal"] == "alice"
