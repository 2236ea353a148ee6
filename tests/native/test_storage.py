"""A catalog's storage through the native API, and what it means on both APIs.

A real node (a child process) whose environment holds storage credentials, and
whose credentials directory holds a credentials file. Catalogs are created with
storage roots in a directory of the test's own; every secret is a marker that
is then looked for in every response, the node's log (at DEBUG) and the raw
bytes of its RocksDB files.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import requests

from harness.node import NodeProcess
from tests.native.support import TIMEOUT, Api, Reply, assert_error, assert_status, unique

SECRET = "s3cr3t-" + uuid.uuid4().hex  # a value that must never leave the node's memory
FILE_SECRET = "f1le-s3cr3t-" + uuid.uuid4().hex
ENV = "METASTORE_STORAGE_CREDENTIALS_TESTS"
CATALOGS = "/api/v1/tenants/default/catalogs"
SCHEMA = {"type": "struct", "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}


@dataclass(frozen=True)
class StorageNode:
    process: NodeProcess
    shared: Path  # where the tests' catalogs keep their files
    credentials: Path  # the node's credentials directory

    def secrets_file(self) -> Path:
        return self.credentials / "storage.json"


@pytest.fixture(scope="module")
def storage_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StorageNode]:
    root = tmp_path_factory.mktemp("storage")
    credentials = root / "credentials"
    credentials.mkdir()
    keys = {"s3.access-key-id": "AKIA-TESTS", "s3.secret-access-key": FILE_SECRET}
    (credentials / "storage.json").write_text(json.dumps(keys))
    env = {
        ENV: json.dumps({"s3.access-key-id": "AKIA-TESTS", "s3.secret-access-key": SECRET}),
        "METASTORE_CREDENTIALS_DIR": str(credentials),
        "METASTORE_LOG_LEVEL": "DEBUG",
    }
    process = NodeProcess(root / "data", log_path=root / "node.log", env=env)
    with process:
        yield StorageNode(process, (root / "shared").resolve(), credentials)
        assert process.proc is not None and process.proc.poll() is None, process.log_tail()
    log = process.log_path.read_text(errors="replace")
    assert "Traceback" not in log, f"the node logged an unhandled error:\n{process.log_tail(60)}"


class Recorder(Api):
    """An ``Api`` that keeps every response text, to look for secrets in them afterwards."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str) -> None:
        super().__init__(session, base_url)
        self.texts: list[str] = []

    async def call(self, method: str, path: str, **kwargs: Any) -> Reply:
        reply = await super().call(method, path, **kwargs)
        self.texts.append(reply.text + json.dumps(reply.headers))
        return reply


@pytest.fixture
async def api(storage_node: StorageNode) -> AsyncIterator[Recorder]:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        recorder = Recorder(session, storage_node.process.url)
        yield recorder
        for text in recorder.texts:
            assert SECRET not in text and FILE_SECRET not in text, text


def uri(path: Path) -> str:
    return path.as_uri()


async def create(api: Api, name: str, storage: dict[str, Any] | None) -> Reply:
    body: dict[str, Any] = {"name": name, "properties": {"team": "bi"}}
    if storage is not None:
        body["storage"] = storage
    return await api.post(CATALOGS, body)


async def iceberg_table(
    api: Api, catalog: str, name: str, location: str | None = None, namespace: str = "db"
) -> Reply:
    body: dict[str, Any] = {"name": name, "schema": SCHEMA}
    if location is not None:
        body["location"] = location
    return await api.post(f"/v1/{catalog}/namespaces/{namespace}/tables", body)


async def test_a_catalog_keeps_its_storage_and_both_apis_obey_it(
    api: Recorder, storage_node: StorageNode
) -> None:
    name = unique("c")
    home, extra = storage_node.shared / name / "a", storage_node.shared / name / "extra"
    storage = {
        "type": "file",
        "root": uri(home) + "/./",
        "allowed-locations": [uri(home), uri(extra)],
        "io-properties": {"s3.region": "eu-west-1"},
        "credentials": {"env": ENV},
    }
    created = assert_status(await create(api, name, storage), 201)
    shown = {
        "type": "file",
        "root": uri(home),
        "allowed-locations": [uri(home), uri(extra)],
        "io-properties": {"s3.region": "eu-west-1"},
        "credentials": {"env": ENV},
        "version": 1,
    }
    assert created["storage"] == shown and created["properties"] == {"team": "bi"}, created
    assert (await api.ok("GET", f"{CATALOGS}/{name}"))["storage"] == shown

    # Iceberg: the default location is under the root, any allowed location is fine
    await api.ok("POST", f"/v1/{name}/namespaces", {"namespace": ["db"]})
    table = assert_status(await iceberg_table(api, name, "t"))
    assert table["metadata"]["location"] == f"{uri(home)}/db/t"
    written = Path(table["metadata-location"].removeprefix("file://"))
    assert await asyncio.to_thread(written.is_file)
    assert_status(await iceberg_table(api, name, "e", f"{uri(extra)}/e"))
    outside = storage_node.shared / name / "elsewhere"
    refused = assert_error(await iceberg_table(api, name, "x", f"{uri(outside)}/x"), 400)
    assert uri(home) in refused["message"] and uri(extra) in refused["message"], refused
    # native: the same list
    native = f"{CATALOGS}/{name}/namespaces/db/tables"
    assert_error(await api.post(native, {"name": "n", "location": f"{uri(outside)}/n"}), 400)
    assert_status(await api.post(native, {"name": "n", "location": f"{uri(extra)}/n"}), 201)

    # a storage update moves where new tables go; existing tables keep their locations
    moved = storage_node.shared / name / "b"
    update = {"storage": {"root": uri(moved)}, "expected-version": 1}
    updated = await api.ok("POST", f"{CATALOGS}/{name}/storage", update)
    assert updated["storage"] == {
        "type": "file",
        "root": uri(moved),
        "allowed-locations": [uri(moved)],
        "io-properties": {},
        "version": 2,
    }, updated
    assert updated["properties"] == {"team": "bi"}
    assert_error(await api.post(f"{CATALOGS}/{name}/storage", update), 409)  # stale version
    commit = {"updates": [{"action": "set-properties", "updates": {"k": "v"}}]}
    kept = await api.ok("POST", f"/v1/{name}/namespaces/db/tables/t", commit)
    assert kept["metadata"]["location"] == f"{uri(home)}/db/t"
    # the property set, next to the codec every new table gets by default
    assert kept["metadata"]["properties"] == {"k": "v", "write.parquet.compression-codec": "zstd"}
    new = assert_status(await iceberg_table(api, name, "u"))
    assert new["metadata"]["location"] == f"{uri(moved)}/db/u"
    assert_error(await iceberg_table(api, name, "y", f"{uri(home)}/y"), 400)
    assert_error(await api.post(native, {"name": "m", "location": f"{uri(extra)}/m"}), 400)
    history = (await api.ok("GET", f"{CATALOGS}/{name}/commits"))["commits"]
    assert "update catalog storage" in [c["operation"] for c in history]


async def test_without_storage_a_catalog_takes_the_nodes_seed(
    api: Recorder, storage_node: StorageNode
) -> None:
    name = unique("c")
    created = assert_status(await create(api, name, None), 201)
    seed = uri(storage_node.process.data_dir.resolve() / "warehouse" / "default" / name)
    assert created["storage"] == {
        "type": "file",
        "root": seed,
        "allowed-locations": [seed],
        "io-properties": {},
        "version": 1,
    }, created
    default = await api.ok("GET", f"{CATALOGS}/default")
    assert default["storage"]["root"].endswith("/warehouse/default/default"), default


@pytest.mark.parametrize(
    ("storage", "problem"),
    [
        (
            {"root": "ROOT", "io-properties": {"s3.secret-access-key": SECRET}},
            "looks like a secret",
        ),
        ({"root": "ROOT", "io-properties": {"s3.session-token": SECRET}}, "looks like a secret"),
        ({"root": "ROOT", "io-properties": {"py-io-impl": "os.System"}}, "not an S3 FileIO"),
        ({"root": "ROOT", "credentials": {"env": "METASTORE_STORAGE_CREDENTIALS_NONE"}}, "not set"),
        ({"root": "ROOT", "credentials": {"env": "PATH"}}, "METASTORE_STORAGE_CREDENTIALS_"),
        ({"root": "ROOT", "credentials": {"file": "/etc/passwd"}}, "credentials directory"),
        ({"root": "ROOT", "credentials": {"env": ENV, "extra": 1}}, '{"env": NAME}'),
        ({"root": "ROOT", "unknown": 1}, "unexpected"),
        ({"root": "relative/x"}, "relative"),
        ({"root": "ROOT", "allowed-locations": ["file:///no/such/place"]}, "inside none"),
        ({"root": "DATA"}, "overlaps this node's data directory"),
        ({"root": "DATA/rocksdb/x"}, "overlaps this node's data directory"),
        ({"root": "OTHER/inside"}, "overlaps the storage of catalog"),
        ({"root": "ROOT", "allowed-locations": ["ROOT", "OTHER"]}, "overlaps the storage of"),
        # an endpoint with a path moves every key of the storage elsewhere in the store
        *(
            ({"root": "ROOT", "io-properties": {"s3.endpoint": endpoint}}, "host[:port] alone")
            for endpoint in (
                "http://store:9000/lake/other%3F",
                "http://store:9000/private",
                "http://store%2f:9000",
                "http://user@store:9000",
                "ftp://store",
            )
        ),
        ({"root": "ROOT", "io-properties": {"s3.proxy-uri": "::not a uri::"}}, "host[:port]"),
        ({"root": "ROOT", "io-properties": {"s3.connect-timeout": "abc"}}, "number of seconds"),
        ({"root": "ROOT", "io-properties": {"s3.request-timeout": "3600"}}, "at most 60"),
        ({"root": "ROOT", "io-properties": {"s3.request-timeout": "0"}}, "more than 0"),
        ({"root": "ROOT", "io-properties": {"s3.anonymous": "perhaps"}}, "true or false"),
        ({"root": "ROOT", "io-properties": {"s3.force-virtual-addressing": "x"}}, "true or"),
        ({"root": "ROOT", "io-properties": {"s3.role-arn": "admin"}}, "IAM role ARN"),
        ({"root": "ROOT", "io-properties": {"s3.region": "Mars 1"}}, "region name"),
        (
            {
                "root": "ROOT",
                "io-properties": {"client.role-arn": "arn:aws:iam::123456789012:role/r"},
                "credentials": {"env": ENV},
            },
            "cannot go with the storage's credentials",
        ),
    ],
)
async def test_a_refused_storage_is_a_400_that_writes_nothing(
    api: Recorder, storage_node: StorageNode, storage: dict[str, Any], problem: str
) -> None:
    other, third = unique("o"), unique("o")
    other_root = uri(storage_node.shared / other)
    assert_status(await create(api, other, {"root": other_root}), 201)
    assert_status(await create(api, third, {"root": uri(storage_node.shared / third)}), 201)
    name = unique("c")
    text = json.dumps(storage)
    text = text.replace("ROOT", uri(storage_node.shared / name)).replace("OTHER", other_root)
    text = text.replace("DATA", uri(storage_node.process.data_dir.resolve()))
    error = assert_error(await create(api, name, json.loads(text)), 400)
    assert problem in error["message"], error
    assert_error(await api.get(f"{CATALOGS}/{name}"), 404)
    update = {"storage": json.loads(text)}
    error = assert_error(await api.post(f"{CATALOGS}/{third}/storage", update), 400)
    assert problem in error["message"], error
    assert (await api.ok("GET", f"{CATALOGS}/{third}"))["storage"]["version"] == 1


async def test_storage_of_another_tenant_is_refused_without_naming_it(
    api: Recorder, storage_node: StorageNode
) -> None:
    tenant, theirs = unique("t"), unique("secret-catalog")
    await api.create_tenant(tenant)
    root = uri(storage_node.shared / unique("d"))
    reply = await api.post(
        f"/api/v1/tenants/{tenant}/catalogs", {"name": theirs, "storage": {"root": root}}
    )
    assert_status(reply, 201)
    error = assert_error(await create(api, unique("c"), {"root": f"{root}/inside"}), 400)
    assert "overlaps the storage of another catalog" in error["message"], error
    assert theirs not in error["message"] and tenant not in error["message"], error


async def test_a_node_without_the_credentials_answers_503_naming_them(
    api: Recorder, storage_node: StorageNode
) -> None:
    name = unique("c")
    storage = {
        "root": uri(storage_node.shared / name),
        "credentials": {"file": str(storage_node.secrets_file())},
    }
    assert_status(await create(api, name, storage), 201)
    await api.ok("POST", f"/v1/{name}/namespaces", {"namespace": ["db"]})
    assert_status(await iceberg_table(api, name, "t"))
    moved = storage_node.secrets_file().with_suffix(".away")
    storage_node.secrets_file().rename(moved)
    try:
        head = (await api.ok("GET", f"{CATALOGS}/{name}/ref"))["head"]
        error = assert_error(
            await iceberg_table(api, name, "u"), 503, "ServiceUnavailableException"
        )
        assert str(storage_node.secrets_file()) in error["message"], error
        assert "cannot be read here" in error["message"], error
        assert (await api.ok("GET", f"{CATALOGS}/{name}/ref"))["head"] == head  # nothing written
    finally:
        moved.rename(storage_node.secrets_file())
    assert_status(await iceberg_table(api, name, "u"))


def block_directory(directory: Path) -> Path:
    """Put a regular file where ``directory`` was (its content moved aside)."""
    aside = directory.with_name(directory.name + ".aside")
    directory.rename(aside)
    directory.write_text("a file where the storage expects a directory")
    return aside


def unblock_directory(directory: Path, aside: Path) -> None:
    directory.unlink()
    aside.rename(directory)


async def test_a_storage_that_fails_a_write_is_a_503_never_a_500(
    api: Recorder, storage_node: StorageNode
) -> None:
    """The storage refusing a write (here a file where a directory must be; for S3, wrong
    credentials or a missing bucket) is a 503 naming the file, with nothing committed."""
    name = unique("c")
    root = storage_node.shared / name
    assert_status(await create(api, name, {"root": uri(root)}), 201)
    await api.ok("POST", f"/v1/{name}/namespaces", {"namespace": ["db"]})
    assert_status(await iceberg_table(api, name, "t"))
    metadata = root / "db" / "t" / "metadata"
    aside = await asyncio.to_thread(block_directory, metadata)
    commit = {"updates": [{"action": "set-properties", "updates": {"k": "v"}}]}
    try:
        head = (await api.ok("GET", f"{CATALOGS}/{name}/ref"))["head"]
        reply = await api.post(f"/v1/{name}/namespaces/db/tables/t", commit)
        error = assert_error(reply, 503, "ServiceUnavailableException")
        assert "cannot write" in error["message"] and uri(metadata) in error["message"], error
        assert (await api.ok("GET", f"{CATALOGS}/{name}/ref"))["head"] == head
    finally:
        await asyncio.to_thread(unblock_directory, metadata, aside)
    await api.ok("POST", f"/v1/{name}/namespaces/db/tables/t", commit)


async def test_a_retried_creation_replays_its_storage(
    api: Recorder, storage_node: StorageNode
) -> None:
    name = unique("c")
    body = {"name": name, "storage": {"root": uri(storage_node.shared / name)}}
    headers = {"Idempotency-Key": unique("k")}
    first = await api.call("POST", CATALOGS, json_body=body, headers=headers)
    again = await api.call("POST", CATALOGS, json_body=body, headers=headers)
    assert assert_status(first, 201) == assert_status(again, 201)
    assert again.body["storage"]["root"] == uri(storage_node.shared / name)


async def test_secrets_are_nowhere_but_in_the_nodes_environment(
    api: Recorder, storage_node: StorageNode
) -> None:
    """Both references are used (tables written through each), a refused body carries a
    secret in its io-properties: afterwards no response (checked by the fixture), no log
    line and no byte of the node's RocksDB holds a secret, while the same bytes do hold
    the storage's plain values (so the search sees the records)."""
    for credentials in ({"env": ENV}, {"file": str(storage_node.secrets_file())}):
        name = unique("c")
        storage = {
            "root": uri(storage_node.shared / name),
            "io-properties": {"s3.region": "plain-marker-region"},
            "credentials": credentials,
        }
        assert_status(await create(api, name, storage), 201)
        await api.ok("POST", f"/v1/{name}/namespaces", {"namespace": ["db"]})
        assert_status(await iceberg_table(api, name, "t"))
        leak = {"root": uri(storage_node.shared / name), "io-properties": {"s3.token": SECRET}}
        assert_error(await api.post(f"{CATALOGS}/{name}/storage", {"storage": leak}), 400)
    log = storage_node.process.log_path.read_bytes()
    assert SECRET.encode() not in log and FILE_SECRET.encode() not in log
    stored = b"".join(
        path.read_bytes()
        for path in (storage_node.process.data_dir / "rocksdb").rglob("*")
        if path.is_file()
    )
    assert b"plain-marker-region" in stored and ENV.encode() in stored
    assert SECRET.encode() not in stored and FILE_SECRET.encode() not in stored


def test_storage_roots_bound_every_catalog(tmp_path: Path) -> None:
    """With METASTORE_STORAGE_ROOTS, a catalog's storage lies inside them or is a 400."""
    allowed = (tmp_path / "allowed").resolve()
    data = (tmp_path / "data").resolve()
    env = {"METASTORE_STORAGE_ROOTS": f"{uri(allowed)},{uri(data / 'warehouse')}"}
    with NodeProcess(data, log_path=tmp_path / "node.log", env=env) as process:
        url = process.url + CATALOGS

        def create_sync(name: str, root: Path | None) -> requests.Response:
            body: dict[str, Any] = {"name": name}
            if root is not None:
                body["storage"] = {"root": uri(root)}
            return requests.post(url, json=body, timeout=30)

        assert create_sync("inside", allowed / "inside").status_code == 201
        assert create_sync("seeded", None).status_code == 201
        refused = create_sync("outside", tmp_path / "elsewhere")
        assert refused.status_code == 400, refused.text
        message = refused.json()["error"]["message"]
        assert "outside this deployment's storage roots" in message, message
        assert "METASTORE_STORAGE_ROOTS" in message, message
        assert requests.get(f"{url}/outside", timeout=30).status_code == 404


def test_within_storage_roots_a_tenant_admin_names_its_catalogs_storage(tmp_path: Path) -> None:
    """With every storage root bounded, naming storage needs only the catalog privilege."""
    allowed = (tmp_path / "allowed").resolve()
    data = (tmp_path / "data").resolve()
    env = {
        "METASTORE_STORAGE_ROOTS": f"{uri(allowed)},{uri(data / 'warehouse')}",
        "METASTORE_AUTH": "on",
        "METASTORE_AUTH_CLIENTS": "root:root-secret-1,boss:boss-secret-1",
        "METASTORE_AUTH_ADMINS": "root",
    }
    with NodeProcess(data, log_path=tmp_path / "node.log", env=env) as process:

        def token(client: str, secret: str) -> dict[str, str]:
            form = {"grant_type": "client_credentials", "client_id": client}
            reply = requests.post(
                process.url + "/v1/oauth/tokens", data={**form, "client_secret": secret}, timeout=30
            )
            return {"Authorization": f"Bearer {reply.json()['access_token']}"}

        root, boss = token("root", "root-secret-1"), token("boss", "boss-secret-1")
        members = process.url + "/api/v1/tenants/default/principal-roles/tenant_admin/principals"
        added = requests.post(members, json={"principal": "boss"}, headers=root, timeout=30)
        assert added.status_code == 201, added.text
        body = {"name": "mine", "storage": {"root": uri(allowed / "mine")}}
        created = requests.post(process.url + CATALOGS, json=body, headers=boss, timeout=30)
        assert created.status_code == 201, created.text
        # in the warehouse, only its tenant's own folder: elsewhere it would squat where
        # the node seeds another tenant's catalogs (made later, too), and whether a path
        # overlapped one would tell what catalogs another tenant has
        warehouse = data / "warehouse"
        for name, where in (("squat", warehouse / "globex"), ("top", warehouse)):
            body = {"name": name, "storage": {"root": uri(where)}}
            refused = requests.post(process.url + CATALOGS, json=body, headers=boss, timeout=30)
            assert refused.status_code == 400, refused.text
            assert "outside the tenant's own folder" in refused.json()["error"]["message"]
            moved = requests.post(
                f"{process.url}{CATALOGS}/mine/storage",
                json={"storage": {"root": uri(where)}},
                headers=boss,
                timeout=30,
            )
            assert moved.status_code == 400, moved.text
        body = {"name": "own", "storage": {"root": uri(warehouse / "default" / "own")}}
        created = requests.post(process.url + CATALOGS, json=body, headers=boss, timeout=30)
        assert created.status_code == 201, created.text
        body = {"name": "shared", "storage": {"root": uri(warehouse / "shared")}}
        created = requests.post(process.url + CATALOGS, json=body, headers=root, timeout=30)
        assert created.status_code == 201, created.text  # the operator's choice
        # where the node connects and as whom is the operator's: a tenant pointing it
        # at a host of its choosing would have it send requests signed with the node's
        # keys there, or hold its worker threads on a host that never answers
        routed = {
            "s3.endpoint": "http://10.0.0.1:8080",
            "s3.proxy-uri": "http://10.0.0.1:3128",
            "s3.role-arn": "arn:aws:iam::123456789012:role/any",
            "s3.request-timeout": "60",
        }
        for key, value in routed.items():
            storage = {"root": uri(allowed / key), "io-properties": {key: value}}
            body = {"name": f"routed{len(key)}", "storage": storage}
            refused = requests.post(process.url + CATALOGS, json=body, headers=boss, timeout=30)
            assert refused.status_code == 400, refused.text
            assert "only a service admin sets it" in refused.text and key in refused.text
            moved = requests.post(
                f"{process.url}{CATALOGS}/mine/storage",
                json={"storage": storage},
                headers=boss,
                timeout=30,
            )
            assert moved.status_code == 400, moved.text
        mine = requests.get(f"{process.url}{CATALOGS}/mine", headers=boss, timeout=30).json()
        assert mine["storage"]["io-properties"] == {}, mine
        regional = {"root": uri(allowed / "regional"), "io-properties": {"s3.region": "eu-west-1"}}
        body = {"name": "regional", "storage": regional}
        created = requests.post(process.url + CATALOGS, json=body, headers=boss, timeout=30)
        assert created.status_code == 201, created.text
        body = {"name": "routed", "storage": {**regional, "root": uri(allowed / "routed")}}
        body["storage"]["io-properties"] = routed
        created = requests.post(process.url + CATALOGS, json=body, headers=root, timeout=30)
        assert created.status_code == 201, created.text  # a service admin's choice
        # the tenant admin changes that catalog's storage, keeping what the admin chose
        # (not choosing anew: another endpoint is refused as ever)
        more = [uri(allowed / "routed"), uri(allowed / "routed-more")]
        members = {"storage": {**body["storage"], "allowed-locations": more}}
        url = f"{process.url}{CATALOGS}/routed/storage"
        kept = requests.post(url, json=members, headers=boss, timeout=30)
        assert kept.status_code == 200, kept.text
        elsewhere = {**routed, "s3.endpoint": "http://10.0.0.2:8080"}
        members["storage"]["io-properties"] = elsewhere
        refused = requests.post(url, json=members, headers=boss, timeout=30)
        assert refused.status_code == 400 and "s3.endpoint" in refused.text, refused.text
