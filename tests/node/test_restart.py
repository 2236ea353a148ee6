"""Crash and restart: acknowledged writes survive SIGKILL (with and without fsync) and SIGTERM.

Writers keep going until the node dies under them; only what the node
acknowledged before dying is asserted (a request in flight at the kill has an
unknown outcome, and may or may not be there).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from harness.node import NodeProcess
from tests.native.support import (
    TIMEOUT,
    Api,
    Catalog,
    assert_error,
    assert_serial_chain,
    assert_status,
    entity_ref,
)

pytestmark = pytest.mark.slow

WRITERS = 8
ACKS_BEFORE_KILL = 100


@dataclass
class Acked:
    entity_id: str
    version: int
    properties: dict[str, str]


@dataclass
class Writes:
    tables: dict[str, Acked]
    commit_ids: list[str]
    count: int = 0


def node_died(exc: BaseException) -> bool:
    return isinstance(exc, aiohttp.ClientConnectionError | aiohttp.ClientPayloadError)


async def writer(url: str, catalog: Catalog, k: int, writes: Writes, enough: asyncio.Event) -> str:
    """Create a table, then update it through the commit endpoint, until the node dies."""
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        api = Api(session, url)
        cat = Catalog(api, catalog.tenant, catalog.name)

        def acknowledge() -> None:
            writes.count += 1
            if writes.count >= ACKS_BEFORE_KILL:
                enough.set()

        i = 0
        while True:
            name = f"w{k}-{i}"
            try:
                reply = await api.post(cat.ns("ns") + "/tables", {"name": name})
                created = assert_status(reply, 201)
                writes.tables[name] = Acked(created["entity-id"], 1, {})
                acknowledge()
                key = entity_ref("table", "ns", name)
                reply = await cat.commit(
                    {
                        "requirements": [{"type": "assert-version", "entity": key, "version": 1}],
                        "changes": [{"action": "update", "entity": key, "updates": {"i": str(i)}}],
                    }
                )
                outcome = assert_status(reply, 200)
            except Exception as exc:
                if node_died(exc):
                    return f"writer {k} stopped by {type(exc).__name__} after {i} rounds"
                raise
            writes.tables[name] = Acked(created["entity-id"], 2, {"i": str(i)})
            writes.commit_ids.append(outcome["commit-id"])
            acknowledge()
            i += 1


async def check_survivors(api: Api, catalog: Catalog, writes: Writes) -> list[dict[str, object]]:
    history = await catalog.history(page_size=500)
    assert_serial_chain(history)
    ids = {c["id"] for c in history}
    missing = [c for c in writes.commit_ids if c not in ids]
    assert not missing, f"acknowledged commits lost: {missing}"
    tables = assert_status(await api.get(catalog.ns("ns") + "/tables", pageSize=1000))["tables"]
    found = {t["name"]: t for t in tables}
    for name, acked in writes.tables.items():
        table = found.get(name)
        assert table is not None, f"acknowledged table {name} lost ({len(found)} tables found)"
        assert table["entity-id"] == acked.entity_id, (table, acked)
        assert table["version"] >= acked.version, (table, acked)
        if acked.version == 2:
            assert table["properties"] == acked.properties, (table, acked)
    return history


async def check_new_writes(api: Api, catalog: Catalog, history: list[dict[str, object]]) -> None:
    created = await catalog.create(("ns",), "after-restart", {"a": "1"})
    path = catalog.entity(("ns",), "after-restart")
    body = {"updates": {"a": "2"}, "expected-version": 1}
    updated = assert_status(await api.post(path, body))
    assert updated["version"] == 2 and updated["entity-id"] == created["entity-id"], updated
    after = await catalog.history(page_size=500)
    assert_serial_chain(after)
    assert after[2:] == history, "new commits must extend the recovered chain"


@contextlib.asynccontextmanager
async def running(node: NodeProcess) -> AsyncIterator[NodeProcess]:
    """Start off the event loop; on the way out, stop it gracefully if still alive."""
    await asyncio.to_thread(node.start)
    try:
        yield node
    finally:
        if node.proc is not None and node.proc.poll() is None:
            await asyncio.to_thread(node.stop)


async def wait_for_acks(enough: asyncio.Event, writers: list[asyncio.Task[str]]) -> None:
    """Until ``enough`` is set; a writer that fails first raises its error here."""
    waiter = asyncio.create_task(enough.wait())
    try:
        done, _ = await asyncio.wait(
            [waiter, *writers], timeout=30, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        waiter.cancel()
    for task in done:
        if task is not waiter:
            raise AssertionError(f"a writer ended before the kill: {task.result()}")
    assert enough.is_set(), "writers made no progress in 30 s"


@pytest.mark.parametrize("fsync", ["--fsync", "--no-fsync"])
async def test_acknowledged_writes_survive_sigkill(tmp_path: Path, fsync: str) -> None:
    data = tmp_path / "data"
    first = NodeProcess(data, extra_args=(fsync,), log_path=tmp_path / "first.log")
    writes = Writes({}, [])
    async with running(first):
        async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
            catalog = await Api(session, first.url).new_catalog()
            await catalog.create_namespace("ns")
        enough = asyncio.Event()
        tasks = [
            asyncio.create_task(writer(first.url, catalog, k, writes, enough))
            for k in range(WRITERS)
        ]
        try:
            await wait_for_acks(enough, tasks)
            acked_at_kill = writes.count
            await asyncio.to_thread(first.kill)  # SIGKILL with the writers still writing
            stops = await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)
        finally:
            for task in tasks:
                task.cancel()
        assert len(stops) == WRITERS, stops
    assert first.proc is not None and first.proc.returncode == -9, first.proc
    assert writes.count >= acked_at_kill >= ACKS_BEFORE_KILL

    second = NodeProcess(data, extra_args=(fsync,), log_path=tmp_path / "second.log")
    async with running(second):
        async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
            api = Api(session, second.url)
            catalog = Catalog(api, catalog.tenant, catalog.name)
            history = await check_survivors(api, catalog, writes)
            await check_new_writes(api, catalog, history)
            health = assert_status(await api.get("/health"))
            assert health["writable"] is True, health
        assert await asyncio.to_thread(second.stop) == 0, second.log_tail()
    assert "Traceback" not in second.log_path.read_text(), second.log_tail(60)


async def test_graceful_stop_exits_zero_and_keeps_data(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = NodeProcess(data, log_path=tmp_path / "first.log")
    writes = Writes({}, [])
    async with running(first):
        async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
            api = Api(session, first.url)
            catalog = await api.new_catalog()
            await catalog.create_namespace("ns", properties={"p": "1"})
            for i in range(10):
                table = await catalog.create(("ns",), f"t{i}")
                writes.tables[f"t{i}"] = Acked(table["entity-id"], 1, {})
        assert await asyncio.to_thread(first.stop) == 0, first.log_tail()

    second = NodeProcess(data, log_path=tmp_path / "second.log")
    async with running(second):
        async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
            api = Api(session, second.url)
            catalog = Catalog(api, catalog.tenant, catalog.name)
            history = await check_survivors(api, catalog, writes)
            assert len(history) == 12, history  # catalog, namespace, ten tables
            ns = assert_status(await api.get(catalog.ns("ns")))
            assert ns["properties"] == {"p": "1"}, ns
            await check_new_writes(api, catalog, history)
            reply = await api.get(f"/api/v1/tenants/{catalog.tenant}/catalogs/nope")
            assert_error(reply, 404, "NoSuchWarehouseException")
        assert await asyncio.to_thread(second.stop) == 0, second.log_tail()
    for log in (first.log_path, second.log_path):
        assert "Traceback" not in log.read_text(), log.read_text()[-3000:]
