"""A thin HTTP client for the API tests: every call returns a ``Reply`` that can describe itself.

Nothing here is a mock: the tests talk HTTP to a real node (a child process).
Failures quote the request and the response body, so a red test says what the
server answered.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
from yarl import URL

SEP = "\x1f"  # namespace level separator in paths and ?parent=, as in the Iceberg REST spec
TIMEOUT = aiohttp.ClientTimeout(total=60)
_NO_BODY = object()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def seg(levels: str | tuple[str, ...] | list[str]) -> str:
    """One URL path segment: namespace levels joined by 0x1F, percent-encoded."""
    text = levels if isinstance(levels, str) else SEP.join(levels)
    return quote(text, safe="")


@dataclass(frozen=True)
class Reply:
    method: str
    path: str
    status: int
    text: str
    body: Any
    headers: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        return f"{self.method} {self.path} -> {self.status}: {self.text[:3000]}"


def assert_status(reply: Reply, *statuses: int) -> Any:
    """The parsed body of a reply whose status is one of ``statuses`` (default 200)."""
    statuses = statuses or (200,)
    assert reply.status in statuses, f"expected {statuses}; {reply.describe()}"
    return reply.body


def assert_error(reply: Reply, status: int, error_type: str | None = None) -> dict[str, Any]:
    """The Iceberg error shape: {"error": {"message": str, "type": str, "code": status}}."""
    assert reply.status == status, f"expected {status}; {reply.describe()}"
    assert isinstance(reply.body, dict) and set(reply.body) == {"error"}, reply.describe()
    error = reply.body["error"]
    assert isinstance(error, dict), reply.describe()
    assert isinstance(error.get("message"), str) and error["message"], reply.describe()
    assert isinstance(error.get("type"), str) and error["type"], reply.describe()
    assert error.get("code") == status and type(error["code"]) is int, reply.describe()
    if error_type is not None:
        assert error["type"] == error_type, f"expected {error_type}; {reply.describe()}"
    return error


class Api:
    """Requests against one node; paths are sent exactly as written (already encoded)."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str) -> None:
        self.session = session
        self.base_url = base_url.rstrip("/")

    async def call(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = _NO_BODY,
        data: Any = None,
        params: Mapping[str, str | int] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        target = path + ("?" + urlencode(params, quote_via=quote) if params else "")
        kwargs: dict[str, Any] = {"headers": headers}
        if json_body is not _NO_BODY:
            kwargs["data"] = json.dumps(json_body)
            kwargs["headers"] = {"Content-Type": "application/json", **(headers or {})}
        elif data is not None:
            kwargs["data"] = data
        url = URL(self.base_url + target, encoded=True)
        async with self.session.request(method, url, **kwargs) as response:
            text = await response.text()
            headers = dict(response.headers)
        try:
            body = json.loads(text) if text else None
        except ValueError:
            body = None
        return Reply(method, target, response.status, text, body, headers)

    async def get(self, path: str, **params: str | int) -> Reply:
        return await self.call("GET", path, params=params or None)

    async def post(self, path: str, body: Any) -> Reply:
        return await self.call("POST", path, json_body=body)

    async def delete(self, path: str) -> Reply:
        return await self.call("DELETE", path)

    async def ok(self, method: str, path: str, body: Any = _NO_BODY, status: int = 200) -> Any:
        reply = await self.call(method, path, json_body=body)
        return assert_status(reply, status)

    async def create_tenant(self, name: str, properties: dict[str, str] | None = None) -> Any:
        body = {"name": name, "properties": properties or {}}
        return await self.ok("POST", "/api/v1/tenants", body, 201)

    async def create_catalog(
        self, tenant: str, name: str, properties: dict[str, str] | None = None
    ) -> Catalog:
        body = {"name": name, "properties": properties or {}}
        await self.ok("POST", f"/api/v1/tenants/{tenant}/catalogs", body, 201)
        return Catalog(self, tenant, name)

    async def new_catalog(self, name: str = "c") -> Catalog:
        """A fresh tenant with one catalog: isolates one test's state on a shared node."""
        tenant = unique("t")
        await self.create_tenant(tenant)
        return await self.create_catalog(tenant, name)


@dataclass(frozen=True)
class Catalog:
    api: Api
    tenant: str
    name: str

    @property
    def path(self) -> str:
        return f"/api/v1/tenants/{self.tenant}/catalogs/{self.name}"

    def ns(self, *levels: str) -> str:
        return f"{self.path}/namespaces/{seg(levels)}"

    def entity(self, namespace: tuple[str, ...], name: str, kind: str = "tables") -> str:
        return f"{self.ns(*namespace)}/{kind}/{quote(name, safe='')}"

    async def ref(self) -> dict[str, Any]:
        body: dict[str, Any] = await self.api.ok("GET", self.path + "/ref")
        return body

    async def head(self) -> str:
        return str((await self.ref())["head"])

    async def create_namespace(self, *levels: str, properties: dict[str, str] | None = None) -> Any:
        body = {"namespace": list(levels), "properties": properties or {}}
        return await self.api.ok("POST", self.path + "/namespaces", body, 201)

    async def create(
        self,
        namespace: tuple[str, ...],
        name: str,
        properties: dict[str, str] | None = None,
        kind: str = "tables",
        location: str | None = None,
    ) -> Any:
        body: dict[str, Any] = {"name": name, "properties": properties or {}}
        if location is not None:
            body["location"] = location
        return await self.api.ok("POST", f"{self.ns(*namespace)}/{kind}", body, 201)

    async def commit(self, body: dict[str, Any]) -> Reply:
        return await self.api.post(self.path + "/commit", body)

    async def history(self, page_size: int = 100) -> list[dict[str, Any]]:
        """Every commit of the main ref, newest first, walking all pages."""
        commits: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            params: dict[str, str | int] = {"pageSize": page_size}
            if token:
                params["pageToken"] = token
            reply = await self.api.call("GET", self.path + "/commits", params=params)
            page = assert_status(reply, 200)
            commits += page["commits"]
            token = page["next-page-token"]
            if not token:
                return commits
            assert len(commits) < 1_000_000, "history paging does not terminate"


def entity_ref(kind: str, *path: str) -> dict[str, Any]:
    return {"kind": kind, "path": list(path)}


def assert_serial_chain(history: list[dict[str, Any]]) -> None:
    """One serial chain: parent links the next older commit, seq falls by 1 down to 1."""
    assert history, "empty history"
    ids = [c["id"] for c in history]
    assert len(set(ids)) == len(ids), f"duplicate commit ids in history: {ids}"
    for newer, older in itertools.pairwise(history):
        assert newer["parent"] == older["id"], f"broken parent link: {newer} -> {older}"
        assert newer["seq"] == older["seq"] + 1, f"seq not consecutive: {newer} -> {older}"
    assert history[-1]["seq"] == 1 and history[-1]["parent"] is None, history[-1]
    assert all(isinstance(i, str) and i.isdigit() for i in ids), ids
