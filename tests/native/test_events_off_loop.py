"""The change feed never reads the store on the event loop: its pages and a live stream
(its polls of HEAD, its pages, its heartbeats) read in worker threads."""

from __future__ import annotations

import threading
from typing import Any

from aiohttp.test_utils import TestClient

from tests.node.test_reads_off_loop import NATIVE, ReadThreads, client, reads

__all__ = ["client", "reads"]  # the fixtures of the in-process node


async def test_the_feed_and_its_stream_read_off_the_event_loop(
    client: TestClient[Any, Any], reads: ReadThreads
) -> None:
    loop_thread = threading.get_ident()  # the test's loop serves the requests too
    reads.watching = True
    async with client.get(f"{NATIVE}/events") as response:
        assert response.status == 200, await response.text()
        first = await response.json()
    assert reads.reads > 0 and loop_thread not in reads.threads
    headers = {"Accept": "text/event-stream"}
    params = {"after": first["next"], "heartbeat": "0.05"}
    async with client.get(f"{NATIVE}/events", headers=headers, params=params) as stream:
        assert stream.status == 200
        reads.threads.clear()
        before = reads.reads
        body = {"namespace": ["db"], "properties": {}}
        async with client.post(f"{NATIVE}/namespaces", json=body) as created:
            assert created.status == 201
        data = b""
        heartbeats = 0
        while b'"name":["db"]' not in data or heartbeats < 2:
            line = await stream.content.readline()
            assert line, "the stream ended"
            heartbeats += line.startswith(b": heartbeat")
            data += line
    assert reads.reads > before, "the stream read nothing: the test sees no read"
    assert loop_thread not in reads.threads, "the stream read the store on the event loop"
