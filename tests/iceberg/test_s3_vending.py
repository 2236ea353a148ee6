"""Vended credentials against an S3 server that enforces IAM (moto, session policies
enforced by ``harness.moto_server``): PyIceberg holding no key of its own reads and
writes its table with the credentials the node vends; the same credentials are refused
on another table's objects in the same bucket; a principal who may only read gets
credentials that only read; and hostile vending settings are refused."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from botocore.exceptions import ClientError
from pyiceberg.catalog.rest import RestCatalog

from harness.node import NodeProcess
from harness.s3 import Keys, S3Process
from tests.iceberg.support import SCHEMA, assert_error, rows

SECRETS_ENV = "METASTORE_STORAGE_CREDENTIALS_VEND"
UNKNOWN_ENV = "METASTORE_STORAGE_CREDENTIALS_UNKNOWN"  # keys the S3 server does not know
TENANT = "/api/v1/tenants/default"
ROOT = ("root", "root-secret-1")  # a service admin
READER = ("reader", "reader-secret-1")  # holds TABLE_READ_DATA on the catalog
DELEGATION = {"X-Iceberg-Access-Delegation": "vended-credentials"}


@dataclass(frozen=True)
class Vending:
    node: NodeProcess
    s3: S3Process
    bucket: str
    catalog: str
    tokens: dict[str, str]

    def client(self, who: tuple[str, str]) -> RestCatalog:
        """PyIceberg with the server's endpoint and no key: only what is vended."""
        return RestCatalog(
            who[0],
            uri=self.node.url,
            warehouse=self.catalog,
            token=self.tokens[who[0]],
            **self.s3.io_properties(),
        )

    def call(self, who: str, method: str, path: str, **kwargs: Any) -> requests.Response:
        headers = {"Authorization": f"Bearer {self.tokens[who]}", **kwargs.pop("headers", {})}
        return requests.request(method, self.node.url + path, headers=headers, timeout=60, **kwargs)

    def table_path(self, name: str) -> str:
        return f"/v1/{self.catalog}/namespaces/db/tables/{name}"

    def vended(self, who: str, table: str) -> tuple[Keys, str]:
        reply = self.call(who, "GET", self.table_path(table) + "/credentials")
        assert reply.status_code == 200, reply.text
        [found] = reply.json()["storage-credentials"]
        config = found["config"]
        keys = Keys(config["s3.access-key-id"], config["s3.secret-access-key"])
        return keys, config["s3.session-token"]

    def key(self, table: str, rest: str) -> str:
        return f"{self.catalog}/db/{table}/{rest}"


def _token(url: str, who: tuple[str, str]) -> str:
    form = {"grant_type": "client_credentials", "client_id": who[0], "client_secret": who[1]}
    reply = requests.post(f"{url}/v1/oauth/tokens", data=form, timeout=30)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["access_token"])


@pytest.fixture(scope="module")
def vending(
    s3_iam_server: S3Process, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Vending]:
    s3 = s3_iam_server
    root = tmp_path_factory.mktemp("s3-vending")
    bucket = s3.make_bucket(f"vend-{uuid.uuid4().hex[:12]}")
    env = {
        SECRETS_ENV: json.dumps(s3.admin.io_properties()),
        UNKNOWN_ENV: json.dumps(Keys("AKIAUNKNOWNUNKNOWN00", "not-a-known-secret").io_properties()),
        "METASTORE_AUTH": "on",
        "METASTORE_AUTH_CLIENTS": ",".join(f"{c}:{s}" for c, s in (ROOT, READER)),
        "METASTORE_AUTH_ADMINS": ROOT[0],
    }
    node = NodeProcess(root / "data", log_path=root / "node.log", env=env)
    with node:
        tokens = {who[0]: _token(node.url, who) for who in (ROOT, READER)}
        catalog = f"c{uuid.uuid4().hex[:10]}"
        storage = {
            "type": "s3",
            "root": f"s3://{bucket}/{catalog}",
            "io-properties": s3.io_properties(),
            "credentials": {"env": SECRETS_ENV},
            "credential-vending": {"role-arn": s3.role_arn, "duration-seconds": 900},
        }
        here = Vending(node, s3, bucket, catalog, tokens)
        steps = [
            (f"{TENANT}/catalogs", {"name": catalog, "storage": storage}),
            (f"{TENANT}/principal-roles", {"name": "readers"}),
            (f"{TENANT}/principal-roles/readers/principals", {"principal": READER[0]}),
            (f"{TENANT}/catalogs/{catalog}/catalog-roles", {"name": "readers"}),
            (
                f"{TENANT}/catalogs/{catalog}/catalog-roles/readers/grants",
                {"privilege": "TABLE_READ_DATA", "securable": {"kind": "catalog"}},
            ),
            (
                f"{TENANT}/principal-roles/readers/catalog-roles",
                {"catalog": catalog, "catalog-role": "readers"},
            ),
        ]
        for path, body in steps:
            reply = here.call("root", "POST", path, json=body)
            assert reply.status_code == 201, reply.text
        admin = here.client(ROOT)
        admin.create_namespace(("db",))
        for name in ("mine", "theirs"):
            admin.create_table(("db", name), SCHEMA).append(rows([1, 2]))
        admin.close()
        yield here
    log = Path(node.log_path).read_text(errors="replace")
    assert "Traceback" not in log, node.log_tail(80)


def test_only_vended_credentials_read_and_write_the_table(vending: Vending) -> None:
    client = vending.client(ROOT)
    table = client.create_table(("db", "fresh"), SCHEMA)  # the create vends too
    table.append(rows([10, 11]))
    again = vending.client(ROOT).load_table(("db", "fresh"))
    assert again.io.properties["s3.session-token"]
    assert "s3.access-key-id" not in client.properties  # the client was given no key
    again.append(rows([12]))
    assert sorted(again.scan().to_arrow()["id"].to_pylist()) == [10, 11, 12]
    loaded = vending.call("root", "GET", vending.table_path("fresh"), headers=DELEGATION).json()
    [credential] = loaded["storage-credentials"]
    assert credential["prefix"] == f"s3://{vending.bucket}/{vending.catalog}/db/fresh"
    assert credential["config"]["s3.access-key-id"] != vending.s3.admin.access_key_id
    assert int(credential["config"]["s3.session-token-expires-at-ms"]) > 0
    assert loaded["config"]["s3.session-token"] == credential["config"]["s3.session-token"]
    plain = vending.call("root", "GET", vending.table_path("fresh")).json()
    assert "storage-credentials" not in plain and plain["config"] == {}  # not asked for
    # the refresh, as PyIceberg calls it (it checks /v1/config advertises the route)
    fresh = client.load_credentials(("db", "fresh"), again.metadata_location)
    assert fresh["s3.session-token"] and fresh["s3.access-key-id"].startswith("ASIA")
    missing = vending.call("root", "GET", vending.table_path("nope") + "/credentials")
    assert_error(missing, 404, "NoSuchTableException")


def test_vended_credentials_reach_no_other_table(vending: Vending) -> None:
    keys, token = vending.vended("root", "mine")
    s3 = vending.s3.client(keys=keys, token=token)
    bucket = vending.bucket
    mine = s3.list_objects_v2(Bucket=bucket, Prefix=vending.key("mine", ""))["Contents"]
    assert mine and s3.get_object(Bucket=bucket, Key=mine[0]["Key"])["Body"].read()
    s3.put_object(Bucket=bucket, Key=vending.key("mine", "data/extra.bin"), Body=b"x")
    s3.delete_object(Bucket=bucket, Key=vending.key("mine", "data/extra.bin"))
    theirs = vending.s3.keys_in(bucket, vending.key("theirs", ""))
    assert theirs
    refused = [
        lambda: s3.get_object(Bucket=bucket, Key=theirs[0]),
        lambda: s3.put_object(Bucket=bucket, Key=vending.key("theirs", "data/x.bin"), Body=b"x"),
        lambda: s3.delete_object(Bucket=bucket, Key=theirs[0]),
        lambda: s3.list_objects_v2(Bucket=bucket, Prefix=vending.key("theirs", "")),
        lambda: s3.list_objects_v2(Bucket=bucket, Prefix=f"{vending.catalog}/db/mine"),
        lambda: s3.list_objects_v2(Bucket=bucket),
    ]
    for attempt in refused:
        with pytest.raises(ClientError, match="AccessDenied"):
            attempt()
    assert vending.s3.keys_in(bucket, vending.key("theirs", "")) == theirs


def test_a_staged_create_vends_nothing_for_a_location_another_table_holds(
    vending: Vending,
) -> None:
    """A staged create answers its credentials before any commit: at a location that
    another table holds, one around it or inside it, or that a dropped table of another
    name keeps, it is the 400 its commit would be, and vends nothing."""
    vending.call("root", "POST", f"/v1/{vending.catalog}/namespaces", json={"namespace": ["x"]})
    dropped = vending.client(ROOT).create_table(("db", "gone"), SCHEMA)
    dropped.append(rows([3]))
    assert vending.call("root", "DELETE", vending.table_path("gone")).status_code == 204
    root = f"s3://{vending.bucket}/{vending.catalog}"
    schema = json.loads(SCHEMA.model_dump_json())
    for location in (
        f"{root}/db/theirs",
        f"{root}/db",
        f"{root}/db/theirs/data",
        f"{root}/db/gone",
    ):
        body = {"name": "grab", "schema": schema, "stage-create": True, "location": location}
        path = f"/v1/{vending.catalog}/namespaces/x/tables"
        reply = vending.call("root", "POST", path, json=body, headers=DELEGATION)
        assert_error(reply, 400, "BadRequestException")
        assert "storage-credentials" not in reply.text, reply.text
    # its own name stages at the kept location, as a drop and create again expects
    body = {"name": "gone", "schema": schema, "stage-create": True, "location": f"{root}/db/gone"}
    staged = vending.call(
        "root",
        "POST",
        "/v1/" + vending.catalog + "/namespaces/db/tables",
        json=body,
        headers=DELEGATION,
    )
    assert staged.status_code == 200, staged.text
    assert staged.json()["storage-credentials"][0]["prefix"] == f"{root}/db/gone"


def test_a_reader_gets_credentials_that_only_read(vending: Vending) -> None:
    table = vending.client(READER).load_table(("db", "mine"))
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [1, 2]
    keys, token = vending.vended("reader", "mine")
    s3 = vending.s3.client(keys=keys, token=token)
    [first, *_] = vending.s3.keys_in(vending.bucket, vending.key("mine", "data/"))
    assert s3.get_object(Bucket=vending.bucket, Key=first)["Body"].read()
    for attempt in (
        lambda: s3.put_object(Bucket=vending.bucket, Key=vending.key("mine", "x.bin"), Body=b""),
        lambda: s3.delete_object(Bucket=vending.bucket, Key=first),
    ):
        with pytest.raises(ClientError, match="AccessDenied"):
            attempt()
    with pytest.raises(OSError, match=r"ACCESS_DENIED|AccessDenied|Access Denied"):
        table.append(rows([3]))


@pytest.mark.parametrize(
    "vend",
    [
        "arn:aws:iam::123456789012:role/x",  # not an object
        {"role-arn": "arn:aws:iam::123:role/x"},  # not an account id
        {"role-arn": "arn:aws:iam::123456789012:user/x"},  # a user, not a role
        {"role-arn": "arn:aws:iam::123456789012:role/x", "duration-seconds": 60},
        {"role-arn": "arn:aws:iam::123456789012:role/x", "duration-seconds": "900"},
        {"role-arn": "arn:aws:iam::123456789012:role/x", "sts-endpoint": "http://169.254.169.254"},
        {"role-arn": "arn:aws:iam::123456789012:role/x", "sts-endpoint": "file:///etc/passwd"},
        {
            "role-arn": "arn:aws:iam::123456789012:role/x",
            "sts-endpoint": "https://u:p@sts.amazonaws.com",
        },
        {"role-arn": "arn:aws:iam::123456789012:role/x", "policy": "*"},  # unknown key
    ],
)
def test_hostile_vending_settings_are_refused(vending: Vending, vend: Any) -> None:
    name = f"c{uuid.uuid4().hex[:10]}"
    storage = {
        "type": "s3",
        "root": f"s3://{vending.bucket}/{name}",
        "io-properties": vending.s3.io_properties(),
        "credential-vending": vend,
    }
    reply = vending.call(
        "root", "POST", f"{TENANT}/catalogs", json={"name": name, "storage": storage}
    )
    assert_error(reply, 400)
    assert vending.call("root", "GET", f"{TENANT}/catalogs/{name}").status_code == 404


def test_sts_refusing_is_a_503_naming_the_role(vending: Vending) -> None:
    """The storage's keys stop working (here: replaced by keys STS does not know) after
    the table exists: its load still answers, without credentials, as a 503."""
    name = f"c{uuid.uuid4().hex[:10]}"
    storage = {
        "type": "s3",
        "root": f"s3://{vending.bucket}/{name}",
        "io-properties": vending.s3.io_properties(),
        "credentials": {"env": SECRETS_ENV},
        "credential-vending": {"role-arn": vending.s3.role_arn},
    }
    catalogs = f"{TENANT}/catalogs"
    reply = vending.call("root", "POST", catalogs, json={"name": name, "storage": storage})
    assert reply.status_code == 201, reply.text
    client = RestCatalog("r", uri=vending.node.url, warehouse=name, token=vending.tokens["root"])
    client.create_namespace(("db",))
    client.create_table(("db", "t"), SCHEMA)
    storage["credentials"] = {"env": UNKNOWN_ENV}
    reply = vending.call("root", "POST", f"{catalogs}/{name}/storage", json={"storage": storage})
    assert reply.status_code == 200, reply.text
    path = f"/v1/{name}/namespaces/db/tables/t"
    for attempt in (path, path + "/credentials"):
        reply = vending.call("root", "GET", attempt, headers=DELEGATION)
        assert_error(reply, 503, "ServiceUnavailableException")
        assert vending.s3.role_arn in reply.json()["error"]["message"]
        assert "not-a-known-secret" not in reply.text
    assert vending.call("root", "GET", path).status_code == 200  # without asking: no STS
    # a create asking for credentials STS refuses creates nothing (vended before the commit)
    create = {"name": "t2", "schema": json.loads(SCHEMA.model_dump_json())}
    tables = f"/v1/{name}/namespaces/db/tables"
    reply = vending.call("root", "POST", tables, json=create, headers=DELEGATION)
    assert_error(reply, 503, "ServiceUnavailableException")
    assert vending.s3.role_arn in reply.json()["error"]["message"]
    assert vending.call("root", "GET", f"{tables}/t2").status_code == 404


def test_vending_needs_s3_storage(vending: Vending, tmp_path: Path) -> None:
    name = f"c{uuid.uuid4().hex[:10]}"
    storage = {
        "root": (vending.node.data_dir / "warehouse" / name).resolve().as_uri(),
        "credential-vending": {"role-arn": vending.s3.role_arn},
    }
    reply = vending.call(
        "root", "POST", f"{TENANT}/catalogs", json={"name": name, "storage": storage}
    )
    assert_error(reply, 400)


def test_a_seeded_catalog_vends_with_the_nodes_settings(
    s3_iam_server: S3Process, tmp_path: Path
) -> None:
    """A node whose warehouse seeds every catalog's storage, vending included (auth off:
    everyone may write)."""
    s3 = s3_iam_server
    bucket = s3.make_bucket(f"seed-{uuid.uuid4().hex[:12]}")
    env = {
        "METASTORE_WAREHOUSE": f"s3://{bucket}/wh",
        "METASTORE_WAREHOUSE_IO": json.dumps(s3.io_properties()),
        "METASTORE_WAREHOUSE_CREDENTIALS": json.dumps({"env": SECRETS_ENV}),
        SECRETS_ENV: json.dumps(s3.admin.io_properties()),
        "METASTORE_WAREHOUSE_VENDING": json.dumps({"role-arn": s3.role_arn}),
    }
    with NodeProcess(tmp_path / "data", log_path=tmp_path / "node.log", env=env) as node:
        client = RestCatalog("seeded", uri=node.url, **s3.io_properties())  # the default catalog
        client.create_namespace(("db",))
        table = client.create_table(("db", "t"), SCHEMA)
        table.append(rows([5, 6]))
        assert sorted(client.load_table(("db", "t")).scan().to_arrow()["id"].to_pylist()) == [5, 6]
        assert table.io.properties["s3.session-token"]
    assert s3.keys_in(bucket, "wh/default/default/db/t/data/")
