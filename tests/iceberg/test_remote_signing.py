"""Remote signing against an S3 server that checks every signature (moto enforcing IAM):
PyIceberg holding no key of its own creates, appends and scans a table through the node,
which signs each of its S3 requests; the signer refuses another table's paths, an
operation beyond the caller's grants, other hosts and buckets, and hostile URIs; and a
table's config offers remote signing when the storage enables it or the client asks."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import SignError

from harness.node import NodeProcess
from harness.s3 import S3Process
from tests.iceberg.support import SCHEMA, assert_error, one_pyiceberg_worker, rows

SECRETS_ENV = "METASTORE_STORAGE_CREDENTIALS_SIGN"
TENANT = "/api/v1/tenants/default"
ROOT = ("root", "root-secret-1")  # a service admin
WRITER = ("writer", "writer-secret-1")  # creates namespaces and tables, writes data
READER = ("reader", "reader-secret-1")  # reads data
STRANGER = ("stranger", "stranger-secret-1")  # holds nothing in the catalog
ASK = {"X-Iceberg-Access-Delegation": "remote-signing"}
GRANTS = {
    "writers": ("NAMESPACE_CREATE", "TABLE_CREATE", "TABLE_WRITE_DATA"),
    "readers": ("TABLE_READ_DATA",),
}


@dataclass(frozen=True)
class Lake:
    node: NodeProcess
    s3: S3Process
    bucket: str
    catalog: str  # remote signing on request only
    enabled: str  # remote signing offered to every client
    tokens: dict[str, str]

    def client(self, who: tuple[str, str], catalog: str | None = None) -> RestCatalog:
        """PyIceberg with no S3 key and no endpoint: the table's config gives it both
        the endpoint and the signer; fsspec's FileIO is the one that signs remotely."""
        return RestCatalog(
            who[0],
            uri=self.node.url,
            warehouse=catalog or self.catalog,
            token=self.tokens[who[0]],
            **{
                "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO",
                "header.X-Iceberg-Access-Delegation": "remote-signing",
            },
        )

    def call(self, who: str, method: str, path: str, **kwargs: Any) -> requests.Response:
        headers = {"Authorization": f"Bearer {self.tokens[who]}", **kwargs.pop("headers", {})}
        return requests.request(method, self.node.url + path, headers=headers, timeout=60, **kwargs)

    def sign_path(self, table: str, catalog: str | None = None) -> str:
        return f"/v1/{catalog or self.catalog}/namespaces/db/tables/{table}/sign"

    def object_url(self, key: str) -> str:
        return f"{self.s3.endpoint}/{self.bucket}/{key}"

    def key(self, table: str, rest: str, catalog: str | None = None) -> str:
        return f"{catalog or self.catalog}/db/{table}/{rest}"

    def sign(self, who: str, table: str, method: str, uri: str, **extra: Any) -> requests.Response:
        body = {"region": "us-east-1", "method": method, "uri": uri, "headers": {}, **extra}
        return self.call(who, "POST", self.sign_path(table), json=body)


def _token(url: str, who: tuple[str, str]) -> str:
    form = {"grant_type": "client_credentials", "client_id": who[0], "client_secret": who[1]}
    reply = requests.post(f"{url}/v1/oauth/tokens", data=form, timeout=30)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["access_token"])


def _setup_steps(catalog: str) -> list[tuple[str, dict[str, Any]]]:
    steps: list[tuple[str, dict[str, Any]]] = []
    for role, privileges in GRANTS.items():
        member = WRITER[0] if role == "writers" else READER[0]
        steps += [
            (f"{TENANT}/principal-roles", {"name": role}),
            (f"{TENANT}/principal-roles/{role}/principals", {"principal": member}),
            (f"{TENANT}/catalogs/{catalog}/catalog-roles", {"name": role}),
            (
                f"{TENANT}/principal-roles/{role}/catalog-roles",
                {"catalog": catalog, "catalog-role": role},
            ),
        ]
        steps += [
            (
                f"{TENANT}/catalogs/{catalog}/catalog-roles/{role}/grants",
                {"privilege": privilege, "securable": {"kind": "catalog"}},
            )
            for privilege in privileges
        ]
    return steps


@pytest.fixture(scope="module")
def lake(s3_iam_server: S3Process, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    s3 = s3_iam_server
    root = tmp_path_factory.mktemp("s3-signing")
    bucket = s3.make_bucket(f"sign-{uuid.uuid4().hex[:12]}")
    people = (ROOT, WRITER, READER, STRANGER)
    env = {
        SECRETS_ENV: json.dumps(s3.admin.io_properties()),
        "METASTORE_AUTH": "on",
        "METASTORE_AUTH_CLIENTS": ",".join(f"{c}:{s}" for c, s in people),
        "METASTORE_AUTH_ADMINS": ROOT[0],
    }
    node = NodeProcess(root / "data", log_path=root / "node.log", env=env)
    with node, pytest.MonkeyPatch.context() as patch, one_pyiceberg_worker():
        # PyIceberg must find no key anywhere: only the node's signatures reach S3
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
            patch.delenv(name, raising=False)
        patch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(root / "none"))
        patch.setenv("AWS_CONFIG_FILE", str(root / "none"))
        patch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        tokens = {who[0]: _token(node.url, who) for who in people}
        catalog, enabled = f"c{uuid.uuid4().hex[:10]}", f"e{uuid.uuid4().hex[:10]}"
        here = Lake(node, s3, bucket, catalog, enabled, tokens)
        for name, signing in ((catalog, {"enabled": False}), (enabled, {"enabled": True})):
            storage = {
                "type": "s3",
                "root": f"s3://{bucket}/{name}",
                "io-properties": s3.io_properties(),
                "credentials": {"env": SECRETS_ENV},
                "remote-signing": signing,
            }
            reply = here.call(
                "root", "POST", f"{TENANT}/catalogs", json={"name": name, "storage": storage}
            )
            assert reply.status_code == 201, reply.text
        for path, body in _setup_steps(catalog):
            reply = here.call("root", "POST", path, json=body)
            assert reply.status_code == 201, f"{path}: {reply.text}"
        here.client(WRITER).create_namespace(("db",))
        yield here
    log = Path(node.log_path).read_text(errors="replace")
    assert "Traceback" not in log, node.log_tail(80)


def test_pyiceberg_without_keys_creates_appends_and_scans(lake: Lake) -> None:
    table = lake.client(WRITER).create_table(("db", "events"), SCHEMA)
    io = table.io.properties
    assert io["s3.remote-signing-enabled"] == "true" and io["s3.signer"] == "S3V4RestSigner"
    assert io["s3.signer.endpoint"] == lake.sign_path("events").removeprefix("/")
    assert io["s3.endpoint"] == lake.s3.endpoint
    assert not [k for k in io if "access-key" in k or "secret" in k or k.endswith("session-token")]
    table.append(rows([1, 2, 3]))
    table.append(rows([4], "us"))
    stored = lake.s3.keys_in(lake.bucket, lake.key("events", ""))
    assert sum(k.endswith(".parquet") for k in stored) == 2, stored
    again = lake.client(WRITER).load_table(("db", "events"))
    assert sorted(again.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3, 4]
    # a reader scans through signed reads, and cannot write: its PUTs are not signed
    read = lake.client(READER).load_table(("db", "events"))
    assert sorted(read.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3, 4]
    with pytest.raises(SignError, match="403"):
        read.append(rows([99]))
    assert set(lake.s3.keys_in(lake.bucket, lake.key("events", ""))) == set(stored)


def test_a_signature_covers_exactly_the_request_checked(lake: Lake) -> None:
    lake.client(WRITER).create_table(("db", "signed"), SCHEMA).append(rows([5]))
    [data] = [k for k in lake.s3.keys_in(lake.bucket, lake.key("signed", "")) if ".parquet" in k]
    url = lake.object_url(data)
    reply = lake.sign("reader", "signed", "GET", url)
    assert reply.status_code == 200, reply.text
    assert reply.headers["Cache-Control"] == "no-cache"
    signed = reply.json()
    assert signed["uri"] == url and set(signed["headers"]) >= {"Authorization", "X-Amz-Date"}
    headers = {name: ", ".join(values) for name, values in signed["headers"].items()}
    got = requests.get(url, headers=headers, timeout=30)
    assert got.status_code == 200 and got.content[:4] == b"PAR1"
    # the same headers on another key: S3 refuses them (the path is signed)
    other = lake.object_url(lake.key("signed", "metadata/x.json"))
    assert requests.get(other, headers=headers, timeout=30).status_code == 403


def test_signing_refuses_other_tables_and_ungranted_operations(lake: Lake) -> None:
    writer = lake.client(WRITER)
    for name in ("mine", "theirs"):
        writer.create_table(("db", name), SCHEMA)
    mine = lake.object_url(lake.key("mine", "data/a.parquet"))
    theirs = lake.object_url(lake.key("theirs", "data/a.parquet"))
    assert lake.sign("writer", "mine", "PUT", mine).status_code == 200
    assert lake.sign("reader", "mine", "GET", mine).status_code == 200
    # another table's path through this table's endpoint
    assert_error(lake.sign("writer", "mine", "GET", theirs), 403)
    assert_error(lake.sign("writer", "mine", "PUT", theirs), 403)
    # an operation beyond the grants: the reader writes, deletes; the stranger reads
    assert_error(lake.sign("reader", "mine", "PUT", mine), 403)
    assert_error(lake.sign("reader", "mine", "DELETE", mine), 403)
    assert_error(lake.sign("stranger", "mine", "GET", mine), 403)
    # listings: inside the table, never a prefix that also covers a neighbour
    listing = f"{lake.s3.endpoint}/{lake.bucket}?list-type=2&prefix="
    inside = lake.key("mine", "").replace("/", "%2F")
    assert lake.sign("reader", "mine", "GET", listing + inside).status_code == 200
    assert_error(lake.sign("reader", "mine", "GET", listing + inside.removesuffix("%2F")), 403)
    # a batch delete: every key of its body inside the table, signed with the body's hash
    # (S3 and MinIO refuse another body under it; moto does not check payload hashes)
    url = f"{lake.s3.endpoint}/{lake.bucket}?delete"
    [kept] = [k for k in lake.s3.keys_in(lake.bucket, lake.key("mine", "")) if "metadata" in k]
    body = f"<Delete><Object><Key>{kept}</Key></Object></Delete>"
    signed = lake.sign("writer", "mine", "POST", url, body=body)
    assert signed.status_code == 200, signed.text
    headers = {name: ", ".join(values) for name, values in signed.json()["headers"].items()}
    assert headers["X-Amz-Content-SHA256"] == hashlib.sha256(body.encode()).hexdigest()
    assert requests.post(url, data=body, headers=headers, timeout=30).status_code == 200
    assert kept not in lake.s3.keys_in(lake.bucket, lake.key("mine", ""))
    elsewhere = body.replace("/mine/", "/theirs/")
    assert_error(lake.sign("writer", "mine", "POST", url, body=elsewhere), 403)
    assert_error(lake.sign("reader", "mine", "POST", url, body=body), 403)
    assert_error(lake.sign("writer", "mine", "POST", url), 403)  # no body: keys unknown
    # an unknown table
    unknown = {"region": "us-east-1", "method": "GET", "uri": mine, "headers": {}}
    assert_error(lake.call("writer", "POST", lake.sign_path("nope"), json=unknown), 404)


@pytest.mark.parametrize(
    ("uri", "status"),
    [
        ("{s3}/{bucket}/{table}/../theirs/data/a.parquet", 400),
        ("{s3}/{bucket}/{table}/%2E%2E/theirs/data/a.parquet", 400),
        ("{s3}/{bucket}/{table}/%252E%252E/theirs/a", 403),  # a literal %2E%2E key: outside
        ("{s3}/other-bucket/{table}/data/a.parquet", 403),
        ("http://127.0.0.2:1/{bucket}/{table}/data/a.parquet", 403),
        # another bucket, virtual-hosted on the storage's own endpoint
        ("http://other-bucket.127.0.0.1:{port}/{bucket}/{table}/data/a.parquet", 403),
        ("{s3}/{bucket}/{table}/data/a.parquet?acl", 403),
        ("{s3}/{bucket}?delete", 403),
        ("file:///etc/passwd", 400),
        ("{s3}/{bucket}/{table}/data/a b", 400),
    ],
)
def test_hostile_requests_are_refused_never_5xx(lake: Lake, uri: str, status: int) -> None:
    writer = lake.client(WRITER)
    if ("db", "hostile") not in writer.list_tables(("db",)):
        writer.create_table(("db", "hostile"), SCHEMA)
    table = lake.key("hostile", "").rstrip("/")
    given = uri.format(s3=lake.s3.endpoint, port=lake.s3.port, bucket=lake.bucket, table=table)
    assert_error(lake.sign("writer", "hostile", "PUT", given), status)


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"region": "us-east-1", "method": "GET", "uri": "http://x/b/k"},  # no headers
        {"region": "us-east-1", "method": "TRACE", "uri": "http://x/b/k", "headers": {}},
        {"region": "us-east-1", "method": "GET", "uri": 7, "headers": {}},
        {"region": "us-east-1", "method": "GET", "uri": "u", "headers": {"a b": ["x"]}},
        {"region": "us-east-1", "method": "GET", "uri": "u", "headers": {"h": ["a\r\nb"]}},
        {"region": "../..", "method": "GET", "uri": "{mine}", "headers": {}},
        {"region": "us-east-1", "method": "GET", "uri": "{mine}", "headers": {}, "provider": "gcs"},
        {
            "region": "us-east-1",
            "method": "GET",
            "uri": "{mine}",
            "headers": {"authorization": ["x"]},
        },
    ],
)
def test_malformed_sign_requests_are_400(lake: Lake, body: dict[str, Any]) -> None:
    writer = lake.client(WRITER)
    if ("db", "bodies") not in writer.list_tables(("db",)):
        writer.create_table(("db", "bodies"), SCHEMA)
    mine = lake.object_url(lake.key("bodies", "data/a.parquet"))
    given = json.loads(json.dumps(body).replace("{mine}", mine))
    assert_error(lake.call("writer", "POST", lake.sign_path("bodies"), json=given), 400)


def test_the_table_config_offers_remote_signing_when_enabled_or_asked(lake: Lake) -> None:
    admin = RestCatalog(
        "root", uri=lake.node.url, warehouse=lake.enabled, token=lake.tokens["root"]
    )
    admin.create_namespace(("db",))
    admin.create_table(("db", "t"), SCHEMA)
    path = f"/v1/{lake.enabled}/namespaces/db/tables/t"
    config = lake.call("root", "GET", path).json()["config"]  # enabled: offered to everyone
    assert config["s3.remote-signing-enabled"] == "true"
    assert config["s3.signer.endpoint"] == f"v1/{lake.enabled}/namespaces/db/tables/t/sign"
    lake.client(WRITER).create_table(("db", "plain"), SCHEMA)
    plain = f"/v1/{lake.catalog}/namespaces/db/tables/plain"
    assert "s3.remote-signing-enabled" not in lake.call("writer", "GET", plain).json()["config"]
    asked = lake.call("writer", "GET", plain, headers=ASK).json()["config"]
    assert asked["s3.remote-signing-enabled"] == "true"
    assert not any("secret" in k or "access-key" in k for k in asked)


def test_the_storage_setting_is_shown_and_checked(lake: Lake) -> None:
    shown = lake.call("root", "GET", f"{TENANT}/catalogs/{lake.enabled}").json()["storage"]
    assert shown["remote-signing"] == {"enabled": True, "endpoints": []}
    base = {"type": "s3", "root": f"s3://{lake.bucket}/bad", "credentials": {"env": SECRETS_ENV}}
    for signing in ({"enabled": "yes"}, {"endpoints": ["http://x/path"]}, {"other": True}):
        body = {"name": f"b{uuid.uuid4().hex[:8]}", "storage": {**base, "remote-signing": signing}}
        assert_error(lake.call("root", "POST", f"{TENANT}/catalogs", json=body), 400)
    update = {"storage": {**base, "root": f"s3://{lake.bucket}/{lake.enabled}"}}
    update["storage"]["remote-signing"] = {"enabled": 1}
    path = f"{TENANT}/catalogs/{lake.enabled}/storage"
    assert_error(lake.call("root", "POST", path, json=update), 400)
    after = lake.call("root", "GET", f"{TENANT}/catalogs/{lake.enabled}").json()["storage"]
    assert after == shown  # nothing written


def test_a_load_is_retagged_when_the_catalog_starts_signing(lake: Lake) -> None:
    """The signing config is part of a load's answer, so turning it on in the catalog's
    storage changes the tag: a client holding the old one gets the new config, not 304."""
    name = f"r{uuid.uuid4().hex[:10]}"
    storage = {
        "type": "s3",
        "root": f"s3://{lake.bucket}/{name}",
        "io-properties": lake.s3.io_properties(),
        "credentials": {"env": SECRETS_ENV},
        "remote-signing": {"enabled": False},
    }
    created = lake.call(
        "root", "POST", f"{TENANT}/catalogs", json={"name": name, "storage": storage}
    )
    assert created.status_code == 201, created.text
    admin = RestCatalog("root", uri=lake.node.url, warehouse=name, token=lake.tokens["root"])
    admin.create_namespace(("db",))
    admin.create_table(("db", "t"), SCHEMA)
    path = f"/v1/{name}/namespaces/db/tables/t"
    tag = lake.call("root", "GET", path).headers["ETag"]
    assert lake.call("root", "GET", path, headers={"If-None-Match": tag}).status_code == 304

    version = created.json()["storage"]["version"]
    update = {
        "storage": {**storage, "remote-signing": {"enabled": True}},
        "expected-version": version,
    }
    reply = lake.call("root", "POST", f"{TENANT}/catalogs/{name}/storage", json=update)
    assert reply.status_code == 200, reply.text
    again = lake.call("root", "GET", path, headers={"If-None-Match": tag})
    assert again.status_code == 200
    assert again.json()["config"]["s3.remote-signing-enabled"] == "true"
    assert again.headers["ETag"] != tag
