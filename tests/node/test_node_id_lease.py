"""A node resumed after its node-id lease ran out (a stopped process, a suspended
machine) renews the lease on its first write and answers it: no 503, no restart.

The node stops minting ids a sixth of the lease before its end (``metastore.engine.leases``);
nobody took its node id over while it was stopped, so the renewal succeeds at once
(``metastore.engine.lease_keeper``).
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import aiohttp
import pytest

from harness.node import NodeProcess
from tests.native.support import TIMEOUT, Api, assert_status

pytestmark = pytest.mark.slow

LEASE_S = 3


async def test_a_node_resumed_past_its_lease_renews_it_on_the_first_write(tmp_path: Path) -> None:
    env = {"METASTORE_LEASE_SECONDS": str(LEASE_S)}
    node = NodeProcess(tmp_path / "data", env=env, log_path=tmp_path / "n.log").start()
    assert node.proc is not None
    try:
        async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
            api = Api(session, node.url)
            catalog = await api.new_catalog()
            before = assert_status(await api.get("/health"))["node-id"]
            node.proc.send_signal(signal.SIGSTOP)
            try:
                await asyncio.sleep(LEASE_S + 1)  # past the lease's end, let alone the margin
            finally:
                node.proc.send_signal(signal.SIGCONT)
            await catalog.create_namespace("after")  # 201, not 503
            health = assert_status(await api.get("/health"))
            assert health["writable"] is True and health["node-id"] == before, health
    finally:
        node.proc.send_signal(signal.SIGCONT)
        node.stop()
    log = node.log_path.read_text(errors="replace")
    assert "lost the lease" not in log and "Traceback" not in log, log[-3000:]
