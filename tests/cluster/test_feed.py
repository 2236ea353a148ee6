"""The change feed across a failover: a consumer following the stream on the owner of
the catalog's partition, which is killed with ``kill -9`` while commits keep coming,
reconnects to the other node with ``Last-Event-ID`` and ends with exactly the commit
history: nothing missed, nothing twice."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from harness.cluster import Cluster
from metastore.catalog.consistency import HEADER
from tests.native.support import TIMEOUT, Api, assert_status, unique

pytestmark = pytest.mark.slow


@dataclass
class Consumer:
    """Follows one catalog's feed, moving to the next node whenever a stream breaks."""

    urls: list[str]
    path: str
    events: list[dict[str, Any]] = field(default_factory=list)
    last_id: str | None = None
    reconnects: list[str] = field(default_factory=list)  # the node each stream was opened on

    async def run(self, session: aiohttp.ClientSession, stop: asyncio.Event) -> None:
        node = 0
        while not stop.is_set():
            url = self.urls[node % len(self.urls)]
            with contextlib.suppress(aiohttp.ClientError, ConnectionError, TimeoutError):
                await self._follow(session, url, stop)
            node += 1  # the node went away (or refused): the next one takes over
            await asyncio.sleep(0.05)

    async def _follow(self, session: aiohttp.ClientSession, url: str, stop: asyncio.Event) -> None:
        headers = {"Accept": "text/event-stream"}
        if self.last_id is not None:
            headers["Last-Event-ID"] = self.last_id
        async with session.get(
            url + self.path, headers=headers, params={"heartbeat": "0.2"}
        ) as response:
            assert response.status == 200, await response.text()
            self.reconnects.append(url)
            fields: dict[str, str] = {}
            while not stop.is_set():
                raw = await response.content.readline()
                if not raw:
                    return
                line = raw.decode().rstrip("\n")
                if line == "":
                    if "data" in fields:
                        self.events.append(json.loads(fields["data"]))
                    if "id" in fields:
                        self.last_id = fields["id"]
                    fields = {}
                elif not line.startswith(":"):
                    name, _, value = line.partition(": ")
                    fields[name] = value


async def _writer(
    worker: int, urls: list[str], base: str, stop: asyncio.Event, session: aiohttp.ClientSession
) -> int:
    rng = random.Random(worker)
    created = 0
    n = 0
    while not stop.is_set():
        n += 1
        try:
            async with session.post(
                rng.choice(urls) + base + "/namespaces/load/tables",
                json={"name": f"w{worker}-{n}"},
                timeout=aiohttp.ClientTimeout(total=90),
            ) as response:
                await response.read()
                created += response.status == 201
        except (aiohttp.ClientError, TimeoutError):
            await asyncio.sleep(0.05)  # the node is down, or the answer was lost
    return created


async def _until(condition: Any, timeout: float, what: str) -> None:  # noqa: ASYNC109
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def test_a_consumer_sees_the_history_exactly_across_an_owner_kill_9(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    cluster = Cluster(kafka_bootstrap, f"f{os.urandom(5).hex()}", tmp_path / "nodes", size=2)
    cluster.start()
    try:
        async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
            api = Api(session, cluster.nodes[0].url)
            tenant = unique("t")
            token = ""
            base = f"/api/v1/tenants/{tenant}/catalogs/c"
            for path, body in [
                ("/api/v1/tenants", {"name": tenant}),
                (f"/api/v1/tenants/{tenant}/catalogs", {"name": "c"}),
                (f"{base}/namespaces", {"namespace": ["load"]}),
            ]:
                reply = await api.call(
                    "POST", path, json_body=body, headers={HEADER: token} if token else None
                )
                assert_status(reply, 201)
                token = reply.headers[HEADER]
            victim = cluster.wait_owner(cluster.partition(tenant, "c"))
            survivor = next(n for n in cluster.nodes if n is not victim)
            # the consumer starts on the owner, and falls over to the survivor
            consumer = Consumer([victim.url, survivor.url], base + "/events")
            stop_reading, stop_writing = asyncio.Event(), asyncio.Event()
            reading = asyncio.create_task(consumer.run(session, stop_reading))
            urls = [n.url for n in cluster.nodes]
            writers = [
                asyncio.create_task(_writer(w, urls, base, stop_writing, session)) for w in range(8)
            ]
            await _until(lambda: len(consumer.events) >= 60, 60, "60 events before the kill")
            victim.kill()
            seen = len(consumer.events)
            await _until(lambda: len(consumer.events) >= seen + 60, 120, "60 events after the kill")
            stop_writing.set()
            created = sum(await asyncio.gather(*writers))
            survivor_api = Api(session, survivor.url)
            commits = list(reversed(await _history(survivor_api, base)))
            head = commits[-1]["id"]
            await _until(
                lambda: bool(consumer.events) and consumer.events[-1]["commit-id"] == head,
                60,
                "the consumer to reach HEAD",
            )
            stop_reading.set()
            reading.cancel()
        assert consumer.reconnects[0] == victim.url and survivor.url in consumer.reconnects[1:]
        got = [(e["commit-id"], e["index"]) for e in consumer.events]
        assert len(set(got)) == len(got), "an event was delivered twice"
        assert [e["commit-id"] for e in consumer.events] == [c["id"] for c in commits]
        tables = [e["name"][-1] for e in consumer.events if e["kind"] == "table"]
        assert len(tables) == len(commits) - 2 >= created  # the catalog, its namespace, tables
        print(f"\nfeed across a kill -9: {len(got)} events, streams on {consumer.reconnects}")
    finally:
        cluster.close()


async def _history(api: Api, base: str) -> list[dict[str, Any]]:
    commits: list[dict[str, Any]] = []
    token = None
    while True:
        params: dict[str, str | int] = {"pageSize": 1000}
        if token:
            params["pageToken"] = token
        page = assert_status(await api.call("GET", base + "/commits", params=params), 200)
        commits += page["commits"]
        token = page["next-page-token"]
        if not token:
            return commits
