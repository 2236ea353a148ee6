"""Requests aiohttp's parser refuses, and bodies the node cannot decode, over raw sockets.

Each is the client's error: a 4xx in the Iceberg error shape and nothing written, and
no traceback in the node's log (the module's node fixture fails on any). A request the
parser refuses closes its connection and is one WARNING line. A body is decoded by the
node within the body limit (400 if it is not its coding, 413 past the limit once
decoded, 415 for a coding the node does not decode); a well-formed one is taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from harness.node import NodeProcess
from tests.native.support import TIMEOUT, Api, Catalog, assert_status

BOUND_S = 30.0  # generous: every awaited condition happens well before this
REFUSAL_LINE = "WARNING metastore.http.protocol: refused a malformed request"
BODY = json.dumps({"namespace": ["x"]}).encode()


@dataclass(frozen=True)
class Sent:
    status: int
    headers: dict[str, str]
    body: Any


async def send_raw(node: NodeProcess, data: bytes) -> Sent:
    """``data`` on a fresh connection; the answer, read until the node closes it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", node.port)
    try:
        writer.write(data)
        await writer.drain()
        received = b""
        async with asyncio.timeout(BOUND_S):  # the node must close: waiting is the failure
            with contextlib.suppress(ConnectionError):
                while chunk := await reader.read(65536):
                    received += chunk
    finally:
        writer.close()
    head, _, body = received.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Sent(int(status_line.split()[1]), headers, json.loads(body))


def post(path: str, body: bytes, *headers: str) -> bytes:
    head = [
        f"POST {path} HTTP/1.1",
        "Host: 127.0.0.1",
        "Content-Type: application/json",
        "Connection: close",  # ``send_raw`` reads until the node closes
        *headers,
    ]
    if not any(h.lower().startswith("transfer-encoding") for h in headers):
        head.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def get(*headers: str, target: str = "/health", version: str = "HTTP/1.1") -> bytes:
    lines = [f"GET {target} {version}", "Host: 127.0.0.1", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def refusals(node: NodeProcess) -> int:
    return node.log_path.read_text(errors="replace").count(REFUSAL_LINE)


# (id, the bytes for a namespace-creating path, status, words the message must hold)
CASES = [
    ("header-name-with-space", lambda p: get("Bad Header: x"), 400, "Invalid header token"),
    ("header-line-10k", lambda p: get("X: " + "a" * 10_000), 400, "8190 bytes"),
    ("headers-200", lambda p: get(*(f"H{i}: x" for i in range(200))), 400, "Too many headers"),
    ("http-version-9.9", lambda p: get(version="HTTP/9.9"), 400, "Invalid HTTP version"),
    ("target-not-a-path", lambda p: get(target="v1/config"), 400, "url"),
    ("content-length-negative", lambda p: get("Content-Length: -1"), 400, "Content-Length"),
    ("chunk-size-not-hex", lambda p: post(
        p, b"zz\r\nabc\r\n0\r\n\r\n", "Transfer-Encoding: chunked"), 400, "chunk size"),
    ("chunked-and-length", lambda p: (post(p, b"", "Transfer-Encoding: chunked")[:-4]
        + b"\r\nContent-Length: 5\r\n\r\n0\r\n\r\n"), 400, "Content-Length"),
]  # fmt: skip


@pytest.mark.parametrize(("case_id", "make", "status", "words"), CASES, ids=[c[0] for c in CASES])
async def test_the_parsers_refusals_are_the_clients_errors(
    node: NodeProcess, api: Api, catalog: Catalog, case_id: str, make: Any, status: int, words: str
) -> None:
    before = refusals(node)
    sent = await send_raw(node, make(catalog.path + "/namespaces"))
    assert sent.status == status, sent
    error = sent.body["error"]
    assert set(sent.body) == {"error"} and error["code"] == status, sent
    assert error["type"] == "BadRequestException" and words in error["message"], sent
    assert error["message"].startswith("malformed request: ") and "\n" not in error["message"]
    assert refusals(node) == before + 1  # one line, written before the answer left
    assert_status(await api.get(catalog.ns("x")), 404)  # nothing was written
    assert_status(await api.get("/health"))  # and the node goes on


def gzip_bomb(decoded_mib: int) -> bytes:
    """``decoded_mib`` MiB of spaces, gzipped (about a thousandth of that)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    return b"".join(packer.compress(b" " * (1 << 20)) for _ in range(decoded_mib)) + packer.flush()


# (id, body, Content-Encoding, status, error type, how the message starts)
BODIES = [
    ("gzip-that-is-not", b"not gzip at all", "gzip", 400, "BadRequestException",
        "the request body is not valid gzip: it does not decompress"),  # not zlib's words
    ("deflate-cut-short", zlib.compress(BODY)[:-4], "deflate", 400, "BadRequestException",
        "the request body is not valid deflate: it ends early"),
    ("gzip-cut-short", gzip.compress(BODY)[:-9], "gzip", 400, "BadRequestException",
        "the request body is not valid gzip: it ends early"),
    ("deflate-then-more", zlib.compress(BODY) + b"x", "deflate", 400, "BadRequestException",
        "the request body is not valid deflate: bytes after its end"),
    ("gzip-bomb-16MiB", gzip_bomb(16), "gzip", 413, "RequestEntityTooLargeException",
        "request body exceeds the limit of 1048576 bytes once decoded (gzip)"),
    ("second-coding-bomb", gzip.compress(gzip_bomb(8)), "gzip, gzip", 413,
        "RequestEntityTooLargeException", "request body exceeds the limit"),
    ("brotli", BODY, "br", 415, "UnsupportedMediaTypeException",
        "content coding 'br' is not supported: send the body as gzip, deflate or unencoded"),
    ("zstd-after-gzip", gzip.compress(BODY), "zstd, gzip", 415,
        "UnsupportedMediaTypeException", "content coding 'zstd' is not supported"),
    ("coding-name-1000", BODY, "x" * 1_000, 415, "UnsupportedMediaTypeException",
        "content coding 'xxxxxxxx"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case_id", "body", "coding", "status", "error_type", "opening"),
    BODIES,
    ids=[c[0] for c in BODIES],
)
async def test_a_body_it_cannot_decode_is_refused_and_writes_nothing(
    node: NodeProcess,
    api: Api,
    catalog: Catalog,
    case_id: str,
    body: bytes,
    coding: str,
    status: int,
    error_type: str,
    opening: str,
) -> None:
    """Decoded by the node within the body limit, as sent and once decoded."""
    data = post(catalog.path + "/namespaces", body, f"Content-Encoding: {coding}")
    sent = await send_raw(node, data)
    assert sent.status == status, sent
    error = sent.body["error"]
    assert error["type"] == error_type and error["code"] == status, sent
    assert error["message"].startswith(opening), sent
    assert len(error["message"]) < 300, sent
    if status == 415:  # what it may send instead
        assert sent.headers["accept-encoding"] == "gzip, deflate", sent
    assert_status(await api.get(catalog.ns("x")), 404)
    assert_status(await api.get("/health"))


@pytest.mark.parametrize(
    "coding",
    ["gzip", "x-gzip", "deflate", "raw-deflate", "identity", "gzip, gzip", "gzip-two-members"],
)
async def test_a_well_formed_coded_body_is_taken(
    node: NodeProcess, api: Api, catalog: Catalog, coding: str
) -> None:
    packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    body, header = {
        "gzip": (gzip.compress(BODY), "gzip"),
        "x-gzip": (gzip.compress(BODY), "x-gzip"),
        "deflate": (zlib.compress(BODY), "deflate"),
        "raw-deflate": (packer.compress(BODY) + packer.flush(), "deflate"),
        "identity": (BODY, "identity"),
        "gzip, gzip": (gzip.compress(gzip.compress(BODY)), "gzip, gzip"),
        "gzip-two-members": (gzip.compress(BODY[:5]) + gzip.compress(BODY[5:]), "gzip"),
    }[coding]
    data = post(catalog.path + "/namespaces", body, f"Content-Encoding: {header}")
    sent = await send_raw(node, data)
    assert sent.status == 201, sent
    assert sent.body["namespace"] == ["x"], sent
    assert_status(await api.get(catalog.ns("x")))


@pytest.fixture(scope="module")
def python_parser_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """A node on aiohttp's pure-Python HTTP parser (as where its C parser is not built),
    which reports broken framing inside a body to the reader of that body."""
    root = tmp_path_factory.mktemp("python-parser")
    env = {"AIOHTTP_NO_EXTENSIONS": "1"}
    with NodeProcess(root / "data", log_path=root / "node.log", env=env) as process:
        yield process
    assert "Traceback" not in process.log_path.read_text(errors="replace"), process.log_tail(60)


async def test_chunked_framing_broken_inside_the_body_is_a_400(
    python_parser_node: NodeProcess,
) -> None:
    """The node's ``100 Continue`` says the head was parsed and the body is being read when
    the bad chunk size arrives."""
    node = python_parser_node
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        api = Api(session, node.url)
        catalog = await api.new_catalog()
        head = post(catalog.path + "/namespaces", b"", "Transfer-Encoding: chunked")
        head = head.replace(b"\r\n\r\n", b"\r\nExpect: 100-continue\r\n\r\n", 1)
        reader, writer = await asyncio.open_connection("127.0.0.1", node.port)
        try:
            writer.write(head)
            await writer.drain()
            async with asyncio.timeout(BOUND_S):
                continued = await reader.readuntil(b"\r\n\r\n")
                assert continued.startswith(b"HTTP/1.1 100 Continue"), continued
                writer.write(b'5\r\n{"nam\r\nzz\r\n')  # a first chunk, then a size not in hex
                await writer.drain()
                received = await reader.read()  # until the node closes
        finally:
            writer.close()
        head_text, _, body = received.partition(b"\r\n\r\n")
        assert head_text.startswith(b"HTTP/1.1 400 "), received
        error = json.loads(body)["error"]
        assert error["type"] == "BadRequestException", error
        assert error["message"].startswith("the request body cannot be read: "), error
        assert_status(await api.get(catalog.ns("x")), 404)


async def test_a_client_leaving_mid_body_is_logged_as_gone_not_as_an_error(
    node: NodeProcess, api: Api, catalog: Catalog
) -> None:
    """A 499 access line and no traceback (the module's fixture checks the whole log)."""
    path = catalog.path + "/namespaces"
    _, writer = await asyncio.open_connection("127.0.0.1", node.port)
    head = post(path, b"x" * 100)  # a Content-Length of 100
    writer.write(head[: len(head) - 90])  # the head and 10 bytes of the body
    await writer.drain()
    writer.close()
    await writer.wait_closed()
    line = f"POST {path} 499 "
    async with asyncio.timeout(BOUND_S):  # the line appears once the node saw the close
        # the log is another process's file: nothing to await but its growth
        while line not in node.log_path.read_text(errors="replace"):  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    assert_status(await api.get(catalog.ns("x")), 404)
