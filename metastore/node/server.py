"""Serving the app: aiohttp's runner behind a connection limit, with deadlines on requests.

A client that opens connections and sends nothing, or its request head one
byte at a time, would otherwise hold a socket and a file descriptor for as long
as it likes; enough of them starve everyone else. Three bounds, each a setting:

- ``header_timeout_s``: aiohttp closes a connection that has not delivered a
  complete request head within this long of opening, or of answering its
  previous request (its keep-alive timer, armed when the connection opens, closes
  a connection that is still waiting for a request). So it is also how long an
  idle keep-alive connection stays open, and it should exceed the idle limit of
  clients that reuse connections (15 s for aiohttp's client, which forwards writes
  between nodes), or a client may send on a connection the node is just closing.
- ``body_timeout_s``: the ``read_body`` middleware answers 408 and closes the
  connection when the body takes longer.
- ``max_connections``: past this many open connections, a new one is answered
  503 and closed at once, so the node keeps its descriptors and memory and the
  connections it has keep being served.

Each connection is served by ``ProtocolErrors`` (aiohttp's request handler answering
its own refusals in the node's error shape, ``metastore.http.protocol_errors``), with
the parser's body decoding off: ``receive`` decodes within the body limit
(``metastore.http.body_coding``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
import time
from collections.abc import Callable
from ssl import SSLContext
from typing import Any

from aiohttp import web

from metastore.config.server_config import ServerConfig
from metastore.http.protocol_errors import ProtocolErrors
from metastore.http.shutdown import Shutdown
from metastore.http.typedefs import SHUTDOWN
from metastore.node.heap import (
    freeze_survivors,
    reclaim_every,
    settle_after_startup,
    stop_freezing_survivors,
)
from metastore.node.lifecycle_lines import ignored_line, serving_line, stopped_line
from metastore.util import cpu_pinning

log = logging.getLogger(__name__)

SHUTDOWN_TIMEOUT_S = 10.0  # in-flight requests get this long after SIGTERM
SWITCH_INTERVAL_S = 0.001  # the interpreter lock's switch interval while serving


def _refusal() -> bytes:
    body = json.dumps(
        {
            "error": {
                "message": "too many open connections; retry later",
                "type": "ServiceUnavailableException",
                "code": 503,
            }
        }
    ).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


REFUSAL = _refusal()


class _Refused(asyncio.Protocol):
    """A connection past the limit: answered 503 before reading anything, then closed."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(REFUSAL)
        transport.close()


class _Counted(asyncio.Protocol):
    """aiohttp's protocol for one connection, counted until the connection is lost."""

    def __init__(self, inner: asyncio.Protocol, release: Callable[[], None]) -> None:
        self._inner = inner
        self._release: Callable[[], None] | None = release

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._release is not None:
            self._release()
            self._release = None
        self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


class ConnectionLimit:
    """A protocol factory: aiohttp's for up to ``limit`` open connections, a refusal past it.

    The count covers every connection from its accept to its close, so a burst of
    accepts in one loop iteration cannot overshoot the limit.
    """

    def __init__(self, factory: Callable[[], asyncio.Protocol], limit: int) -> None:
        self._factory = factory
        self.limit = limit
        self.open = 0
        self.refused = 0

    def __call__(self) -> asyncio.Protocol:
        if self.open >= self.limit:
            self.refused += 1
            return _Refused()
        self.open += 1
        return _Counted(self._factory(), self._closed)

    def _closed(self) -> None:
        self.open -= 1


def run(
    app: web.Application, config: ServerConfig, ssl_context: SSLContext | None = None
) -> str | None:
    """Serve ``app`` until SIGTERM or SIGINT, or until the node asks to stop
    (``metastore.http.shutdown``), then stop gracefully; why the node asked, if it did
    (OSError if it cannot listen)."""
    return asyncio.run(_serve(app, config, ssl_context))


async def _serve(
    app: web.Application, config: ServerConfig, ssl_context: SSLContext | None
) -> str | None:
    loop = asyncio.get_running_loop()
    shutdown = app[SHUTDOWN] = Shutdown(loop)  # the contexts may ask for a stop too
    stop = shutdown.event
    signalled: list[str] = []  # which signal stopped the node, for its last line

    def on_signal(signum: signal.Signals) -> None:
        signalled.append(signum.name)
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal, signum)
    ignored = ignored_line(config)
    if ignored is not None:
        log.warning("%s", ignored)
    # before the app starts any thread: they all inherit the CPU (``cpu_pinning``)
    pinned = config.pinned_cpu
    cpus = None if pinned is None else cpu_pinning.pin(pinned)
    handler_args: dict[str, Any] = {
        "keepalive_timeout": config.header_timeout_s,
        "auto_decompress": False,  # bodies are decoded within their limit (``body_coding``)
    }
    runner = web.AppRunner(app, shutdown_timeout=SHUTDOWN_TIMEOUT_S, **handler_args)
    try:
        await runner.setup()
    except BaseException:
        # close what the cleanup contexts opened before the one that failed
        await runner.cleanup()
        raise
    if cpus is not None:  # the store is open: its background threads exist
        cpu_pinning.free_background(cpus)
    settle_after_startup()  # the app and its state are loaded: freeze them (``heap``)
    freeze_survivors()  # and from now on what each full collection leaves
    reclaimer = asyncio.create_task(reclaim_every(config.gc_reclaim_s))
    # The loop shares the interpreter lock with the commit threads; a thread that wants
    # it waits up to the switch interval while another computes. 1 ms instead of 5 lets
    # the loop answer between a batch's steps (``make bench``: +15-30 % commits/s).
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        manager = runner.server
        assert manager is not None

        def handler() -> ProtocolErrors:  # what ``manager()`` makes, refusing in our shape
            return ProtocolErrors(manager, loop=loop, **handler_args)

        limit = ConnectionLimit(handler, config.max_connections)
        server = await loop.create_server(
            limit, config.host, config.port, ssl=ssl_context, reuse_address=True
        )
        log.info("%s", serving_line(config, "https" if ssl_context else "http"))
        serving_since = time.monotonic()
        try:
            await stop.wait()
        finally:
            server.close()  # no new connections; runner.cleanup() ends the open ones
    finally:
        reclaimer.cancel()
        stop_freezing_survivors()
        await runner.cleanup()
    why = signalled[0] if signalled else "its own request"
    log.info("%s", stopped_line(time.monotonic() - serving_since, why))
    return shutdown.reason
