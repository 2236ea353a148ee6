"""Hostile input: every case gets a 4xx in the Iceberg error shape and writes nothing.

Where a parser refuses the input (JSON, base64, integers), the answer is in the
node's fixed words (``says``), never the parser's: "Expecting ',' delimiter: line 1
column 7 (char 6)" tells a client nothing it can act on.

"Writes nothing" is checked on the catalog's ref (HEAD and recent heads), the
tenant's catalogs and the tenant list, read before and after each request.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from harness.node import NodeProcess
from metastore.engine.feed import UNREADABLE_CURSOR
from metastore.engine.paging import UNREADABLE_TOKEN
from metastore.errors import MAX_MESSAGE_CHARS
from tests.native.support import (
    SEP,
    TIMEOUT,
    Api,
    Catalog,
    assert_error,
    assert_status,
    entity_ref,
    seg,
    unique,
)

MiB = 1024 * 1024


@dataclass
class Ctx:
    """A catalog with a namespace ``ns`` holding table ``t``, and ids/tokens to misuse."""

    catalog: Catalog
    other: Catalog  # another tenant's catalog
    table_id: str
    other_head: str
    ns_token: str  # a token of the namespace listing of the catalog root
    commits_token: str
    tenants_token: str
    commits_fingerprint: int

    @property
    def path(self) -> str:
        return self.catalog.path

    @property
    def tenant(self) -> str:
        return f"/api/v1/tenants/{self.catalog.tenant}"

    def forged(self, commit_id: int) -> str:
        """A token of this catalog's commit listing that names ``commit_id``."""
        return forged_token(commit_id, self.commits_fingerprint)


@dataclass(frozen=True)
class Req:
    method: str
    path: str
    body: Any = None  # JSON-encoded unless raw
    raw: bytes | None = None
    params: dict[str, str | int] = field(default_factory=dict)
    chunked: bool = False


@dataclass(frozen=True)
class Case:
    id: str
    status: int
    make: Callable[[Ctx], Req]
    error_type: str | None = None
    says: str | None = None  # the whole message, where it is fixed


def forged_token(commit_id: int, listing: int) -> str:
    """A well-formed token (same layout as the server's) naming an arbitrary commit."""
    raw = json.dumps({"v": 1, "c": commit_id, "k": "", "f": listing}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def ns_create(levels: Any) -> Callable[[Ctx], Req]:
    return lambda c: Req("POST", c.path + "/namespaces", {"namespace": levels})


def table_create(name: Any) -> Callable[[Ctx], Req]:
    return lambda c: Req("POST", c.catalog.ns("ns") + "/tables", {"name": name})


def commit(*changes: dict[str, Any], requirements: list[Any] | None = None) -> Callable[[Ctx], Req]:
    body: dict[str, Any] = {"changes": list(changes)}
    if requirements is not None:
        body["requirements"] = requirements
    return lambda c: Req("POST", c.path + "/commit", body)


def raw_ns(data: bytes) -> Callable[[Ctx], Req]:
    return lambda c: Req("POST", c.path + "/namespaces", raw=data)


def create(kind: str, *path: str) -> dict[str, Any]:
    return {"action": "create", "entity": entity_ref(kind, *path)}


def list_ns(**params: str | int) -> Callable[[Ctx], Req]:
    return lambda c: Req("GET", c.path + "/namespaces", params=dict(params))


def iceberg(path: str, **params: str) -> Callable[[Ctx], Req]:
    """A request to the Iceberg API, on the catalog's prefix."""
    return lambda c: Req(
        "GET", f"/v1/{c.catalog.tenant}~{c.catalog.name}{path}", params=dict(params)
    )


def events(after: str) -> Callable[[Ctx], Req]:
    return lambda c: Req("GET", c.path + "/events", params={"after": after})


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


JSON_STOPS = "malformed JSON body: not JSON from line 1, column "


BIG_JSON = b'{"namespace": ["big"], "properties": {"k": "' + b"x" * (2 * MiB) + b'"}}'

CASES = [
    # --- bodies that are not a JSON object ---
    Case("malformed-json", 400, raw_ns(b'{"namespace": ["a"]'), says=JSON_STOPS + "20"),
    Case("json-garbage", 400, raw_ns(b"not json at all"), says=JSON_STOPS + "1"),
    Case("json-missing-comma", 400, raw_ns(b'{"namespace": ["a"] "x": 1}'), says=JSON_STOPS + "21"),
    Case("json-integer-5000-digits", 400, raw_ns(
        b'{"namespace": ["a"], "properties": {"k": 1' + b"0" * 5000 + b"}}"),
        says="malformed JSON body: an integer with too many digits"),
    Case("json-array-top-level", 400, raw_ns(b'[{"namespace": ["a"]}]')),
    Case("json-string-top-level", 400, raw_ns(b'"namespace"')),
    Case("nan-literal", 400, raw_ns(b'{"namespace": ["a"], "properties": {"k": NaN}}'),
        says="malformed JSON body: NaN is not a JSON value"),
    Case("infinity-literal", 400, raw_ns(b'{"namespace": ["a"], "properties": {"k": -Infinity}}'),
        says="malformed JSON body: -Infinity is not a JSON value"),
    Case("empty-body", 400, raw_ns(b"")),
    Case("invalid-utf8", 400, raw_ns(b'{"namespace": ["\xff\xfe"]}'),
        says="malformed JSON body: not UTF-8 (nor UTF-16 or -32) text"),
    Case("iceberg-malformed-json", 400, lambda c: Req(
        "POST", f"/v1/{c.catalog.tenant}~{c.catalog.name}/namespaces", raw=b'{"namespace": ['),
        says=JSON_STOPS + "16"),
    Case("json-null-top-level", 400, raw_ns(b"null")),
    # Nesting past the parser's recursion limit was a 500 (RecursionError).
    Case("json-nested-100k-arrays", 400, raw_ns(b"[" * 100_000 + b"]" * 100_000)),
    Case("json-nested-50k-objects", 400, raw_ns(b'{"a":' * 50_000 + b"1" + b"}" * 50_000)),
    Case("json-nested-900-in-property", 400, raw_ns(
        b'{"namespace": ["a"], "properties": {"k": ' + b"[" * 900 + b"]" * 900 + b"}}")),
    Case("json-nested-900-in-commit", 400, lambda c: Req("POST", c.path + "/commit", raw=(
        b'{"changes": [{"action": "create", "entity": {"kind": "namespace", "path": ["a"]}, '
        b'"properties": {"k": ' + b"[" * 900 + b"]" * 900 + b"}}]}"))),
    # --- wrong types, unknown fields ---
    Case("property-value-int", 400, lambda c: Req(
        "POST", c.path + "/namespaces", {"namespace": ["a"], "properties": {"k": 1}})),
    Case("property-value-null", 400, lambda c: Req(
        "POST", c.catalog.ns("ns") + "/tables", {"name": "x", "properties": {"k": None}})),
    Case("properties-list", 400, lambda c: Req(
        "POST", c.path + "/namespaces", {"namespace": ["a"], "properties": ["k"]})),
    Case("namespace-string", 400, ns_create("a")),
    Case("namespace-of-ints", 400, ns_create([1, 2])),
    Case("table-name-int", 400, table_create(5)),
    Case("expected-version-string", 400, lambda c: Req(
        "POST", c.catalog.entity(("ns",), "t"), {"updates": {}, "expected-version": "1"})),
    Case("expected-version-zero", 400, lambda c: Req(
        "POST", c.catalog.entity(("ns",), "t"), {"updates": {}, "expected-version": 0})),
    Case("unknown-field-namespace", 400, lambda c: Req(
        "POST", c.path + "/namespaces", {"namespace": ["a"], "owner": "me"})),
    Case("unknown-field-update", 400, lambda c: Req(
        "POST", c.catalog.entity(("ns",), "t"), {"updates": {"a": "b"}, "force": True})),
    Case("unknown-field-tenant", 400, lambda c: Req(
        "POST", "/api/v1/tenants", {"name": unique("x"), "admin": True})),
    Case("location-on-catalog-update", 400, lambda c: Req(
        "POST", c.path + "/properties", {"updates": {"a": "b"}, "location": "s3://x"})),
    Case("location-on-tenant-update", 400, lambda c: Req(
        "POST", c.tenant + "/properties", {"location": "s3://x"})),
    Case("unknown-field-commit", 400, lambda c: Req(
        "POST", c.path + "/commit", {"changes": [create("namespace", "a")], "dryRun": True})),
    Case("unknown-field-in-change", 400, commit(
        {**create("namespace", "a"), "sneaky": 1})),
    Case("missing-required-name", 400, lambda c: Req(
        "POST", c.catalog.ns("ns") + "/tables", {"properties": {}})),
    Case("reset-to-int", 400, lambda c: Req("POST", c.path + "/ref/reset", {"to": 1})),
    # --- commits ---
    Case("unknown-commit-action", 400, commit(
        {"action": "explode", "entity": entity_ref("table", "ns", "t")})),
    Case("unknown-requirement-type", 400, commit(
        create("namespace", "a"),
        requirements=[{"type": "assert-magic", "entity": entity_ref("table", "ns", "t")}])),
    Case("unknown-entity-kind", 400, commit(create("index", "ns", "i"))),
    Case("empty-changes", 400, commit()),
    Case("rename-without-to", 400, commit(
        {"action": "rename", "entity": entity_ref("table", "ns", "t")})),
    Case("table-path-without-namespace", 400, commit(create("table", "t"))),
    Case("too-many-changes", 400, lambda c: Req("POST", c.path + "/commit", {
        "changes": [create("table", "ns", f"t{i}") for i in range(1001)]})),
    Case("same-entity-twice", 400, commit(
        create("table", "ns", "twice"),
        {"action": "update", "entity": entity_ref("table", "ns", "twice"), "updates": {}})),
    Case("same-entity-twice-delete", 400, commit(
        {"action": "delete", "entity": entity_ref("table", "ns", "t")},
        {"action": "delete", "entity": entity_ref("table", "ns", "t")})),
    Case("rename-namespace", 400, lambda c: Req("POST", c.path + "/rename", {
        "source": entity_ref("namespace", "ns"), "destination": entity_ref("namespace", "ns2")})),
    # --- names ---
    Case("ns-nul", 400, ns_create(["a\x00b"])),
    Case("ns-unit-separator-inside-level", 400, ns_create(["a\x1fb"])),
    Case("ns-newline", 400, ns_create(["a\nb"])),
    Case("ns-del", 400, ns_create(["a\x7fb"])),
    Case("ns-empty-level", 400, ns_create([""])),
    Case("ns-empty-list", 400, ns_create([])),
    Case("ns-256-chars", 400, ns_create(["n" * 256])),
    Case("ns-depth-17", 400, ns_create([f"l{i}" for i in range(17)])),
    # errors quote what was sent: cut, so an answer is no echo of a 100 KB name
    Case("ns-100k-chars", 400, ns_create(["n" * 100_000])),
    Case("ns-5000-levels", 400, ns_create(["a"] * 5_000)),
    Case("table-name-100k-chars", 400, table_create("t" * 100_000)),
    Case("ns-leading-space", 400, ns_create([" a"])),
    Case("table-nul", 400, table_create("t\x00")),
    Case("table-unit-separator", 400, table_create("a\x1fb")),
    Case("table-newline", 400, table_create("line\nbreak")),
    Case("table-empty", 400, table_create("")),
    Case("table-256-chars", 400, table_create("t" * 256)),
    Case("commit-path-control-char", 400, commit(create("table", "ns", "a\x1fb"))),
    Case("commit-namespace-depth-17", 400, commit(
        create("namespace", *[f"l{i}" for i in range(17)]))),
    Case("path-nul", 400, lambda c: Req("GET", c.path + "/namespaces/a%00b")),
    Case("path-newline-in-table", 400, lambda c: Req("GET", c.catalog.ns("ns") + "/tables/a%0Ab")),
    Case("path-separator-in-table", 400, lambda c: Req(
        "GET", c.catalog.ns("ns") + "/tables/a%1Fb")),
    Case("path-empty-level", 400, lambda c: Req("GET", c.path + "/namespaces/ns%1F")),
    Case("path-depth-17", 400, lambda c: Req(
        "GET", c.path + "/namespaces/" + seg(tuple(f"l{i}" for i in range(17))))),
    Case("path-256-chars", 400, lambda c: Req("DELETE", c.catalog.entity(("ns",), "t" * 256))),
    Case("parent-control-char", 400, list_ns(parent="a\nb")),
    Case("parent-empty-level", 400, list_ns(parent="ns" + SEP)),
    # --- tenant and catalog names ---
    Case("tenant-name-space", 400, lambda c: Req("POST", "/api/v1/tenants", {"name": "bad name"})),
    Case("tenant-name-slash", 400, lambda c: Req("POST", "/api/v1/tenants", {"name": "a/b"})),
    Case("tenant-name-leading-dash", 400, lambda c: Req("POST", "/api/v1/tenants", {"name": "-x"})),
    Case("tenant-name-unicode", 400, lambda c: Req("POST", "/api/v1/tenants", {"name": "tenänt"})),
    Case("tenant-name-nul", 400, lambda c: Req("POST", "/api/v1/tenants", {"name": "a\x00"})),
    Case("tenant-name-empty", 400, lambda c: Req("POST", "/api/v1/tenants", {"name": ""})),
    Case("tenant-name-129", 400, lambda c: Req("POST", "/api/v1/tenants", {"name": "t" * 129})),
    Case("catalog-name-star", 400, lambda c: Req("POST", c.tenant + "/catalogs", {"name": "c*"})),
    Case("catalog-name-dot-first", 400, lambda c: Req(
        "POST", c.tenant + "/catalogs", {"name": ".hidden"})),
    Case("tenant-path-space", 400, lambda c: Req("GET", "/api/v1/tenants/bad%20name/catalogs")),
    Case("catalog-path-control", 400, lambda c: Req(
        "POST", c.tenant + "/catalogs/c%0A/namespaces", {"namespace": ["a"]})),
    # --- paging ---
    Case("page-token-garbage", 400, list_ns(pageToken="!!!garbage!!!"), says=UNREADABLE_TOKEN),
    Case("page-token-base64-garbage", 400, list_ns(pageToken="bm90IGpzb24"),
        says=UNREADABLE_TOKEN),
    Case("page-token-unfinished-json", 400, list_ns(pageToken=b64(b'{"v":1')),
        says=UNREADABLE_TOKEN),
    Case("page-token-not-ascii", 400, list_ns(pageToken="\u00e9t\u00e9"), says=UNREADABLE_TOKEN),
    Case("page-token-key-not-base64", 400, lambda c: Req(
        "GET", c.path + "/commits", params={"pageToken": b64(json.dumps(
            {"v": 1, "c": 1, "k": "\u00e9", "f": c.commits_fingerprint}).encode())}),
        says=UNREADABLE_TOKEN),
    # nested past the parser's recursion limit: was a 500 (RecursionError)
    Case("page-token-nested-5000", 400, list_ns(pageToken=b64(b"[" * 5000)),
        says=UNREADABLE_TOKEN),
    Case("iceberg-page-token-garbage", 400, iceberg("/namespaces", pageToken="bm90IGpzb24"),
        says=UNREADABLE_TOKEN),
    Case("page-token-other-listing", 400, lambda c: Req(
        "GET", c.catalog.ns("ns") + "/tables", params={"pageToken": c.ns_token}),
        says="invalid page token: it belongs to another listing"),
    # --- change-feed cursors ---
    Case("cursor-unfinished-json", 400, events(b64(b'{"v":1')), says=UNREADABLE_CURSOR),
    Case("cursor-garbage", 400, events("!!!garbage!!!"), says=UNREADABLE_CURSOR),
    Case("cursor-not-base64-json", 400, events("bm90IGpzb24"), says=UNREADABLE_CURSOR),
    Case("cursor-a-list", 400, events(b64(b"[1,2]")), says=UNREADABLE_CURSOR),
    Case("cursor-too-long", 400, events("x" * 1000), says=UNREADABLE_CURSOR),
    Case("page-token-commits-on-namespaces", 400, lambda c: Req(
        "GET", c.path + "/namespaces", params={"pageToken": c.commits_token})),
    Case("page-token-namespaces-on-commits", 400, lambda c: Req(
        "GET", c.path + "/commits", params={"pageToken": c.ns_token})),
    Case("page-token-tenants-on-catalogs", 400, lambda c: Req(
        "GET", c.tenant + "/catalogs", params={"pageToken": c.tenants_token})),
    Case("page-token-other-tenant", 400, lambda c: Req(
        "GET", c.other.path + "/commits", params={"pageToken": c.commits_token})),
    Case("page-token-unknown-commit", 400, lambda c: Req(
        "GET", c.path + "/commits", params={"pageToken": c.forged(12345)})),
    # Forged tokens naming ids outside 0..2^64-1 were a 500, like ?at= below.
    Case("page-token-negative-commit", 400, lambda c: Req(
        "GET", c.path + "/commits", params={"pageToken": c.forged(-1)})),
    Case("page-token-huge-commit", 400, lambda c: Req(
        "GET", c.path + "/commits", params={"pageToken": c.forged(2**70)})),
    Case("page-size-0", 400, list_ns(pageSize=0)),
    Case("page-size-1001", 400, list_ns(pageSize=1001)),
    Case("page-size-negative", 400, list_ns(pageSize=-1)),
    Case("page-size-abc", 400, list_ns(pageSize="abc")),
    Case("page-size-float", 400, list_ns(pageSize="1.5")),
    Case("page-size-commits-1001", 400, lambda c: Req(
        "GET", c.path + "/commits", params={"pageSize": 1001})),
    Case("page-size-tenants-0", 400, lambda c: Req(
        "GET", "/api/v1/tenants", params={"pageSize": 0})),
    # --- point in time (ids past 64 bits were a 500: OverflowError building the key) ---
    Case("at-abc", 400, list_ns(at="abc")),
    Case("at-zero", 400, list_ns(at=0)),
    Case("at-negative", 400, list_ns(at=-5)),
    Case("at-not-a-commit", 404, list_ns(at=12345), "NoSuchCommitException"),
    Case("at-entity-id", 404, lambda c: Req(
        "GET", c.catalog.entity(("ns",), "t"), params={"at": c.table_id}), "NoSuchCommitException"),
    Case("at-other-tenants-commit", 404, lambda c: Req(
        "GET", c.catalog.ns("ns"), params={"at": c.other_head}), "NoSuchCommitException"),
    Case("at-beyond-64-bits", 404, list_ns(at="99999999999999999999"), "NoSuchCommitException"),
    Case("at-huge", 404, list_ns(at="9" * 40), "NoSuchCommitException"),
    Case("at-past-any-id", 400, list_ns(at="9" * 5000), "BadRequestException"),
    Case("at-in-other-digits", 400, list_ns(at="\u0661\u0662"), "BadRequestException"),
    Case("commit-id-not-a-commit", 404, lambda c: Req(
        "GET", c.path + "/commits/12345"), "NoSuchCommitException"),
    Case("commit-id-beyond-64-bits", 404, lambda c: Req(
        "GET", c.path + "/commits/99999999999999999999"), "NoSuchCommitException"),
    Case("commit-id-abc", 404, lambda c: Req("GET", c.path + "/commits/abc")),
    Case("commit-id-superscript-digit", 404, lambda c: Req(
        "GET", c.path + "/commits/%C2%B2"), "NoSuchCommitException"),  # "²".isdigit()
    Case("reset-not-recent", 400, lambda c: Req("POST", c.path + "/ref/reset", {"to": "12345"})),
    Case("reset-to-other-tenants-head", 400, lambda c: Req(
        "POST", c.path + "/ref/reset", {"to": c.other_head})),
    # --- size ---
    Case("body-2MiB", 413, raw_ns(BIG_JSON), "RequestEntityTooLargeException"),
    Case("body-2MiB-chunked", 413, lambda c: Req(
        "POST", c.path + "/namespaces", raw=BIG_JSON, chunked=True),
        "RequestEntityTooLargeException"),
    # --- logical failures also write nothing ---
    Case("create-in-missing-namespace", 404, lambda c: Req(
        "POST", c.catalog.ns("missing") + "/tables", {"name": "x"}), "NoSuchNamespaceException"),
    Case("update-missing-table", 404, lambda c: Req(
        "POST", c.catalog.entity(("ns",), "nope"), {"updates": {"a": "b"}}),
        "NoSuchTableException"),
    Case("stale-expected-version", 409, lambda c: Req(
        "POST", c.catalog.entity(("ns",), "t"), {"updates": {"a": "b"}, "expected-version": 9}),
        "CommitFailedException"),
    # --- routing ---
    Case("unknown-route", 404, lambda c: Req("GET", c.path + "/nonsense"), "NotFoundException"),
    Case("unknown-route-root", 404, lambda c: Req("POST", "/api/v2/tenants", {"name": "x"})),
    Case("unknown-collection", 404, lambda c: Req("GET", c.catalog.ns("ns") + "/indexes")),
    Case("wrong-method-tenants", 405, lambda c: Req("PUT", "/api/v1/tenants", {"name": "x"}),
         "MethodNotAllowedException"),
    Case("wrong-method-commits", 405, lambda c: Req("DELETE", c.path + "/commits")),
    Case("wrong-method-table", 405, lambda c: Req(
        "PATCH", c.catalog.entity(("ns",), "t"), {"updates": {"a": "b"}})),
    Case("wrong-method-ref", 405, lambda c: Req("PUT", c.path + "/ref", {"head": "1"})),
]  # fmt: skip


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def ctx(node: NodeProcess) -> AsyncIterator[Ctx]:
    """Built once per module; every case must leave it exactly as it was.

    Its client session closes with the fixture's own loop: the tests use only the
    paths, ids and tokens it holds, and send through their own ``api``.
    """
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        api = Api(session, node.url)
        catalog = await api.new_catalog()
        other = await api.new_catalog()
        for cat in (catalog, other):
            await cat.create_namespace("ns")
            await cat.create_namespace("ns2")
            await cat.create(("ns",), "t", {"k": "v"})
        table = assert_status(await api.get(catalog.entity(("ns",), "t")))
        ns_page = assert_status(await api.get(catalog.path + "/namespaces", pageSize=1))
        commits_page = assert_status(await api.get(catalog.path + "/commits", pageSize=1))
        tenants_page = assert_status(await api.get("/api/v1/tenants", pageSize=1))
        token = commits_page["next-page-token"]
        fingerprint = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))["f"]
        yield Ctx(
            catalog,
            other,
            table["entity-id"],
            await other.head(),
            ns_page["next-page-token"],
            token,
            tenants_page["next-page-token"],
            fingerprint,
        )


async def snapshot(api: Api, ctx: Ctx) -> dict[str, Any]:
    refs = {}
    for cat in (ctx.catalog, ctx.other):
        refs[cat.path] = assert_status(await api.get(cat.path + "/ref"))
    catalogs = assert_status(await api.get(ctx.tenant + "/catalogs", pageSize=1000))
    tenants = assert_status(await api.get("/api/v1/tenants", pageSize=1000))
    return {"refs": refs, "catalogs": catalogs, "tenants": tenants}


async def send(api: Api, req: Req) -> Any:
    headers = {"Content-Type": "application/json"}
    if req.raw is not None:
        data: Any = io.BytesIO(req.raw)  # raw bytes this large would warn (filterwarnings)
        if req.chunked:
            raw = req.raw

            async def chunks() -> AsyncIterator[bytes]:
                for start in range(0, len(raw), 64 * 1024):
                    yield raw[start : start + 64 * 1024]

            data = chunks()
        return await api.call(req.method, req.path, data=data, params=req.params, headers=headers)
    if req.body is not None:
        return await api.call(req.method, req.path, json_body=req.body, params=req.params)
    return await api.call(req.method, req.path, params=req.params)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_hostile_request_is_rejected_and_writes_nothing(
    api: Api, ctx: Ctx, case: Case
) -> None:
    before = await snapshot(api, ctx)
    req = case.make(ctx)
    reply = await send(api, req)
    error = assert_error(reply, case.status, case.error_type)
    assert len(error["message"]) <= MAX_MESSAGE_CHARS, reply.describe()[:300]
    if case.says is not None:
        assert error["message"] == case.says, reply.describe()[:300]
    assert await snapshot(api, ctx) == before, f"{case.id} wrote something: {reply.describe()}"


def test_case_ids_are_unique() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))


async def test_object_over_the_size_limit_is_rejected(tmp_path: Any) -> None:
    """A node with a small object limit refuses an entity that would exceed it."""
    limits = {
        "METASTORE_MAX_OBJECT_BYTES": "16384",
        "METASTORE_INDEX_STRIPE_BYTES": "8192",
        "METASTORE_INDEX_EMBEDDED_BYTES": "4096",
    }
    with NodeProcess(tmp_path / "data", env=limits) as node:
        async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
            api = Api(session, node.url)
            catalog = await api.new_catalog()
            await catalog.create_namespace("ns")
            await catalog.create(("ns",), "small", {"k": "v" * 1000})  # under the limit: fine
            ref = await catalog.ref()
            history = await catalog.history()
            big = {f"k{i}": "x" * 6000 for i in range(4)}  # 24 KB > 16 KiB

            attempts = [
                ("POST", catalog.ns("ns") + "/tables", {"name": "big", "properties": big}),
                ("POST", catalog.entity(("ns",), "small"), {"updates": big}),
                ("POST", catalog.path + "/namespaces", {"namespace": ["n2"], "properties": big}),
                ("POST", catalog.ns("ns") + "/properties", {"updates": big}),
                ("POST", catalog.path + "/properties", {"updates": big}),
                (
                    "POST",
                    catalog.path + "/commit",
                    {"changes": [{**create("table", "ns", "b2"), "properties": big}]},
                ),
            ]
            for method, path, body in attempts:
                reply = await api.call(method, path, json_body=body)
                assert 400 <= reply.status < 500, reply.describe()
                assert_error(reply, reply.status)
                assert "size limit" in reply.body["error"]["message"], reply.describe()
                assert await catalog.ref() == ref, f"wrote something: {reply.describe()}"
            assert await catalog.history() == history
            assert_error(await api.get(catalog.entity(("ns",), "big")), 404)
            small = assert_status(await api.get(catalog.entity(("ns",), "small")))
            assert small["version"] == 1, small
