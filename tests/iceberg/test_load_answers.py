"""Table loads answer from a cache of each table version's metadata text: every change
that makes a new answer is seen by the very next load (a commit, a property change,
a rename, a drop and a create under the same name, the ``snapshots`` filter, the
catalog turning remote signing on and off), and what a load carries besides the
metadata stays per request (each caller's own vended credentials, the ones the
credentials route hands out). Each test loads first, so the answer it then checks
would come from the cache if the cache could serve a stale one."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlparse

import pytest
import requests
from botocore.exceptions import ClientError

from harness.node import NodeProcess
from harness.s3 import Keys, S3Process
from metastore.config.server_config import ServerConfig
from metastore.util.setting_rules import ConfigError
from tests.iceberg.support import SCHEMA, assert_error

SCHEMA_JSON = json.loads(SCHEMA.model_dump_json())
SECRETS_ENV = "METASTORE_STORAGE_CREDENTIALS_ANSWERS"
TENANT = "/api/v1/tenants/default"
ROOT = ("root", "root-secret-1")  # a service admin: may write every table's data
READER = ("reader", "reader-secret-1")  # holds TABLE_READ_DATA on the vending catalog
VENDED = {"X-Iceberg-Access-Delegation": "vended-credentials"}
SIGNING = {"X-Iceberg-Access-Delegation": "remote-signing"}


@dataclass(frozen=True)
class Node:
    process: NodeProcess
    s3: S3Process
    bucket: str
    tokens: dict[str, str]
    files: str  # a catalog on the node's own file storage
    signing: str  # S3 storage, remote signing off until a test turns it on
    vending: str  # S3 storage that vends credentials

    def call(self, method: str, path: str, who: str = "root", **kwargs: Any) -> requests.Response:
        headers = {"Authorization": f"Bearer {self.tokens[who]}", **kwargs.pop("headers", {})}
        url = self.process.url + path
        return requests.request(method, url, headers=headers, timeout=60, **kwargs)

    def ok(self, method: str, path: str, status: int = 200, **kwargs: Any) -> requests.Response:
        reply = self.call(method, path, **kwargs)
        assert reply.status_code == status, f"{method} {path}: {reply.status_code} {reply.text}"
        return reply


def _token(url: str, who: tuple[str, str]) -> str:
    form = {"grant_type": "client_credentials", "client_id": who[0], "client_secret": who[1]}
    reply = requests.post(f"{url}/v1/oauth/tokens", data=form, timeout=30)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["access_token"])


def _storage(s3: S3Process, bucket: str, catalog: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "s3",
        "root": f"s3://{bucket}/{catalog}",
        "io-properties": s3.io_properties(),
        "credentials": {"env": SECRETS_ENV},
        **extra,
    }


@pytest.fixture(scope="module")
def node(s3_iam_server: S3Process, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    s3 = s3_iam_server
    root = tmp_path_factory.mktemp("load-answers")
    bucket = s3.make_bucket(f"answers-{uuid.uuid4().hex[:12]}")
    env = {
        SECRETS_ENV: json.dumps(s3.admin.io_properties()),
        "METASTORE_AUTH": "on",
        "METASTORE_AUTH_CLIENTS": ",".join(f"{c}:{s}" for c, s in (ROOT, READER)),
        "METASTORE_AUTH_ADMINS": ROOT[0],
    }
    process = NodeProcess(root / "data", log_path=root / "node.log", env=env)
    with process:
        tokens = {who[0]: _token(process.url, who) for who in (ROOT, READER)}
        names = [f"{kind}{uuid.uuid4().hex[:10]}" for kind in "fsv"]
        here = Node(process, s3, bucket, tokens, *names)
        vend = {"role-arn": s3.role_arn, "duration-seconds": 900}
        catalogs = [
            {"name": here.files},
            {"name": here.signing, "storage": _storage(s3, bucket, here.signing)},
            {"name": here.vending, "storage": _storage(s3, bucket, here.vending)},
        ]
        catalogs[1]["storage"]["remote-signing"] = {"enabled": False}
        catalogs[2]["storage"]["credential-vending"] = vend
        for body in catalogs:
            here.ok("POST", f"{TENANT}/catalogs", 201, json=body)
        steps = [
            (f"{TENANT}/principal-roles", {"name": "readers"}),
            (f"{TENANT}/principal-roles/readers/principals", {"principal": READER[0]}),
            (f"{TENANT}/catalogs/{here.vending}/catalog-roles", {"name": "readers"}),
            (
                f"{TENANT}/catalogs/{here.vending}/catalog-roles/readers/grants",
                {"privilege": "TABLE_READ_DATA", "securable": {"kind": "catalog"}},
            ),
            (
                f"{TENANT}/principal-roles/readers/catalog-roles",
                {"catalog": here.vending, "catalog-role": "readers"},
            ),
        ]
        for path, body in steps:
            here.ok("POST", path, 201, json=body)
        for catalog in names:
            here.ok("POST", f"/v1/{catalog}/namespaces", json={"namespace": ["db"]})
        yield here
    log = Path(process.log_path).read_text(errors="replace")
    assert "Traceback" not in log, process.log_tail(80)


def _tables(catalog: str) -> str:
    return f"/v1/{catalog}/namespaces/db/tables"


def _create(node: Node, catalog: str, name: str) -> dict[str, Any]:
    body = {"name": name, "schema": SCHEMA_JSON}
    answer: dict[str, Any] = node.ok("POST", _tables(catalog), json=body).json()
    return answer


def _load(node: Node, catalog: str, name: str, **kwargs: Any) -> dict[str, Any]:
    answer: dict[str, Any] = node.ok("GET", f"{_tables(catalog)}/{name}", **kwargs).json()
    return answer


def _commit(node: Node, catalog: str, name: str, *updates: dict[str, Any]) -> dict[str, Any]:
    body = {"requirements": [], "updates": list(updates)}
    answer: dict[str, Any] = node.ok("POST", f"{_tables(catalog)}/{name}", json=body).json()
    return answer


def _snapshot(location: str, snapshot_id: int, parent: int | None, sequence: int) -> dict[str, Any]:
    """A metadata-only append (its manifest list is never read here)."""
    snapshot = {
        "snapshot-id": snapshot_id,
        "sequence-number": sequence,
        "timestamp-ms": 1_700_000_000_000 + sequence,
        "manifest-list": f"{location}/metadata/snap-{snapshot_id}.avro",
        "summary": {"operation": "append"},
        "schema-id": 0,
    }
    if parent is not None:
        snapshot["parent-snapshot-id"] = parent
    return {"action": "add-snapshot", "snapshot": snapshot}


def _main(snapshot_id: int) -> dict[str, Any]:
    return {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch",
            "snapshot-id": snapshot_id}  # fmt: skip


def _snapshot_ids(answer: dict[str, Any]) -> list[int]:
    return [s["snapshot-id"] for s in answer["metadata"].get("snapshots", [])]


def _file(location: str) -> Any:
    return json.loads(Path(urlparse(location).path).read_text())


def test_a_commit_is_answered_by_the_next_load(node: Node) -> None:
    name = f"t{uuid.uuid4().hex[:8]}"
    created = _create(node, node.files, name)
    assert _load(node, node.files, name)["metadata-location"] == created["metadata-location"]
    location = created["metadata"]["location"]
    for sequence in (1, 2, 3):
        parent = 100 + sequence - 1 if sequence > 1 else None
        committed = _commit(
            node, node.files, name, _snapshot(location, 100 + sequence, parent, sequence),
            _main(100 + sequence),
        )  # fmt: skip
        for _ in range(2):  # the first load after the commit, and a second one
            loaded = _load(node, node.files, name)
            assert loaded["metadata-location"] == committed["metadata-location"]
            assert _snapshot_ids(loaded) == [101 + i for i in range(sequence)]
            assert loaded["metadata"] == committed["metadata"]
            assert loaded["metadata"] == _file(loaded["metadata-location"])  # as written


def test_a_property_change_is_answered_by_the_next_load(node: Node) -> None:
    name = f"t{uuid.uuid4().hex[:8]}"
    _create(node, node.files, name)
    before = _load(node, node.files, name)
    _commit(node, node.files, name, {"action": "set-properties", "updates": {"owner": "x"}})
    after = _load(node, node.files, name)
    assert after["metadata-location"] != before["metadata-location"]
    assert after["metadata"]["properties"]["owner"] == "x"
    _commit(node, node.files, name, {"action": "remove-properties", "removals": ["owner"]})
    assert "owner" not in _load(node, node.files, name)["metadata"]["properties"]


def test_a_renamed_table_and_a_new_one_under_its_old_name_each_answer_their_own(
    node: Node,
) -> None:
    old, new = f"a{uuid.uuid4().hex[:8]}", f"b{uuid.uuid4().hex[:8]}"
    _create(node, node.files, old)
    before = _load(node, node.files, old)
    rename = {
        "source": {"namespace": ["db"], "name": old},
        "destination": {"namespace": ["db"], "name": new},
    }
    node.ok("POST", f"/v1/{node.files}/tables/rename", 204, json=rename)
    assert node.call("GET", f"{_tables(node.files)}/{old}").status_code == 404
    moved = _load(node, node.files, new)
    assert moved["metadata"]["table-uuid"] == before["metadata"]["table-uuid"]
    listed = node.ok("GET", _tables(node.files)).json()["identifiers"]
    assert {"namespace": ["db"], "name": new} in listed
    assert {"namespace": ["db"], "name": old} not in listed
    _create(node, node.files, old)
    again = _load(node, node.files, old)
    assert again["metadata"]["table-uuid"] != before["metadata"]["table-uuid"]


def test_a_table_dropped_and_created_again_answers_the_new_one(node: Node) -> None:
    name = f"t{uuid.uuid4().hex[:8]}"
    first = _create(node, node.files, name)
    for dropped in (False, True):  # the same version of the same name, and a later one
        if dropped:
            _commit(node, node.files, name, {"action": "set-properties", "updates": {"v": "1"}})
        before = _load(node, node.files, name)
        node.ok("DELETE", f"{_tables(node.files)}/{name}", 204)
        assert node.call("GET", f"{_tables(node.files)}/{name}").status_code == 404
        again = _create(node, node.files, name)
        loaded = _load(node, node.files, name)
        assert loaded["metadata"]["table-uuid"] == again["metadata"]["table-uuid"]
        assert loaded["metadata"]["table-uuid"] != before["metadata"]["table-uuid"]
        assert loaded["metadata-location"] == again["metadata-location"]
        assert "v" not in loaded["metadata"]["properties"]
    assert first["metadata"]["table-uuid"] != again["metadata"]["table-uuid"]


def test_a_table_registered_over_is_answered_by_the_next_load(node: Node) -> None:
    """A register with ``overwrite`` makes a new version of the same table from a file
    this node did not write in a commit: nothing of it is in the cache yet."""
    name = f"t{uuid.uuid4().hex[:8]}"
    first = _create(node, node.files, name)
    location = first["metadata"]["location"]
    _commit(node, node.files, name, _snapshot(location, 301, None, 1), _main(301))
    assert _snapshot_ids(_load(node, node.files, name)) == [301]
    body = {"name": name, "metadata-location": first["metadata-location"], "overwrite": True}
    node.ok("POST", f"/v1/{node.files}/namespaces/db/register", json=body)
    loaded = _load(node, node.files, name)
    assert loaded["metadata-location"] == first["metadata-location"]
    assert _snapshot_ids(loaded) == []


def test_each_snapshots_filter_answers_its_own_form_after_every_commit(node: Node) -> None:
    name = f"t{uuid.uuid4().hex[:8]}"
    location = _create(node, node.files, name)["metadata"]["location"]
    _commit(node, node.files, name, _snapshot(location, 201, None, 1), _main(201))
    for last in (202, 203):
        assert _snapshot_ids(_load(node, node.files, name)) == list(range(201, last))
        refs = _load(node, node.files, name, params={"snapshots": "refs"})
        assert _snapshot_ids(refs) == [last - 1]
        _commit(
            node, node.files, name, _snapshot(location, last, last - 1, last - 200), _main(last)
        )
    refs = _load(node, node.files, name, params={"snapshots": "refs"})
    assert _snapshot_ids(refs) == [203]
    assert _snapshot_ids(_load(node, node.files, name)) == [201, 202, 203]


def test_a_metadata_log_past_its_bound_loads_as_written_after_every_commit(node: Node) -> None:
    """Past ``write.metadata.previous-versions-max`` each commit drops the log's oldest
    entry; the stored log keeps it on its first page until a page's worth is dropped.
    A ``snapshots=refs`` load of a new version is assembled from the stored pieces (the
    commit leaves only the full answer's text): it has exactly the file's log, across
    more commits than a page holds."""
    name = f"t{uuid.uuid4().hex[:8]}"
    body = {"name": name, "schema": SCHEMA_JSON,
            "properties": {"write.metadata.previous-versions-max": "3"}}  # fmt: skip
    node.ok("POST", _tables(node.files), json=body)
    for i in range(40):
        _commit(node, node.files, name, {"action": "set-properties", "updates": {"i": str(i)}})
        assembled = _load(node, node.files, name, params={"snapshots": "refs"})
        written = _file(assembled["metadata-location"])
        assert assembled["metadata"]["metadata-log"] == written["metadata-log"]
        assert len(written["metadata-log"]) == min(i + 1, 3)


def _set_signing(node: Node, enabled: bool) -> None:
    path = f"{TENANT}/catalogs/{node.signing}"
    version = node.ok("GET", path).json()["storage"]["version"]
    storage = _storage(
        node.s3, node.bucket, node.signing, **{"remote-signing": {"enabled": enabled}}
    )
    update = {"storage": storage, "expected-version": version}
    node.ok("POST", f"{path}/storage", json=update)


def test_turning_remote_signing_on_and_off_is_answered_by_the_next_load(node: Node) -> None:
    name = f"t{uuid.uuid4().hex[:8]}"
    _create(node, node.signing, name)
    endpoint = f"v1/{node.signing}/namespaces/db/tables/{name}/sign"
    assert "s3.signer.endpoint" not in _load(node, node.signing, name)["config"]
    asked = _load(node, node.signing, name, headers=SIGNING)  # this caller asks for it
    assert asked["config"]["s3.signer.endpoint"] == endpoint
    assert "s3.signer.endpoint" not in _load(node, node.signing, name)["config"]
    _set_signing(node, True)
    assert _load(node, node.signing, name)["config"]["s3.signer.endpoint"] == endpoint
    _set_signing(node, False)
    assert "s3.signer.endpoint" not in _load(node, node.signing, name)["config"]


def _credentials(answer: dict[str, Any]) -> tuple[Keys, str]:
    [found] = answer["storage-credentials"]
    config = found["config"]
    assert answer["config"] == config
    keys = Keys(config["s3.access-key-id"], config["s3.secret-access-key"])
    return keys, config["s3.session-token"]


def test_each_caller_gets_the_current_credentials_of_its_own_access(node: Node) -> None:
    name = f"t{uuid.uuid4().hex[:8]}"
    _create(node, node.vending, name)
    plain = _load(node, node.vending, name)
    assert "storage-credentials" not in plain and plain["config"] == {}
    writer = _credentials(_load(node, node.vending, name, headers=VENDED))
    assert _credentials(_load(node, node.vending, name, headers=VENDED)) == writer
    # the credentials a load hands out are the caller's current ones, as the refresh
    # route hands them out (the vendor reuses them for half their lifetime)
    route = f"{_tables(node.vending)}/{name}/credentials"
    [refreshed] = node.ok("GET", route).json()["storage-credentials"]
    assert refreshed["config"]["s3.session-token"] == writer[1]
    reader = _credentials(_load(node, node.vending, name, who="reader", headers=VENDED))
    key = f"{node.vending}/db/{name}/data/x.bin"
    node.s3.client(keys=writer[0], token=writer[1]).put_object(
        Bucket=node.bucket, Key=key, Body=b""
    )
    with pytest.raises(ClientError, match="AccessDenied"):
        node.s3.client(keys=reader[0], token=reader[1]).put_object(
            Bucket=node.bucket, Key=key, Body=b""
        )
    assert "storage-credentials" not in _load(node, node.vending, name)  # none unasked


def test_a_listing_answers_every_name_as_it_was_given(node: Node) -> None:
    namespace = f"n{uuid.uuid4().hex[:8]}"
    for levels in ([namespace], [namespace, 'é"x']):
        node.ok("POST", f"/v1/{node.files}/namespaces", json={"namespace": levels})
    path = f"/v1/{node.files}/namespaces/{namespace}%1F%C3%A9%22x/tables"
    names = ['q"uote', "ünï ✓", "sp ace", "li\u2028ne", "x" * 200]
    for name in names:
        node.ok("POST", path, json={"name": name, "schema": SCHEMA_JSON})
    listed = node.ok("GET", path).json()
    assert listed["next-page-token"] is None
    expected = [{"namespace": [namespace, 'é"x'], "name": name} for name in sorted(names)]
    assert sorted(listed["identifiers"], key=lambda i: i["name"]) == expected
    node.ok("DELETE", f"{path}/{quote(names[0], safe='')}", 204)
    assert len(node.ok("GET", path).json()["identifiers"]) == len(names) - 1


@pytest.mark.parametrize("raw", ["-1", "2e9", "lots", str(2 * 1024**4)])
def test_the_cache_size_setting_is_checked_at_startup(raw: str) -> None:
    with pytest.raises(ConfigError) as refused:
        ServerConfig.load({}, env={"METASTORE_ICEBERG_LOAD_CACHE_BYTES": raw})
    assert str(refused.value).startswith("METASTORE_ICEBERG_LOAD_CACHE_BYTES: ")
    assert ServerConfig.load({}, env={"METASTORE_ICEBERG_LOAD_CACHE_BYTES": "0"})


def test_an_unknown_catalog_is_a_404_before_what_else_the_request_gets_wrong(node: Node) -> None:
    """A load and a listing check the catalog in the read that answers them, and still
    answer in the order every Iceberg route does: the catalog's 404 first."""
    name = f"t{uuid.uuid4().hex[:8]}"
    _create(node, node.files, name)
    bad_key = {"Idempotency-Key": "not a key!"}
    for catalog, status in (("nosuchcatalog", 404), (node.files, 400)):
        table = f"{_tables(catalog)}/{name}"
        for reply in (
            node.call("GET", table, params={"snapshots": "some"}),
            node.call("GET", table, headers=bad_key),
            node.call("GET", _tables(catalog), headers=bad_key),
        ):
            assert_error(reply, status)
    assert_error(
        node.call("GET", f"{_tables(node.files)}/nosuchtable"), 404, "NoSuchTableException"
    )
    assert_error(node.call("GET", f"/v1/{node.files}/namespaces/{'x' * 300}/tables"), 400)
    missing = node.call("GET", f"/v1/{node.files}/namespaces/nosuchnamespace/tables")
    assert_error(missing, 404, "NoSuchNamespaceException")
