"""Grants in a cluster: three real nodes with auth on. A grant made through one node is
effective on every other node once that node has applied its commit (a client waits for
that with the grant's ``Metastore-Consistency-Token``), and a revoke likewise: the
policy is data of the tenant's system catalog, read from each node's own view."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from harness.cluster import Cluster
from metastore.catalog.consistency import HEADER

pytestmark = pytest.mark.slow

ROOT, ROOT_SECRET = "root", "root-secret-0123"
SECRET = "ana-secret-0123456"
TIMEOUT = 60


@pytest.fixture(scope="module")
def cluster(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    env = {
        "METASTORE_AUTH": "on",
        "METASTORE_AUTH_CLIENTS": f"{ROOT}:{ROOT_SECRET}",
        "METASTORE_AUTH_ADMINS": ROOT,
        "METASTORE_CLUSTER_SECRET": secrets.token_urlsafe(32),
    }
    root = tmp_path_factory.mktemp("grants")
    nodes = Cluster(kafka_bootstrap, f"g{os.urandom(5).hex()}", root, env=env)
    try:
        yield nodes.start()
    finally:
        nodes.close()
    nodes.logs_without_tracebacks()


class Client:
    """One principal's calls to any node; remembers the consistency token of its last
    write so its next call, to whichever node, sees that write."""

    def __init__(self, token: str) -> None:
        self.auth = {"Authorization": f"Bearer {token}"}
        self.seen: str | None = None

    @classmethod
    def login(cls, url: str, client_id: str, secret: str, after: str | None) -> Client:
        form = {"grant_type": "client_credentials", "client_id": client_id}
        form["client_secret"] = secret
        headers = {HEADER: after} if after else {}
        reply = requests.post(f"{url}/v1/oauth/tokens", data=form, headers=headers, timeout=TIMEOUT)
        assert reply.status_code == 200, reply.text
        return cls(reply.json()["access_token"])

    def call(self, url: str, method: str, path: str, body: Any = None) -> requests.Response:
        headers = {**self.auth, **({HEADER: self.seen} if self.seen else {})}
        reply = requests.request(method, url + path, json=body, headers=headers, timeout=TIMEOUT)
        if HEADER in reply.headers:
            self.seen = reply.headers[HEADER]
        return reply

    def ok(self, url: str, method: str, path: str, body: Any = None, status: int = 201) -> Any:
        reply = self.call(url, method, path, body)
        assert reply.status_code == status, f"{method} {url}{path}: {reply.text}"
        return reply.json() if reply.text else None


def test_a_grant_and_a_revoke_through_one_node_apply_on_the_others(cluster: Cluster) -> None:
    one, two, three = (node.url for node in cluster.nodes)
    root = Client.login(one, ROOT, ROOT_SECRET, None)
    tenant = f"t{secrets.token_hex(4)}"
    base = f"/api/v1/tenants/{tenant}"
    root.ok(one, "POST", "/api/v1/tenants", {"name": tenant})
    root.ok(one, "POST", f"{base}/catalogs", {"name": "c"})
    root.ok(one, "POST", f"{base}/principals", {"name": "ana", "secret": SECRET})
    ana = Client.login(two, f"ana@{tenant}", SECRET, root.seen)
    namespaces = f"{base}/catalogs/c/namespaces"
    for url in (one, two, three):
        ana.seen = root.seen
        refused = ana.call(url, "POST", namespaces, {"namespace": ["before"]})
        assert refused.status_code == 403, refused.text

    # the grant, made through the first node
    root.ok(one, "POST", f"{base}/principal-roles", {"name": "eng"})
    root.ok(one, "POST", f"{base}/principal-roles/eng/principals", {"principal": "ana"})
    root.ok(one, "POST", f"{base}/catalogs/c/catalog-roles", {"name": "makers"})
    grant = {"privilege": "NAMESPACE_CREATE", "securable": {"kind": "catalog"}}
    root.ok(one, "POST", f"{base}/catalogs/c/catalog-roles/makers/grants", grant)
    body = {"catalog": "c", "catalog-role": "makers"}
    root.ok(one, "POST", f"{base}/principal-roles/eng/catalog-roles", body)
    granted = root.seen
    for i, url in enumerate((two, three)):
        ana.seen = granted  # this node has applied the grant before it answers
        ana.ok(url, "POST", namespaces, {"namespace": [f"granted{i}"]})

    # the revoke, made through the third node
    root.ok(three, "POST", f"{base}/catalogs/c/catalog-roles/makers/grants/revoke", grant, 204)
    revoked = root.seen
    for i, url in enumerate((one, two)):
        ana.seen = revoked
        refused = ana.call(url, "POST", namespaces, {"namespace": [f"revoked{i}"]})
        assert refused.status_code == 403, refused.text

    listed = root.ok(two, "GET", namespaces, status=200)
    assert sorted(n["namespace"][0] for n in listed["namespaces"]) == ["granted0", "granted1"]
    history = root.ok(two, "GET", f"{base}/commits", status=200)["commits"]
    operations = [c["operation"] for c in history]
    assert operations[:2] == ["revoke NAMESPACE_CREATE", "grant catalog role"], operations
