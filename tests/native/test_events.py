"""The change feed over real HTTP against a real node: JSON pages, cursors, the SSE stream."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from harness.node import NodeProcess
from tests.native.support import Api, Catalog, assert_error, assert_status, entity_ref

pytestmark = pytest.mark.asyncio


async def feed(catalog: Catalog, **params: str | int) -> dict[str, Any]:
    return assert_status(await catalog.api.get(f"{catalog.path}/events", **params), 200)


async def whole_feed(catalog: Catalog, limit: int = 100) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    after: dict[str, str] = {}
    while True:
        page = await feed(catalog, limit=limit, **after)
        events += page["events"]
        after = {"after": page["next"]}
        if not page["more"]:
            return events


async def history_oldest_first(catalog: Catalog) -> list[dict[str, Any]]:
    return list(reversed(await catalog.history()))


async def test_one_event_per_entity_change_in_commit_order(catalog: Catalog) -> None:
    await catalog.create_namespace("sales")
    await catalog.create(("sales",), "orders", properties={"a": "1"})
    table = catalog.entity(("sales",), "orders")
    await catalog.api.ok("POST", table, {"updates": {"a": "2"}})
    rename = {
        "source": entity_ref("table", "sales", "orders"),
        "destination": entity_ref("table", "sales", "orders2"),
    }
    assert_status(await catalog.api.post(f"{catalog.path}/rename", rename), 200, 204)
    assert_status(await catalog.api.delete(catalog.entity(("sales",), "orders2")), 204)

    events = await whole_feed(catalog)
    got = [(e["operation"], e["kind"], e["name"]) for e in events]
    assert got == [
        ("create", "catalog", ["c"]),
        ("create", "namespace", ["sales"]),
        ("create", "table", ["sales", "orders"]),
        ("update", "table", ["sales", "orders"]),
        ("rename", "table", ["sales", "orders2"]),
        ("drop", "table", ["sales", "orders2"]),
    ]
    versions = [(e["before-version"], e["after-version"]) for e in events[2:]]
    assert versions == [(None, 1), (1, 2), (2, 3), (3, None)]
    assert events[4]["previous-name"] == ["sales", "orders"]
    assert len({e["entity-id"] for e in events[2:]}) == 1  # one table throughout
    commits = await history_oldest_first(catalog)
    assert [e["commit-id"] for e in events] == [c["id"] for c in commits]
    for event, commit in zip(events, commits, strict=True):
        assert event["principal"] == commit["principal"] == "anonymous"
        assert event["commit-operation"] == commit["operation"]
        assert event["index"] == 0
    # page by page, one event a page: the same events, each once
    assert await whole_feed(catalog, limit=1) == events


async def test_drop_keeps_and_undrop_restores(catalog: Catalog) -> None:
    await catalog.create_namespace("n")
    await catalog.create(("n",), "t")
    table = catalog.entity(("n",), "t")
    assert_status(await catalog.api.delete(table), 204)
    assert_status(await catalog.api.post(f"{table}/undrop", {}), 200, 201)
    events = (await whole_feed(catalog))[2:]
    got = [(e["operation"], e["name"], e["before-version"], e["after-version"]) for e in events]
    assert got == [
        ("create", ["n", "t"], None, 1),
        ("drop", ["n", "t"], 1, None),
        ("undrop", ["n", "t"], None, 3),  # the kept version was 2
    ]
    assert events[1]["kept"] is True
    assert len({e["entity-id"] for e in events}) == 1


async def test_a_multi_entity_commit_is_one_event_per_entity(catalog: Catalog) -> None:
    await catalog.create_namespace("n")
    body = {
        "changes": [
            {"action": "create", "entity": entity_ref("table", "n", f"t{i}")} for i in range(3)
        ]
    }
    assert_status(await catalog.commit(body), 200)
    events = (await feed(catalog, after=await cursor_at_commit(catalog, 2)))["events"]
    assert [(e["name"], e["index"]) for e in events] == [
        (["n", "t0"], 0),
        (["n", "t1"], 1),
        (["n", "t2"], 2),
    ]
    assert len({e["commit-id"] for e in events}) == 1
    # resuming inside the commit: the rest of its events, nothing twice
    rest = (await feed(catalog, after=events[0]["id"]))["events"]
    assert [e["name"] for e in rest] == [["n", "t1"], ["n", "t2"]]


async def cursor_at_commit(catalog: Catalog, seq: int) -> str:
    """The cursor after every event of the ``seq``-th commit (1 = the root)."""
    events = await whole_feed(catalog)
    return [e["id"] for e in events if e["commit-seq"] == seq][-1]


async def test_after_head_and_polling_with_next(catalog: Catalog) -> None:
    await catalog.create_namespace("n")
    page = await feed(catalog, after="head")
    assert page["events"] == [] and page["more"] is False
    again = await feed(catalog, after=page["next"])
    assert again["events"] == [] and again["next"] == page["next"]
    await catalog.create_namespace("m")
    news = await feed(catalog, after=page["next"])
    assert [e["name"] for e in news["events"]] == [["m"]]


async def test_cloudevents_envelope(catalog: Catalog) -> None:
    await catalog.create_namespace("n")
    page = await feed(catalog, format="cloudevents")
    event = page["events"][-1]
    assert event["specversion"] == "1.0"
    assert event["type"] == "metastore.namespace.create"
    assert event["source"] == f"/api/v1/tenants/{catalog.tenant}/catalogs/c"
    assert event["subject"] == "n" and event["time"].endswith("Z")
    assert event["id"] == event["data"]["id"]
    reply = await catalog.api.call(
        "GET", f"{catalog.path}/events", headers={"Accept": "application/cloudevents-batch+json"}
    )
    batch = assert_status(reply, 200)
    assert isinstance(batch, list) and batch[-1]["id"] == event["id"]
    assert reply.headers["Metastore-Next-Cursor"] == page["next"]


def forge(cursor: str, **changes: Any) -> str:
    payload = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    payload.update(changes)
    raw = json.dumps(payload).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


async def test_bad_cursors_and_limits_are_400(api: Api, catalog: Catalog) -> None:
    await catalog.create_namespace("n")
    good = (await feed(catalog))["events"][-1]["id"]
    other = await api.new_catalog("d")
    foreign = (await feed(other))["next"]
    bad = [
        "garbage",
        "",  # (empty = from the start: not an error; checked below)
        base64.urlsafe_b64encode(b"[1,2]").decode(),
        forge(good, v=9),
        forge(good, c="1"),
        forge(good, i=-1),
        forge(good, c=1 << 70),
        forge(good, c=12345),  # a commit that is not on the history at that seq
        forge(good, s=10_000),  # past HEAD
        foreign,  # another catalog's
        "x" * 1000,
    ]
    for cursor in bad:
        reply = await api.get(f"{catalog.path}/events", after=cursor)
        if cursor == "":
            assert_status(reply, 200)
            continue
        assert_error(reply, 400, "BadRequestException")
    for limit in ("0", "1001", "-1", "x", "1e3"):
        reply = await api.get(f"{catalog.path}/events", limit=limit)
        assert_error(reply, 400, "BadRequestException")
    reply = await api.get(f"{catalog.path}/events", format="xml")
    assert_error(reply, 400, "BadRequestException")
    reply = await api.get(f"/api/v1/tenants/{catalog.tenant}/catalogs/nope/events")
    assert reply.status == 404


# --- the live stream ---------------------------------------------------------------------


class Stream:
    """A Server-Sent Events reader over a real HTTP response."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response
        self.last_id: str | None = None
        self.heartbeats = 0

    async def next_event(self) -> dict[str, Any] | None:
        """The next event with data (``id``-only messages move ``last_id``); None at EOF."""
        fields: dict[str, str] = {}
        while True:
            raw = await self.response.content.readline()
            if not raw:
                return None
            line = raw.decode().rstrip("\n")
            if line.startswith(":"):
                self.heartbeats += line.startswith(": heartbeat")
            elif line == "":
                if "id" in fields:
                    self.last_id = fields["id"]
                if "data" in fields:
                    data: dict[str, Any] = json.loads(fields["data"])
                    data["_event"] = fields.get("event", "message")
                    return data
                fields = {}
            else:
                name, _, value = line.partition(": ")
                fields[name] = value


async def open_stream(
    session: aiohttp.ClientSession, url: str, last_id: str | None = None, **params: str
) -> AsyncIterator[Stream]:
    headers = {"Accept": "text/event-stream"}
    if last_id is not None:
        headers["Last-Event-ID"] = last_id
    async with session.get(url, headers=headers, params=params) as response:
        assert response.status == 200, await response.text()
        assert response.headers["Content-Type"].startswith("text/event-stream")
        yield Stream(response)


async def test_stream_follows_commits_and_resumes_with_last_event_id(catalog: Catalog) -> None:
    await catalog.create_namespace("a")
    url = f"{catalog.api.base_url}{catalog.path}/events"
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        streams = open_stream(session, url, heartbeat="0.05")
        stream = await anext(streams)
        first = [await stream.next_event(), await stream.next_event()]
        assert [e["name"] for e in first if e] == [["c"], ["a"]]
        await catalog.create_namespace("b")
        live = await stream.next_event()
        assert live is not None and live["name"] == ["b"] and live["_event"] == "message"
        while stream.heartbeats == 0:  # heartbeats arrive while nothing happens
            line = await stream.response.content.readline()
            assert line, "the stream ended"
            stream.heartbeats += line.startswith(b": heartbeat")
        resume = stream.last_id
        await streams.aclose()

        await catalog.create_namespace("c1")
        await catalog.create_namespace("c2")
        again = open_stream(session, url, last_id=resume)
        stream = await anext(again)
        got = [await stream.next_event(), await stream.next_event()]
        assert [e["name"] for e in got if e] == [["c1"], ["c2"]]
        await again.aclose()
    history = await history_oldest_first(catalog)
    assert [e["commit-id"] for e in [*first, live, *got] if e] == [c["id"] for c in history]


async def test_stream_of_cloudevents(catalog: Catalog) -> None:
    await catalog.create_namespace("a")
    url = f"{catalog.api.base_url}{catalog.path}/events"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        streams = open_stream(session, url, format="cloudevents")
        stream = await anext(streams)
        events = [await stream.next_event(), await stream.next_event()]
        await streams.aclose()
    assert [e["type"] for e in events if e] == [
        "metastore.catalog.create",
        "metastore.namespace.create",
    ]
    assert all(e and e["id"] == e["data"]["id"] for e in events)
    assert events[-1] is not None and stream.last_id == events[-1]["id"]


async def test_stream_with_a_bad_cursor_is_400_before_streaming(catalog: Catalog) -> None:
    reply = await catalog.api.call(
        "GET",
        f"{catalog.path}/events",
        headers={"Accept": "text/event-stream", "Last-Event-ID": "garbage"},
    )
    assert_error(reply, 400, "BadRequestException")


async def test_stream_ends_cleanly_when_the_node_stops(tmp_path: Any) -> None:
    node = NodeProcess(tmp_path / "data", log_path=tmp_path / "node.log")
    with node:
        url = f"{node.url}/api/v1/tenants/default/catalogs/default/events"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
            streams = open_stream(session, url)
            stream = await anext(streams)
            assert (await stream.next_event()) is not None  # the catalog's creation
            stopping = asyncio.get_running_loop().run_in_executor(None, node.stop)
            while (await stream.next_event()) is not None:
                pass  # the stream ends with a clean end of body, not a broken connection
            assert stream.response.content.at_eof()
            assert await stopping == 0
            await streams.aclose()
    log = node.log_path.read_text(errors="replace")
    assert "Traceback" not in log, node.log_tail(60)
