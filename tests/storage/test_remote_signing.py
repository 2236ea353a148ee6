"""Remote signing's pure parts: the SigV4 signature (checked against botocore's own S3
signer), what an S3 request touches and whether a table covers it, the storage setting."""

from __future__ import annotations

import base64
import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials

from metastore.config.server_config import ServerConfig
from metastore.errors import BadRequest, Forbidden
from metastore.iceberg.s3_requests import Access, Target, parse
from metastore.iceberg.sigv4 import AwsKeys, sign
from metastore.storage.remote_signing import Endpoint, RemoteSigning
from metastore.storage.settings import Storage
from metastore.util.setting_rules import ConfigError

KEYS = AwsKeys("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
ENDPOINTS = (Endpoint.parse("http://127.0.0.1:9000"),)
BASE = "http://127.0.0.1:9000"
TABLE = "s3://lake/sales/ns/orders"


# --- the signature ---------------------------------------------------------------------------


def botocore_signed(
    method: str, url: str, headers: dict[str, str], keys: AwsKeys
) -> tuple[dict[str, str], datetime]:
    """What botocore's S3 signer adds, and the time it signed at."""
    request = AWSRequest(method=method, url=url, headers=dict(headers))
    request.context["client_config"] = Config(s3={"payload_signing_enabled": False})
    credentials = Credentials(keys.access_key_id, keys.secret_access_key, keys.session_token)
    S3SigV4Auth(credentials, "s3", "us-east-1").add_auth(request)
    when = datetime.strptime(request.headers["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    return dict(request.headers.items()), when


CASES = [
    ("GET", f"{BASE}/lake/sales/ns/orders/metadata/v1.metadata.json", {}),
    ("HEAD", f"{BASE}/lake/sales/ns/orders/data/a%20b%3Dc.parquet?x-id=HeadObject", {}),
    (
        "PUT",
        f"{BASE}/lake/sales/ns/orders/data/x.parquet?partNumber=2&uploadId=abc%2Bdef",
        {"Content-MD5": "1B2M2Y8AsgTpgAmY7PhCfg==", "Content-Type": "application/octet-stream"},
    ),
    (
        "GET",
        f"{BASE}/lake?list-type=2&prefix=sales%2Fns%2Forders%2F&delimiter=%2F",
        {"Range": "bytes=0-  99", "amz-sdk-request": "attempt=1; max=3"},
    ),
    ("GET", "https://lake.s3.us-east-1.amazonaws.com/sales/ns/orders/x", {"User-Agent": "u"}),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]} {c[1][:60]}")
@pytest.mark.parametrize("token", [None, "session-token"])
def test_signature_is_botocores(case: tuple[str, str, dict[str, str]], token: str | None) -> None:
    method, url, headers = case
    keys = AwsKeys(KEYS.access_key_id, KEYS.secret_access_key, token)
    theirs, when = botocore_signed(method, url, headers, keys)
    given = {name.lower(): [value] for name, value in headers.items()}
    ours = sign(method, url, given, "us-east-1", keys, when)
    assert ours["Authorization"] == theirs["Authorization"]
    # only what the request lacks is returned: a client appends these headers
    assert set(ours) == {"Authorization", "X-Amz-Date", "X-Amz-Content-SHA256"} | (
        {"X-Amz-Security-Token"} if token else set()
    )
    assert ours["X-Amz-Content-SHA256"] == "UNSIGNED-PAYLOAD"


def test_signature_keeps_the_clients_payload_hash_and_date() -> None:
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    digest = hashlib.sha256(b"x").hexdigest()
    headers = {"x-amz-content-sha256": [digest], "x-amz-date": ["20260102T030000Z"]}
    signed = sign("PUT", f"{BASE}/lake/k", headers, "us-east-1", KEYS, now)
    assert set(signed) == {"Authorization"}
    assert "x-amz-content-sha256;x-amz-date" in signed["Authorization"]


@pytest.mark.parametrize(
    "headers",
    [
        {"authorization": ["AWS4-HMAC-SHA256 ..."]},
        {"x-amz-security-token": ["mine"]},
        {"host": ["elsewhere:9000"]},
        {"x-amz-date": ["20200101T000000Z"]},  # far from now
        {"x-amz-date": ["yesterday"]},
        {"x-amz-content-sha256": ["STREAMING-AWS4-HMAC-SHA256-PAYLOAD"]},
    ],
)
def test_signature_refuses_what_the_signer_must_provide(headers: dict[str, list[str]]) -> None:
    with pytest.raises(BadRequest):
        sign("GET", f"{BASE}/lake/k", headers, "us-east-1", KEYS, datetime.now(UTC))


def test_keys_from_io_properties_and_never_in_repr() -> None:
    keys = AwsKeys.of({"s3.access-key-id": "AKID", "s3.secret-access-key": "very-secret"})
    assert keys == AwsKeys("AKID", "very-secret")
    assert "very-secret" not in repr(keys)
    assert AwsKeys.of({"s3.endpoint": "http://x"}) is None


# --- what a request touches -------------------------------------------------------------------


def target(method: str, uri: str, headers: dict[str, list[str]] | None = None, **kw: Any) -> Target:
    return parse(method, uri, headers or {}, kw.get("body"), kw.get("endpoints", ENDPOINTS))


OBJ = f"{BASE}/lake/sales/ns/orders/data/x.parquet"


@pytest.mark.parametrize(
    ("method", "uri", "access"),
    [
        ("GET", OBJ, Access.READ),
        ("HEAD", OBJ + "?x-id=HeadObject", Access.READ),
        ("PUT", OBJ + "?x-id=PutObject", Access.WRITE),
        ("POST", OBJ + "?uploads", Access.WRITE),
        ("PUT", OBJ + "?partNumber=1&uploadId=u", Access.WRITE),
        ("POST", OBJ + "?uploadId=u", Access.WRITE),
        ("DELETE", OBJ, Access.WRITE),
        ("GET", f"{BASE}/lake?list-type=2&prefix=sales%2Fns%2Forders%2Fdata%2F", Access.READ),
        ("GET", "http://lake.127.0.0.1:9000/sales/ns/orders/data/x.parquet", Access.READ),
    ],
)
def test_operations_inside_the_table_are_signed(method: str, uri: str, access: Access) -> None:
    found = target(method, uri)
    assert found.access is access and found.bucket == "lake"
    found.check_within(TABLE)


def test_aws_hosts_without_an_endpoint() -> None:
    for uri in (
        "https://lake.s3.us-east-1.amazonaws.com/sales/ns/orders/x",
        "https://s3.eu-west-1.amazonaws.com/lake/sales/ns/orders/x",
        "https://s3.amazonaws.com/lake/sales/ns/orders/x",
    ):
        target("GET", uri, endpoints=()).check_within(TABLE)
    with pytest.raises(Forbidden):
        target("GET", "http://lake.s3.amazonaws.com/sales/ns/orders/x", endpoints=())
    with pytest.raises(Forbidden):
        target("GET", f"{BASE}/lake/sales/ns/orders/x", endpoints=())


@pytest.mark.parametrize(
    "uri",
    [
        f"{BASE}/lake/sales/ns/other/x",  # another table
        f"{BASE}/lake/sales/ns/orders2/x",  # a neighbour sharing the name's start
        f"{BASE}/other/sales/ns/orders/x",  # another bucket
        f"{BASE}/lake/sales/ns",  # the namespace's folder
        f"{BASE}/lake?list-type=2&prefix=sales%2Fns%2Forders",  # also lists orders2
        f"{BASE}/lake?list-type=2&prefix=sales%2F",
    ],
)
def test_outside_the_table_is_forbidden(uri: str) -> None:
    with pytest.raises(Forbidden):
        target("GET", uri).check_within(TABLE)


@pytest.mark.parametrize(
    ("method", "uri", "headers"),
    [
        ("GET", "http://127.0.0.2:9000/lake/sales/ns/orders/x", {}),  # another host
        ("GET", "http://127.0.0.1:9001/lake/sales/ns/orders/x", {}),  # another port
        ("GET", "https://127.0.0.1:9000/lake/sales/ns/orders/x", {}),  # another scheme
        # another host whose virtual-hosted reading names another bucket
        ("GET", "http://other.evil.example:9000/lake/sales/ns/orders/x", {}),
        ("PUT", OBJ + "?acl", {}),
        ("PUT", OBJ + "?tagging", {}),
        ("GET", OBJ + "?torrent", {}),
        ("POST", OBJ + "?restore", {}),
        ("POST", OBJ, {}),
        ("PUT", OBJ, {"x-amz-acl": ["public-read"]}),
        ("PUT", OBJ, {"x-amz-grant-read": ["uri=everyone"]}),
        ("PUT", OBJ, {"x-amz-object-lock-mode": ["COMPLIANCE"]}),
        ("DELETE", OBJ, {"x-amz-bypass-governance-retention": ["true"]}),
        ("PUT", OBJ, {"x-amz-copy-source": ["other/sales/ns/orders/y"]}),
        ("GET", f"{BASE}/lake", {}),  # a listing without a prefix
        ("GET", f"{BASE}/lake?list-type=2", {}),
        ("GET", f"{BASE}/lake?location", {}),
        ("HEAD", f"{BASE}/lake", {}),
        ("PUT", f"{BASE}/lake?policy", {}),
        ("DELETE", f"{BASE}/lake", {}),
        ("POST", f"{BASE}/lake?delete", {}),  # a batch delete without its body
        ("POST", f"{BASE}/lake?delete&policy", {}),
        ("OPTIONS", OBJ, {}),
        ("PATCH", OBJ, {}),
    ],
)
def test_operations_never_signed(method: str, uri: str, headers: dict[str, list[str]]) -> None:
    with pytest.raises(Forbidden):
        target(method, uri, headers)


def test_a_copy_reads_its_source_inside_the_table() -> None:
    inside = {"x-amz-copy-source": ["lake/sales/ns/orders/data/y.parquet"]}
    target("PUT", OBJ, inside).check_within(TABLE)
    outside = {"x-amz-copy-source": ["lake/sales/ns/other/y.parquet"]}
    with pytest.raises(Forbidden):
        target("PUT", OBJ, outside).check_within(TABLE)


@pytest.mark.parametrize(
    "uri",
    [
        f"{BASE}/lake/sales/ns/orders/../other/x",
        f"{BASE}/lake/sales/ns/orders/%2E%2E/other/x",  # encoded traversal
        f"{BASE}/lake/sales/ns/orders/%2e%2e/other/x",  # not canonical either
        f"{BASE}/lake/sales/ns/orders/./x",
        f"{BASE}/lake/sales/ns/orders//x",
        f"{BASE}/lake/sales/ns/orders/a%5Cb",  # a backslash in the key
        f"{BASE}/lake/sales/ns/orders/a%00b",
        f"{BASE}/lake/sales/ns/orders/a b",
        f"{BASE}/lake/sales/ns/orders/%zz",
        f"{BASE}/lake/sales/ns/orders/x#frag",
        "http://user@127.0.0.1:9000/lake/sales/ns/orders/x",
        "ftp://127.0.0.1:9000/lake/sales/ns/orders/x",
        "http://127.0.0.1:99999/lake/x",
        "not a url",
        f"{BASE}/lake/sales/ns/orders/x?x-id=a&x-id=b",
        f"{BASE}/lake/sales/ns/orders/x?x-id=a b",
        f"{BASE}/LAKE/sales/ns/orders/x",  # no valid bucket
        f"{BASE}/lake?list-type=2&prefix=sales%2Fns%2Forders%2F..%2Fother%2F",
    ],
)
def test_hostile_uris_are_bad_requests(uri: str) -> None:
    with pytest.raises(BadRequest):
        target("GET", uri)


DELETE_BODY = (
    '<Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
    "<Object><Key>sales/ns/orders/data/a.parquet</Key></Object>"
    "<Object><Key>{second}</Key></Object><Quiet>true</Quiet></Delete>"
)


def md5_header(body: str) -> dict[str, list[str]]:
    digest = hashlib.md5(body.encode(), usedforsecurity=False).digest()
    return {"content-md5": [base64.b64encode(digest).decode()]}


def test_batch_delete_checks_every_key_and_signs_its_body() -> None:
    uri = f"{BASE}/lake?delete"
    body = DELETE_BODY.format(second="sales/ns/orders/data/b.parquet")
    digest = hashlib.sha256(body.encode()).hexdigest()
    for headers in ({}, md5_header(body), {"x-amz-content-sha256": [digest]}):
        found = target("POST", uri, headers, body=body)
        assert found.access is Access.WRITE and len(found.keys) == 2
        assert found.payload == digest  # S3 refuses any other body under this signature
        found.check_within(TABLE)
    other = DELETE_BODY.format(second="sales/ns/other/data/b.parquet")
    with pytest.raises(Forbidden):
        target("POST", uri, md5_header(other), body=other).check_within(TABLE)
    with pytest.raises(Forbidden):  # an unsigned payload: the body sent could differ
        target("POST", uri, {"x-amz-content-sha256": ["UNSIGNED-PAYLOAD"]}, body=body)
    with pytest.raises(BadRequest):  # a checksum of another body
        target("POST", uri, md5_header(other), body=body)
    evil = '<!DOCTYPE d [<!ENTITY e "x">]><Delete><Object><Key>&e;</Key></Object></Delete>'
    with pytest.raises(BadRequest):
        target("POST", uri, {}, body=evil)
    with pytest.raises(BadRequest):
        target("POST", uri, {}, body="<Delete>")


def test_a_signed_payload_is_botocores() -> None:
    body = DELETE_BODY.format(second="sales/ns/orders/data/b.parquet")
    url = f"{BASE}/lake?delete"
    request = AWSRequest(method="POST", url=url, data=body.encode(), headers={})
    request.context["client_config"] = Config(s3={"payload_signing_enabled": True})
    credentials = Credentials(KEYS.access_key_id, KEYS.secret_access_key)
    S3SigV4Auth(credentials, "s3", "us-east-1").add_auth(request)
    when = datetime.strptime(request.headers["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    digest = hashlib.sha256(body.encode()).hexdigest()
    ours = sign("POST", url, {}, "us-east-1", KEYS, when, payload_hash=digest)
    assert ours["X-Amz-Content-SHA256"] == digest == request.headers["X-Amz-Content-SHA256"]
    assert ours["Authorization"] == request.headers["Authorization"]
    with pytest.raises(BadRequest):  # the client's own hash of another body
        sign(
            "POST",
            url,
            {"x-amz-content-sha256": ["0" * 64]},
            "us-east-1",
            KEYS,
            when,
            payload_hash=digest,
        )


# --- the storage setting ----------------------------------------------------------------------


def test_storage_setting_is_validated_and_round_trips() -> None:
    body = {
        "root": "s3://lake/sales",
        "io-properties": {"s3.endpoint": "http://minio:9000"},
        "remote-signing": {"enabled": True, "endpoints": ["http://localhost:9000/"]},
    }
    storage = Storage.from_json(body)
    assert storage.remote_signing == RemoteSigning(True, ("http://localhost:9000",))
    again = Storage.from_properties(storage.to_properties(), 1)
    assert again.remote_signing == storage.remote_signing
    assert again.to_json()["remote-signing"] == {
        "enabled": True,
        "endpoints": ["http://localhost:9000"],
    }
    endpoints = again.remote_signing.client_endpoints("http://minio:9000")
    assert [str(e) for e in endpoints] == ["http://localhost:9000", "http://minio:9000"]
    plain = Storage.from_json({"root": "s3://lake/other"})
    assert "remote-signing" not in plain.to_json()  # an unset setting is not shown


@pytest.mark.parametrize(
    "setting",
    [
        {"enabled": "yes"},
        {"endpoints": ["ftp://x"]},
        {"endpoints": ["http://x/path"]},
        {"endpoints": ["http://u:p@x"]},
        {"endpoints": "http://x"},
        {"other": 1},
        [],
    ],
)
def test_storage_setting_refuses_bad_values(setting: Any) -> None:
    with pytest.raises(BadRequest):
        Storage.from_json({"root": "s3://lake/sales", "remote-signing": setting})


def test_storage_setting_is_for_s3_only() -> None:
    with pytest.raises(BadRequest):
        Storage.from_json({"root": "file:///tmp/x", "remote-signing": {"enabled": True}})


def test_clock_skew_bound_is_minutes() -> None:
    now = datetime.now(UTC)
    near = (now - timedelta(minutes=2)).strftime("%Y%m%dT%H%M%SZ")
    sign("GET", f"{BASE}/lake/k", {"x-amz-date": [near]}, "us-east-1", KEYS, now)


# --- the node's seed --------------------------------------------------------------------------

SEED = '{"enabled": true, "endpoints": ["http://localhost:9000"]}'


def test_the_seeded_storage_takes_the_nodes_setting(tmp_path: Path) -> None:
    env = {"METASTORE_WAREHOUSE": "s3://warehouse", "METASTORE_WAREHOUSE_REMOTE_SIGNING": SEED}
    config = ServerConfig.load({"data_dir": tmp_path}, env=env)
    seeded = config.node_storage()
    assert seeded.remote_signing == RemoteSigning(True, ("http://localhost:9000",))
    assert ServerConfig.load({"data_dir": tmp_path}, env={}).seed_remote_signing.default


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        ({"METASTORE_WAREHOUSE": "s3://w", "METASTORE_WAREHOUSE_REMOTE_SIGNING": "{"}, "JSON"),
        (
            {"METASTORE_WAREHOUSE": "s3://w", "METASTORE_WAREHOUSE_REMOTE_SIGNING": '{"on": 1}'},
            "remote-signing",
        ),
        ({"METASTORE_WAREHOUSE_REMOTE_SIGNING": SEED}, "s3://"),  # a file:// warehouse
    ],
)
def test_a_bad_seed_setting_stops_the_node(
    tmp_path: Path, env: dict[str, str], problem: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        ServerConfig.load({"data_dir": tmp_path}, env=env)
    message = str(refused.value)
    assert message.startswith("METASTORE_WAREHOUSE_REMOTE_SIGNING: ") and problem in message
