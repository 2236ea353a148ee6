"""Consistency tokens belong to the tenant whose write answered them: real cluster nodes,
authentication off and on, two tenants.

A token sent with a request to its own tenant is waited for and accepted on any node;
one from another tenant's write is a 400 before anything runs (nothing written, its
tenant not named), whatever the route: native paths, Iceberg prefixes and warehouses,
the token endpoint's client id, or (for routes that name no tenant) the caller's tenant.
"""

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
SECRET = "owner-secret-01234"
TIMEOUT = 60


@pytest.fixture(scope="module", params=["auth-off", "auth-on"])
def cluster(
    request: pytest.FixtureRequest, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Cluster, bool]]:
    auth = request.param == "auth-on"
    env = {"METASTORE_AUTH": "off"}
    if auth:
        env = {
            "METASTORE_AUTH": "on",
            "METASTORE_AUTH_CLIENTS": f"{ROOT}:{ROOT_SECRET}",
            "METASTORE_AUTH_ADMINS": ROOT,
            "METASTORE_CLUSTER_SECRET": secrets.token_urlsafe(32),
        }
    root = tmp_path_factory.mktemp(request.param)
    nodes = Cluster(kafka_bootstrap, f"y{os.urandom(5).hex()}", root, size=2, env=env)
    try:
        yield nodes.start(), auth
    finally:
        nodes.close()
    nodes.logs_without_tracebacks()


def _token(url: str, client_id: str, secret: str, headers: dict[str, str] | None = None) -> Any:
    form = {"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret}
    return requests.post(f"{url}/v1/oauth/tokens", data=form, headers=headers, timeout=TIMEOUT)


class Client:
    def __init__(self, bearer: str | None) -> None:
        self.auth = {"Authorization": f"Bearer {bearer}"} if bearer else {}

    def call(
        self,
        url: str,
        method: str,
        path: str,
        body: Any = None,
        token: str | None = None,
        **params: str,
    ) -> requests.Response:
        headers = {**self.auth, **({HEADER: token} if token else {})}
        return requests.request(
            method, url + path, json=body, headers=headers, params=params or None, timeout=TIMEOUT
        )

    def write(self, url: str, method: str, path: str, body: Any) -> str:
        reply = self.call(url, method, path, body)
        assert reply.status_code in (200, 201), f"{method} {path}: {reply.text}"
        return reply.headers[HEADER]


def _refused(reply: requests.Response, *hidden: str) -> None:
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "BadRequestException" and HEADER in error["message"], error
    for name in hidden:
        assert name not in error["message"], error


def test_a_token_is_accepted_only_by_its_own_tenant(cluster: tuple[Cluster, bool]) -> None:
    nodes, auth = cluster
    one, two = (node.url for node in nodes.nodes)
    admin = Client(_token(one, ROOT, ROOT_SECRET).json()["access_token"] if auth else None)
    tenants = [f"t{secrets.token_hex(4)}" for _ in range(2)]
    callers: dict[str, Client] = {}
    for tenant in tenants:
        base = f"/api/v1/tenants/{tenant}"
        admin.write(one, "POST", "/api/v1/tenants", {"name": tenant})
        storage = {"root": nodes.warehouse(0).joinpath(tenant, "c").as_uri()}
        admin.write(one, "POST", f"{base}/catalogs", {"name": "c", "storage": storage})
        callers[tenant] = admin
        if auth:
            admin.write(one, "POST", f"{base}/principals", {"name": "owner", "secret": SECRET})
            seen = admin.write(
                one,
                "POST",
                f"{base}/principal-roles/tenant_admin/principals",
                {"principal": "owner"},
            )
            login = _token(two, f"owner@{tenant}", SECRET, {HEADER: seen})
            assert login.status_code == 200, login.text
            callers[tenant] = Client(login.json()["access_token"])
    a, b = tenants
    a_caller, b_caller = callers[a], callers[b]
    a_token = a_caller.write(
        one, "POST", f"/api/v1/tenants/{a}/catalogs/c/namespaces", {"namespace": ["x"]}
    )
    b_token = b_caller.write(
        one, "POST", f"/api/v1/tenants/{b}/catalogs/c/namespaces", {"namespace": ["y"]}
    )
    assert a_token != b_token

    # its own tenant's requests, on either node: waited for, then answered
    for url in (one, two):
        own = a_caller.call(
            url, "GET", f"/api/v1/tenants/{a}/catalogs/c/namespaces/x", token=a_token
        )
        assert own.status_code == 200, own.text
        iceberg = a_caller.call(url, "GET", f"/v1/{a}~c/namespaces/x", token=a_token)
        assert iceberg.status_code == 200, iceberg.text

    # another tenant's token: refused before anything runs, on every kind of route
    head = a_caller.call(two, "GET", f"/api/v1/tenants/{a}/catalogs/c/ref", token=a_token).json()
    for method, path, body, params in (
        ("GET", f"/api/v1/tenants/{a}/catalogs/c/namespaces/x", None, {}),
        ("POST", f"/api/v1/tenants/{a}/catalogs/c/namespaces", {"namespace": ["z"]}, {}),
        ("GET", f"/v1/{a}~c/namespaces", None, {}),
        ("POST", f"/v1/{a}~c/namespaces", {"namespace": ["z"]}, {}),
        ("GET", "/v1/config", None, {"warehouse": f"{a}/c"}),
    ):
        for url in (one, two):
            _refused(a_caller.call(url, method, path, body, token=b_token, **params), b)
    after = a_caller.call(two, "GET", f"/api/v1/tenants/{a}/catalogs/c/ref", token=a_token).json()
    assert after == head  # nothing written
    tampered = a_token[:-1] + ("1" if a_token.endswith("0") else "0")  # its tag changed
    _refused(a_caller.call(one, "GET", f"/api/v1/tenants/{a}/catalogs/c/ref", token=tampered))

    if auth:
        login = _token(two, f"owner@{a}", SECRET, {HEADER: b_token})  # its client id's tenant
        _refused(login, b)
        # routes that name no tenant: the caller's tenant; a service admin acts in any
        _refused(a_caller.call(one, "GET", "/api/v1/whoami", token=b_token), b)
        assert a_caller.call(one, "GET", "/api/v1/whoami", token=a_token).status_code == 200
        assert admin.call(one, "GET", "/api/v1/whoami", token=b_token).status_code == 200
        mine = a_caller.call(one, "GET", "/v1/config", token=a_token, warehouse="c")
        assert mine.status_code == 200 and mine.json()["overrides"]["prefix"] == f"{a}~c"
        _refused(a_caller.call(one, "GET", "/v1/config", token=b_token, warehouse="c"), b)
    else:  # every caller of a node without authentication acts in any tenant
        listed = admin.call(one, "GET", "/api/v1/tenants", token=b_token)
        assert listed.status_code == 200, listed.text
