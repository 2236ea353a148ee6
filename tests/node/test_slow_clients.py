"""Slow and greedy clients over real sockets: request heads and bodies have deadlines, the
number of open connections has a limit, and the node keeps answering meanwhile.

The nodes run with small settings (seconds, a handful of connections) so the
tests wait on real conditions (a socket reads EOF, a reply arrives) within
generous bounds, never on a measured duration.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator

import aiohttp
import pytest

from harness.node import NodeProcess
from tests.native.support import TIMEOUT, Api, assert_error, assert_status, unique

BOUND_S = 60.0  # generous: every awaited condition happens well before this
LIMIT = 6


def _node(root_factory: pytest.TempPathFactory, name: str, env: dict[str, str]) -> NodeProcess:
    root = root_factory.mktemp(name)
    return NodeProcess(root / "data", log_path=root / "node.log", env=env)


@pytest.fixture(scope="module")
def hasty_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """Request heads and bodies must arrive within one second."""
    env = {"METASTORE_HEADER_TIMEOUT_S": "1", "METASTORE_BODY_TIMEOUT_S": "1"}
    with _node(tmp_path_factory, "hasty", env) as process:
        yield process


@pytest.fixture(scope="module")
def small_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """At most LIMIT open connections; idle ones are not closed during a test."""
    env = {"METASTORE_MAX_CONNECTIONS": str(LIMIT), "METASTORE_HEADER_TIMEOUT_S": "600"}
    with _node(tmp_path_factory, "small", env) as process:
        yield process


Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def connect(node: NodeProcess) -> Connection:
    return await asyncio.open_connection("127.0.0.1", node.port)


async def closed_by_server(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sent until it closed the connection (EOF or reset)."""
    received = b""
    with contextlib.suppress(ConnectionError):
        while chunk := await reader.read(65536):
            received += chunk
    return received


async def dribble(writer: asyncio.StreamWriter, data: bytes) -> None:
    """Send ``data`` a byte at a time, slowly, until it is sent or the server hangs up."""
    with contextlib.suppress(ConnectionError):
        for byte in data:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.2)


async def one_response(connection: Connection, request: bytes) -> bytes:
    """Send a request on a kept-alive connection and read exactly its response."""
    reader, writer = connection
    writer.write(request)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return head + await reader.readexactly(length)


def health_request() -> bytes:
    return b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


async def test_slow_request_heads_are_cut_off_and_the_node_keeps_answering(
    hasty_node: NodeProcess,
) -> None:
    slow = [await connect(hasty_node) for _ in range(20)]
    head = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 1000 + b"\r\n\r\n"
    senders = [asyncio.create_task(dribble(writer, head)) for _, writer in slow]
    try:
        async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
            health = await Api(session, hasty_node.url).get("/health")
            assert_status(health, 200)
        async with asyncio.timeout(BOUND_S):
            received = await asyncio.gather(*(closed_by_server(r) for r, _ in slow))
        assert all(b"200 OK" not in answer for answer in received), received
    finally:
        for task in senders:
            task.cancel()
        for _, writer in slow:
            writer.close()


async def test_an_idle_connection_is_closed_after_the_header_timeout(
    hasty_node: NodeProcess,
) -> None:
    reader, writer = await connect(hasty_node)
    try:
        async with asyncio.timeout(BOUND_S):
            assert await closed_by_server(reader) == b""
    finally:
        writer.close()


async def test_a_slow_body_gets_408_and_writes_nothing(hasty_node: NodeProcess) -> None:
    tenant = unique("t")
    body = json.dumps({"name": tenant}).encode()
    head = (
        f"POST /api/v1/tenants HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    reader, writer = await connect(hasty_node)
    writer.write(head)
    sender = asyncio.create_task(dribble(writer, body))
    try:
        async with asyncio.timeout(BOUND_S):
            answer = await closed_by_server(reader)
    finally:
        sender.cancel()
        writer.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer
    error = json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
    assert error["code"] == 408 and error["type"] == "RequestTimeoutException", error
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        assert_error(await Api(session, hasty_node.url).get(f"/api/v1/tenants/{tenant}"), 404)


async def test_connections_past_the_limit_are_refused_until_one_closes(
    small_node: NodeProcess,
) -> None:
    held = [await connect(small_node) for _ in range(LIMIT)]
    try:
        for connection in held:  # each one served: it is open and counted
            assert (await one_response(connection, health_request())).startswith(b"HTTP/1.1 200")
        reader, writer = await connect(small_node)
        async with asyncio.timeout(BOUND_S):
            refused = await closed_by_server(reader)
        writer.close()
        assert refused.startswith(b"HTTP/1.1 503"), refused
        error = json.loads(refused.split(b"\r\n\r\n", 1)[1])["error"]
        assert error["type"] == "ServiceUnavailableException", error
        # the connections it has are still served
        assert (await one_response(held[0], health_request())).startswith(b"HTTP/1.1 200")
        _, first = held.pop()
        first.close()
        await first.wait_closed()
        async with asyncio.timeout(BOUND_S):
            while True:  # the freed slot is taken by the next connection
                connection = await connect(small_node)
                try:
                    answer = await one_response(connection, health_request())
                except (ConnectionError, asyncio.IncompleteReadError):
                    answer = b""  # refused before the slot was freed: try again
                finally:
                    connection[1].close()
                if answer.startswith(b"HTTP/1.1 200"):
                    break
                await asyncio.sleep(0.05)
    finally:
        for _, writer in held:
            writer.close()


async def test_large_bodies_are_parsed_and_checked_like_small_ones(api: Api) -> None:
    """Bodies past 64 KiB are parsed on a worker thread: same answers, errors included."""
    catalog = await api.new_catalog()
    big = {"namespace": ["big"], "properties": {f"k{i}": "v" * 1000 for i in range(200)}}
    created = assert_status(await api.post(catalog.path + "/namespaces", big), 201)
    assert len(created["properties"]) == 200
    bad = {"namespace": ["bad"], "properties": {f"k{i}": "v" * 1000 for i in range(200)}}
    bad["properties"]["k199"] = 1  # type: ignore[assignment]
    error = assert_error(await api.post(catalog.path + "/namespaces", bad), 400)
    assert "properties/k199" in error["message"], error
    raw = await api.call("POST", catalog.path + "/namespaces", data=b"{" + b" " * 100_000 + b"nope")
    assert_error(raw, 400)
    assert_error(await api.get(catalog.ns("bad")), 404)
