"""Fixtures for the HTTP API tests: one real node (a child process) per test module."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest

from harness.node import NodeProcess
from tests.native.support import TIMEOUT, Api, Catalog


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """A node shared by one module; each test isolates itself in its own tenant."""
    root = tmp_path_factory.mktemp("node")
    process = NodeProcess(root / "data", log_path=root / "node.log")
    with process:
        yield process
        assert process.proc is not None and process.proc.poll() is None, (
            f"node died during the module: {process.log_tail()}"
        )
    log = process.log_path.read_text(errors="replace")
    assert "Traceback" not in log, f"the node logged an unhandled error:\n{process.log_tail(60)}"


@pytest.fixture
async def api(node: NodeProcess) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        yield Api(session, node.url)


@pytest.fixture
async def catalog(api: Api) -> Catalog:
    """A fresh tenant with one catalog ``c``."""
    return await api.new_catalog()


CLIENTS = {"alice": "alice-secret-1", "bob": "bob-secret-22"}


@pytest.fixture(scope="module")
def secured_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """A node with authentication on and the clients of ``CLIENTS``, service admins (these
    tests are about who the history names, not about grants)."""
    root = tmp_path_factory.mktemp("secured")
    clients = ",".join(f"{client}:{secret}" for client, secret in CLIENTS.items())
    env = {
        "METASTORE_AUTH": "on",
        "METASTORE_AUTH_CLIENTS": clients,
        "METASTORE_AUTH_ADMINS": ",".join(CLIENTS),
    }
    process = NodeProcess(root / "data", log_path=root / "node.log", env=env)
    with process:
        yield process
    log = process.log_path.read_text(errors="replace")
    assert "Traceback" not in log, f"the node logged an unhandled error:\n{process.log_tail(60)}"
