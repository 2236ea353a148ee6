"""The node-to-node protocol (metastore/cluster/protocol.py), both sides over real HTTP.

The calling side is the protocol's own client with a real node key; the answering
side is a real aiohttp server behind the node's own middlewares (the error shape,
``authenticate_peers``) whose handlers use the protocol's server side. No broker:
the same calls between whole nodes on a broker are in test_persistence.py,
test_nodes.py and test_security.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer, unused_port
from yarl import URL

from metastore.cluster import protocol
from metastore.cluster.peer_auth import MIN_SECRET_LENGTH, PeerKey, Peers
from metastore.errors import BadRequest, Fenced, MetastoreError, NotOwner, ServiceUnavailable
from metastore.http.peers import PEER, authenticate_peers
from metastore.http.typedefs import PEERS
from metastore.model.keys import ObjKey
from metastore.node.middlewares import errors
from metastore.persistence.base import UpdateableObject

SECRET = "s" * MIN_SECRET_LENGTH
SENDER = "http://10.0.0.1:8181"
KEY = ObjKey("__system", "__system", "lease", 7)


@dataclass
class Owner:
    """A node's HTTP side: the updateable CAS on a one-token store, anything else echoed."""

    url: str
    token: str | None = None
    not_owner: bool = False
    seen: list[protocol.UpdateableCas] = field(default_factory=list)
    forwarded: list[dict[str, object]] = field(default_factory=list)

    async def cas(self, request: web.Request) -> web.Response:
        cas = protocol.UpdateableCas.decode(await request.read())
        self.seen.append(cas)
        if self.not_owner:
            raise NotOwner(f"{self.url} does not own partition 0", 0)
        if cas.expected != self.token:
            return web.json_response(protocol.cas_answer(False))
        self.token = None if cas.new is None else cas.new.token
        return web.json_response(protocol.cas_answer(True))

    async def echo(self, request: web.Request) -> web.Response:
        if self.not_owner:
            raise Fenced(f"{self.url}: fenced by a newer owner", 3)
        self.forwarded.append(
            {
                "method": request.method,
                "path_qs": request.rel_url.raw_path_qs,
                "body": await request.read(),
                "authorization": request.headers.get("Authorization"),
                "sender": request.get(PEER),
                "headers": {k.lower() for k in request.headers},
            }
        )
        return web.json_response({"created": True}, status=201, headers={"X-Owner": "yes"})


async def _serve(app: web.Application, port: int) -> TestServer:
    server = TestServer(app, host="127.0.0.1", port=port)
    await server.start_server()
    return server


@pytest.fixture
async def owner() -> AsyncIterator[Owner]:
    port = unused_port()
    node = Owner(f"http://127.0.0.1:{port}")
    app = web.Application(middlewares=[errors, authenticate_peers])
    app[PEERS] = Peers(url=node.url, key=PeerKey(SECRET))
    app.router.add_post(protocol.UPDATEABLES_PATH, node.cas)
    app.router.add_route("*", "/v1/{tail:.*}", node.echo)
    server = await _serve(app, port)
    try:
        yield node
    finally:
        await server.close()


def _cas(url: str, cas: protocol.UpdateableCas, secret: str = SECRET) -> bool:
    signer = Peers(url=SENDER, key=PeerKey(secret))
    return protocol.cas_updateable(signer, url, 0, cas, read_timeout_s=10.0)


# --- encodings ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cas",
    [
        protocol.UpdateableCas(KEY, None, UpdateableObject(KEY, b"\x00lease\xff", "t1")),
        protocol.UpdateableCas(KEY, "t1", UpdateableObject(KEY, b"", "t2")),
        protocol.UpdateableCas(KEY, "t2", None),
    ],
)
def test_an_updateable_cas_reads_back_as_sent(cas: protocol.UpdateableCas) -> None:
    assert protocol.UpdateableCas.decode(cas.encode()) == cas


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"not json",
        b"[]",
        b"{}",
        b'{"key": {"tenant": "t", "catalog": "c", "type": "lease", "id": "x"},'
        b' "expected_token": null, "new": null}',
        b'{"key": {"tenant": "t", "catalog": "c", "type": "lease", "id": "1"},'
        b' "expected_token": null, "new": {"data": "not base64!", "token": "t"}}',
        b'{"key": {"tenant": "t", "catalog": "c", "type": "lease", "id": "1"}, "new": null}',
    ],
)
def test_a_malformed_cas_is_a_bad_request(raw: bytes) -> None:
    with pytest.raises(BadRequest) as refused:
        protocol.UpdateableCas.decode(raw)
    assert refused.value.status == 400
    assert refused.value.message.startswith("malformed updateable CAS request")


def test_only_a_not_owner_answer_says_nothing_ran() -> None:
    def body(error: MetastoreError) -> bytes:
        return json.dumps(error.to_body()).encode()

    assert protocol.is_not_owner_answer(503, body(NotOwner("moved", 2)))
    assert protocol.is_not_owner_answer(503, body(Fenced("fenced", 2)))
    assert not protocol.is_not_owner_answer(503, body(ServiceUnavailable("busy")))
    assert not protocol.is_not_owner_answer(503, b"<html>proxy error</html>")
    assert not protocol.is_not_owner_answer(500, body(NotOwner("moved", 2)))


# --- the updateable CAS between two nodes ---------------------------------------------------


async def test_a_cas_at_the_owner_swaps_once(owner: Owner) -> None:
    first = protocol.UpdateableCas(KEY, None, UpdateableObject(KEY, b"lease", "t1"))
    assert await asyncio.to_thread(_cas, owner.url, first)
    assert owner.token == "t1"
    assert not await asyncio.to_thread(_cas, owner.url, first)  # the token moved
    assert owner.seen == [first, first]


async def test_a_peer_that_does_not_own_the_partition_ran_nothing(owner: Owner) -> None:
    owner.not_owner = True
    cas = protocol.UpdateableCas(KEY, None, UpdateableObject(KEY, b"lease", "t1"))
    with pytest.raises(NotOwner) as moved:
        await asyncio.to_thread(_cas, owner.url, cas)
    assert moved.value.partition == 0
    assert "does not own partition 0" in moved.value.message
    assert owner.token is None


async def test_a_peer_with_another_secret_refuses_the_call(owner: Owner) -> None:
    cas = protocol.UpdateableCas(KEY, None, UpdateableObject(KEY, b"lease", "t1"))
    with pytest.raises(protocol.PeerRefused) as refused:
        await asyncio.to_thread(_cas, owner.url, cas, "o" * MIN_SECRET_LENGTH)
    assert "invalid node signature" in refused.value.message
    assert owner.seen == []  # refused before the handler


async def test_a_peer_that_cannot_be_reached_got_nothing() -> None:
    gone = f"http://127.0.0.1:{unused_port()}"
    cas = protocol.UpdateableCas(KEY, None, None)
    with pytest.raises(NotOwner) as unreachable:
        await asyncio.to_thread(_cas, gone, cas)
    assert f"{gone} is not reachable" in unreachable.value.message


# --- a forwarded write ------------------------------------------------------------------------


@pytest.fixture
async def forwarder(owner: Owner) -> AsyncIterator[tuple[str, list[str]]]:
    """A node that forwards every request to ``owner`` and says when it would retry."""
    port = unused_port()
    url = f"http://127.0.0.1:{port}"
    signer = Peers(url=url, key=PeerKey(SECRET))
    targets = [owner.url]
    async with aiohttp.ClientSession() as session:

        async def relay(request: web.Request) -> web.Response:
            answer = await protocol.forward(
                session, signer, targets[0], request, await request.read()
            )
            if answer is None:
                return web.json_response({"retry": True}, status=299)
            return answer

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", relay)
        server = await _serve(app, port)
        try:
            yield url, targets
        finally:
            await server.close()


async def test_a_forward_is_the_clients_request_signed_by_the_node(
    owner: Owner, forwarder: tuple[str, list[str]]
) -> None:
    url, _ = forwarder
    path_qs = "/v1/default/namespaces/a%1Fb/tables?pageSize=5"
    async with (
        aiohttp.ClientSession() as client,
        client.post(
            URL(url + path_qs, encoded=True),
            data=b'{"name": "t"}',
            headers={"Authorization": "Bearer client-token", "Connection": "keep-alive"},
        ) as answer,
    ):
        assert answer.status == 201
        assert answer.headers["X-Owner"] == "yes"
        assert await answer.json() == {"created": True}
    [seen] = owner.forwarded
    assert seen["method"] == "POST"
    assert seen["path_qs"] == path_qs  # byte for byte, as the client sent it
    assert seen["body"] == b'{"name": "t"}'
    assert seen["authorization"] == "Bearer client-token"
    assert seen["sender"] == url  # the signature verified at the owner
    headers = seen["headers"]
    assert isinstance(headers, set)
    assert protocol.SIGNATURE_HEADER.lower() in headers


async def test_a_forward_to_a_node_that_is_not_the_owner_is_retried(
    owner: Owner, forwarder: tuple[str, list[str]]
) -> None:
    url, targets = forwarder
    owner.not_owner = True
    async with aiohttp.ClientSession() as client:
        async with client.post(url + "/v1/x", data=b"{}") as answer:
            assert answer.status == 299  # the owner answered "not owner": retry
        targets[0] = f"http://127.0.0.1:{unused_port()}"
        async with client.post(url + "/v1/x", data=b"{}") as answer:
            assert answer.status == 299  # never connected: nothing sent, retry
    assert owner.forwarded == []
