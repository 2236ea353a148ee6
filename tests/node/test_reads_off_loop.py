"""The event loop never waits on the store: a read that needs the database runs in a
thread, and only a point read the node's memory answers runs on the loop.

A node is built in-process (the real engine over a real RocksDB) and driven over
real HTTP on the test's event loop. The database notes the thread of every access
that reaches it (``RocksDB._live``) while ``watching``. With refs never remembered
(each request then reads at least its catalog's ref from the database) the read
routes of both APIs (listings, gets, exists, history, tenants, catalogs,
configuration), the writes that set up what they read and, with auth on, the
token's checks and a token's issue must never reach the database on the loop's
thread. With refs remembered, a repeated table load reads nothing from the
database, and is answered on the loop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from metastore.config.server_config import ServerConfig
from metastore.node.app import create_app
from metastore.persistence.rocksdb import RocksDB

SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
}
ICEBERG = "/v1/default"  # the default tenant's default catalog
NATIVE = "/api/v1/tenants/default/catalogs/default"
# the node keeps request state under string keys; it runs as a child process elsewhere,
# where aiohttp's advice is not an error


class ReadThreads:
    """Which threads reached RocksDB while ``watching``: the real database's accesses."""

    def __init__(self) -> None:
        self.watching = False
        self.threads: set[int] = set()
        self.reads = 0

    def note(self) -> None:
        if self.watching:
            self.threads.add(threading.get_ident())
            self.reads += 1

    def wrap(self, live: Callable[[RocksDB], Any]) -> Callable[[RocksDB], Any]:
        def noted(db: RocksDB) -> Any:
            found = live(db)  # refuses first on the loop when only memory may answer
            self.note()
            return found

        return noted


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> ReadThreads:
    noted = ReadThreads()
    monkeypatch.setattr(RocksDB, "_live", noted.wrap(RocksDB._live))
    return noted


@pytest.fixture
def forgetful(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refs are never remembered: every request reads the database at least once."""

    def get_remembered(db: RocksDB, key: bytes) -> bytes | None:
        return db.get(key)

    monkeypatch.setattr(RocksDB, "get_remembered", get_remembered)


ROOT_SECRET = "a-secret-long-enough-for-the-bootstrap-client-0123456789"


@pytest.fixture(params=["auth off", "auth on"])
async def client(
    tmp_path: Path, reads: ReadThreads, request: pytest.FixtureRequest
) -> AsyncIterator[TestClient[Any, Any]]:
    """A node with auth off, and one with auth on whose every request carries the
    bootstrap service admin's token (authenticated, its record checked, authorized)."""
    if request.param == "auth off":
        config = ServerConfig(data_dir=tmp_path / "data")
    else:
        config = ServerConfig(
            data_dir=tmp_path / "data",
            auth="on",
            auth_clients=f"root:{ROOT_SECRET}",
            auth_admins="root",
        )
    async with TestClient(TestServer(create_app(config))) as client:
        if request.param == "auth on":
            form = {
                "grant_type": "client_credentials",
                "client_id": "root",
                "client_secret": ROOT_SECRET,
            }
            async with client.post("/v1/oauth/tokens", data=form) as response:
                assert response.status == 200, await response.text()
                token = (await response.json())["access_token"]
            client.session.headers["Authorization"] = f"Bearer {token}"
        yield client


async def _call(
    client: TestClient[Any, Any], method: str, path: str, status: int, body: Any = None
) -> Any:
    async with client.request(method, path, json=body) as response:
        text = await response.text()
        assert response.status == status, f"{method} {path}: {response.status} {text}"
        return await response.json() if text and method != "HEAD" else None


def _view_body(name: str) -> dict[str, Any]:
    version = {
        "version-id": 1,
        "timestamp-ms": int(time.time() * 1000),
        "schema-id": 0,
        "summary": {},
        "representations": [{"type": "sql", "sql": "select 1", "dialect": "spark"}],
        "default-namespace": ["db"],
    }
    return {"name": name, "schema": SCHEMA, "view-version": version, "properties": {}}


READS: Sequence[tuple[str, str, int]] = (
    ("GET", "/v1/config", 200),
    ("GET", f"{ICEBERG}/namespaces", 200),
    ("GET", f"{ICEBERG}/namespaces/db", 200),
    ("HEAD", f"{ICEBERG}/namespaces/db", 204),
    ("GET", f"{ICEBERG}/namespaces/nope", 404),
    ("GET", f"{ICEBERG}/namespaces/db/tables", 200),
    ("GET", f"{ICEBERG}/namespaces/db/tables/t", 200),
    ("HEAD", f"{ICEBERG}/namespaces/db/tables/t", 204),
    ("HEAD", f"{ICEBERG}/namespaces/db/tables/nope", 404),
    ("GET", f"{ICEBERG}/namespaces/db/views", 200),
    ("GET", f"{ICEBERG}/namespaces/db/views/v", 200),
    ("HEAD", f"{ICEBERG}/namespaces/db/views/v", 204),
    ("GET", "/v1/nope/namespaces", 404),
    ("GET", "/api/v1/tenants", 200),
    ("GET", "/api/v1/tenants/default", 200),
    ("GET", "/api/v1/tenants/nope", 404),
    ("GET", "/api/v1/tenants/default/catalogs", 200),
    ("GET", NATIVE, 200),
    ("GET", f"{NATIVE}/ref", 200),
    ("GET", f"{NATIVE}/commits", 200),
    ("GET", f"{NATIVE}/namespaces", 200),
    ("GET", f"{NATIVE}/namespaces/db", 200),
    ("GET", f"{NATIVE}/namespaces/db/tables", 200),
    ("GET", f"{NATIVE}/namespaces/db/tables/t", 200),
    ("GET", f"{NATIVE}/namespaces/db/views/v", 200),
    ("GET", f"{NATIVE}/namespaces/db/tables/nope", 404),
    ("GET", "/api/v1/tenants/default/commits", 200),
    ("GET", "/api/v1/tenants/default/principals", 200),
)


async def _setup(client: TestClient[Any, Any]) -> None:
    await _call(client, "POST", f"{ICEBERG}/namespaces", 200, {"namespace": ["db"]})
    table = {"name": "t", "schema": SCHEMA}
    await _call(client, "POST", f"{ICEBERG}/namespaces/db/tables", 200, table)
    await _call(client, "POST", f"{ICEBERG}/namespaces/db/views", 200, _view_body("v"))
    update = {"updates": {"k": "v"}, "removals": []}
    await _call(client, "POST", f"{ICEBERG}/namespaces/db/properties", 200, update)
    await _call(client, "POST", f"{NATIVE}/properties", 200, {"updates": {"k": "v"}})


@pytest.mark.usefixtures("forgetful")
async def test_no_request_reads_the_store_on_the_event_loop(
    client: TestClient[Any, Any], reads: ReadThreads
) -> None:
    loop_thread = threading.get_ident()  # the test's loop serves the requests too
    reads.watching = True
    await _setup(client)
    assert reads.reads > 0
    assert loop_thread not in reads.threads, "a write read the store on the event loop"
    if "Authorization" in client.session.headers:  # auth on: issuing a token reads too
        reads.threads.clear()
        before = reads.reads
        form = {"grant_type": "client_credentials", "client_id": "root"}
        async with client.post(
            "/v1/oauth/tokens", data=form | {"client_secret": ROOT_SECRET}
        ) as response:
            assert response.status == 200, await response.text()
        assert reads.reads > before
        assert loop_thread not in reads.threads, "issuing a token read on the event loop"

    for method, path, status in READS:
        reads.threads.clear()
        before = reads.reads
        await _call(client, method, path, status)
        assert reads.reads > before, f"{method} {path} read nothing: the test sees no read"
        assert loop_thread not in reads.threads, f"{method} {path} read on the event loop"

    commit = (await _call(client, "GET", f"{NATIVE}/commits", 200))["commits"][0]["id"]
    reads.threads.clear()
    await _call(client, "GET", f"{NATIVE}/commits/{commit}", 200)
    assert loop_thread not in reads.threads, "GET a commit read on the event loop"


async def test_a_table_load_memory_answers_is_answered_on_the_event_loop(
    client: TestClient[Any, Any], reads: ReadThreads
) -> None:
    await _setup(client)
    loop_thread = threading.get_ident()
    table = f"{ICEBERG}/namespaces/db/tables/t"
    await _call(client, "GET", table, 200)  # what memory lacked is read in a thread
    before = await _point_reads(client)
    reads.watching = True
    loaded = [await _call(client, "GET", table, 200) for _ in range(5)]
    after = await _point_reads(client)
    assert reads.reads == 0, "a repeated load read the database"
    assert loop_thread not in reads.threads
    assert all(body == loaded[0] for body in loaded)
    # each load: the catalog's ref (the prefix's 404), then the load itself
    assert after["on_loop"] - before["on_loop"] >= 5, (before, after)
    assert after["in_thread"] == before["in_thread"], (before, after)


async def _point_reads(client: TestClient[Any, Any]) -> dict[str, int]:
    async with client.get("/metrics") as response:
        text = await response.text()
    found = {}
    for where in ("on_loop", "in_thread"):
        name = f"metastore_point_reads_{where}_total "
        line = next(line for line in text.splitlines() if line.startswith(name))
        found[where] = int(float(line.split()[1]))
    return found
