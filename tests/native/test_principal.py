"""With auth on, every commit records the authenticated client, on both APIs; an
``Idempotency-Key`` belongs to the client that used it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from harness.node import NodeProcess
from tests.native.conftest import CLIENTS
from tests.native.support import TIMEOUT, Api, assert_error, assert_status, unique

CATALOG = "/api/v1/tenants/default/catalogs/default"


async def bearer(session: aiohttp.ClientSession, url: str, client: str) -> dict[str, str]:
    form = {"grant_type": "client_credentials", "client_id": client}
    form["client_secret"] = CLIENTS[client]
    async with session.post(url + "/v1/oauth/tokens", data=form) as reply:
        assert reply.status == 200, await reply.text()
        token = (await reply.json())["access_token"]
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        yield session


async def test_native_and_iceberg_commits_record_the_client(
    secured_node: NodeProcess, session: aiohttp.ClientSession
) -> None:
    api = Api(session, secured_node.url)
    alice = await bearer(session, secured_node.url, "alice")
    native, iceberg = unique("native"), unique("iceberg")
    body = {"namespace": [native]}
    assert_status(
        await api.call("POST", CATALOG + "/namespaces", json_body=body, headers=alice), 201
    )
    body = {"namespace": [iceberg]}
    reply = await api.call("POST", "/v1/default/namespaces", json_body=body, headers=alice)
    assert_status(reply, 200)
    history = assert_status(await api.call("GET", CATALOG + "/commits", headers=alice), 200)
    by_namespace = {
        tuple(c["changes"][0]["path"]): c["principal"]
        for c in history["commits"]
        if c["operation"] == "create namespace"
    }
    assert by_namespace[(native,)] == "alice", history
    assert by_namespace[(iceberg,)] == "alice", history


async def test_tenant_operations_record_the_client(
    secured_node: NodeProcess, session: aiohttp.ClientSession
) -> None:
    api = Api(session, secured_node.url)
    bob = await bearer(session, secured_node.url, "bob")
    tenant = unique("t")
    body = {"name": tenant}
    assert_status(await api.call("POST", "/api/v1/tenants", json_body=body, headers=bob), 201)
    catalogs = f"/api/v1/tenants/{tenant}/catalogs"
    reply = await api.call("POST", catalogs, json_body={"name": "c"}, headers=bob)
    assert_status(reply, 201)
    history = assert_status(await api.call("GET", catalogs + "/c/commits", headers=bob), 200)
    assert [c["principal"] for c in history["commits"]] == ["bob"], history


async def test_another_clients_key_never_replays_the_first_outcome(
    secured_node: NodeProcess, session: aiohttp.ClientSession
) -> None:
    api = Api(session, secured_node.url)
    alice = await bearer(session, secured_node.url, "alice")
    bob = await bearer(session, secured_node.url, "bob")
    for path, created in ((CATALOG + "/namespaces", 201), ("/v1/default/namespaces", 200)):
        key = {"Idempotency-Key": unique("k")}
        body = {"namespace": [unique("ns")], "properties": {"secret": "alice's"}}
        first = await api.call("POST", path, json_body=body, headers={**alice, **key})
        outcome = assert_status(first, created)
        stolen = await api.call("POST", path, json_body=body, headers={**bob, **key})
        error = assert_error(stolen, 400)
        assert "alice" not in stolen.text, error  # nothing of the first outcome
        again = await api.call("POST", path, json_body=body, headers={**alice, **key})
        assert assert_status(again, created) == outcome
