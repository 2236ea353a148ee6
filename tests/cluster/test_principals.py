"""Principals in a three-node cluster: a principal created, disabled, rotated or deleted
through one node is seen that way by every node as soon as that node has applied the
commit (the write's consistency token says when), with nothing but the changelog
between them."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import jwt
import pytest
import requests

from harness.cluster import Cluster
from harness.node import NodeProcess
from metastore.catalog.consistency import HEADER

pytestmark = pytest.mark.slow

ROOT = ("root", "root-secret-0123")
TIMEOUT = 60


@pytest.fixture(scope="module")
def cluster(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("principals")
    warehouse = root / "warehouse"
    warehouse.mkdir()
    env = {
        "METASTORE_AUTH": "on",
        "METASTORE_AUTH_CLIENTS": ":".join(ROOT),
        "METASTORE_AUTH_ADMINS": "root",
        "METASTORE_CLUSTER_SECRET": secrets.token_urlsafe(32),
        "METASTORE_WAREHOUSE": warehouse.resolve().as_uri(),
    }
    nodes = Cluster(kafka_bootstrap, f"p{os.urandom(5).hex()}", root / "nodes", env=env)
    try:
        nodes.start()
        yield nodes
    finally:
        nodes.close()
    nodes.logs_without_tracebacks()


def token(node: NodeProcess, client_id: str, secret: str, after: str = "") -> requests.Response:
    form = {"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret}
    headers = {HEADER: after} if after else {}
    return requests.post(node.url + "/v1/oauth/tokens", data=form, headers=headers, timeout=TIMEOUT)


def bearer(node: NodeProcess, client_id: str, secret: str, after: str = "") -> str:
    reply = token(node, client_id, secret, after)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["access_token"])


def call(
    node: NodeProcess, access: str, method: str, path: str, body: object = None, after: str = ""
) -> requests.Response:
    headers = {"Authorization": f"Bearer {access}"}
    if after:
        headers[HEADER] = after
    return requests.request(method, node.url + path, json=body, headers=headers, timeout=TIMEOUT)


def written(reply: requests.Response, status: int = 200) -> str:
    """The consistency token of a write that succeeded."""
    assert reply.status_code == status, reply.text
    return reply.headers[HEADER]


def whoami(node: NodeProcess, access: str, after: str) -> int:
    return call(node, access, "GET", "/api/v1/whoami", after=after).status_code


def test_principal_changes_through_one_node_hold_on_every_node_once_applied(
    cluster: Cluster,
) -> None:
    a, b, c = cluster.nodes
    admin = bearer(a, *ROOT)
    after = written(call(b, admin, "POST", "/api/v1/tenants", {"name": "acme"}), 201)
    users = "/api/v1/tenants/acme/principals"
    created = call(c, admin, "POST", users, {"name": "etl"}, after)
    after = written(created, 201)
    etl_id, secret = "etl@acme", created.json()["client-secret"]
    etl = bearer(a, etl_id, secret, after)  # a token from another node than the create's
    assert [whoami(node, etl, after) for node in cluster.nodes] == [200, 200, 200]

    after = written(call(b, admin, "POST", users + "/etl/disable", after=after))
    assert [whoami(node, etl, after) for node in cluster.nodes] == [401, 401, 401]
    for node in cluster.nodes:
        assert token(node, etl_id, secret, after).status_code == 401

    after = written(call(c, admin, "POST", users + "/etl/enable", after=after))
    etl = bearer(b, etl_id, secret, after)
    assert [whoami(node, etl, after) for node in cluster.nodes] == [200, 200, 200]

    rotated = call(a, admin, "POST", users + "/etl/rotate", after=after)
    after = written(rotated)
    assert [whoami(node, etl, after) for node in cluster.nodes] == [401, 401, 401]
    etl = bearer(c, etl_id, rotated.json()["client-secret"], after)
    assert [whoami(node, etl, after) for node in cluster.nodes] == [200, 200, 200]

    reply = call(b, admin, "DELETE", users + "/etl", after=after)
    after = written(reply, 204)
    assert [whoami(node, etl, after) for node in cluster.nodes] == [401, 401, 401]
    for node in cluster.nodes:
        listed = call(node, admin, "GET", users, after=after)
        assert listed.status_code == 200 and listed.json()["principals"] == [], listed.text


def test_a_token_key_rotated_through_one_node_signs_on_every_node(cluster: Cluster) -> None:
    a, b, c = cluster.nodes
    admin = bearer(a, *ROOT)
    rotated = call(b, admin, "POST", "/api/v1/token-keys/rotate")
    after = written(rotated)
    fresh = bearer(c, *ROOT, after)
    assert jwt.get_unverified_header(fresh)["kid"] == rotated.json()["current"]
    for node in cluster.nodes:  # the old key's token and the new key's, everywhere
        assert whoami(node, admin, after) == 200
        assert whoami(node, fresh, after) == 200
