"""A catalog's storage (``metastore.storage.settings``) and its credentials by reference
(``metastore.storage.credentials``): what is accepted, what is refused, what is stored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from metastore.errors import BadRequest, StorageUnavailable
from metastore.storage.credentials import Credentials, CredentialSources, is_secret_key
from metastore.storage.settings import Storage, seeded

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
KEYS = {"s3.access-key-id": "AKIA-EXAMPLE-ID", "s3.secret-access-key": SECRET}
ENV = "METASTORE_STORAGE_CREDENTIALS_TEST"


def test_a_storage_is_normalized_and_its_root_is_the_default_allowed_location() -> None:
    storage = Storage.from_json({"root": "file:///srv//wh/./sales/"})
    assert (storage.kind, storage.root, storage.allowed) == (
        "file",
        "file:///srv/wh/sales",
        ("file:///srv/wh/sales",),
    )
    s3 = Storage.from_json(
        {
            "type": "s3",
            "root": "s3://bucket/wh/sales",
            "allowed-locations": ["s3://bucket/wh", "s3://other/x/", "s3://bucket/wh"],
            "io-properties": {"s3.endpoint": "http://127.0.0.1:9000", "s3.region": "eu"},
            "credentials": {"env": ENV},
        }
    )
    assert s3.allowed == ("s3://bucket/wh", "s3://other/x")
    assert Storage.from_json({"root": "s3://bucket"}).root == "s3://bucket"
    assert s3.credentials == Credentials(env=ENV)


def test_the_record_round_trips_and_holds_no_secret() -> None:
    storage = Storage.from_json(
        {
            "root": "s3://bucket/wh",
            "io-properties": {"s3.endpoint": "http://minio:9000"},
            "credentials": {"file": "/run/secrets/minio.json"},
        }
    )
    properties = storage.to_properties()
    assert list(properties) == ["storage"]
    again = Storage.from_properties(properties, 3)
    assert again.to_json() == {**storage.to_json(), "version": 3}
    assert again.to_json()["credentials"] == {"file": "/run/secrets/minio.json"}


REFUSED: list[tuple[Any, str]] = [
    ({"root": "relative/wh"}, "relative"),
    ({"root": "/srv/wh"}, "file:///absolute/path"),
    ({"root": "http://host/wh"}, "file:// or s3://"),
    ({"root": "gs://bucket/wh"}, "file:// or s3://"),
    ({"root": "file:///"}, "whole filesystem"),
    ({"root": "file://host/wh"}, "file:///absolute/path"),
    ({"root": "s3:///wh"}, "names no bucket"),
    ({"root": "s3://b/wh/../../x"}, "climbs above"),
    ({"root": "s3://b/wh/a%2Fb"}, "hides a path separator"),
    ({"root": "s3://b/wh", "type": "file"}, "not of the storage's type file"),
    ({"root": "s3://b/wh", "type": "gcs"}, "type must be one of"),
    ({"root": "s3://b/wh", "allowed-locations": ["s3://b/other"]}, "inside none"),
    ({"root": "s3://b/wh", "allowed-locations": ["s3://b/wh2"]}, "inside none"),
    ({"root": "s3://b/wh", "allowed-locations": ["s3://b", "file:///x"]}, "not of the storage"),
    ({"root": "s3://b/wh", "allowed-locations": []}, "1-100 locations"),
    ({"root": "s3://b/wh", "io-properties": ["s3.endpoint"]}, "JSON object"),
    ({"root": "s3://b/wh", "io-properties": {"s3.endpoint": 9000}}, "map names to strings"),
    ({"root": "s3://b/wh", "io-properties": {"py-io-impl": "x.Y"}}, "not an S3 FileIO"),
    ({"root": "s3://b/wh", "io-properties": {"s3.retry-strategy-impl": "x"}}, "class to load"),
    ({"root": "s3://b/wh", "io-properties": {"gcs.project-id": "p"}}, "not an S3 FileIO"),
    ({"root": "s3://b/wh", "credentials": {"env": "HOME"}}, "METASTORE_STORAGE_CREDENTIALS_"),
    ({"root": "s3://b/wh", "credentials": {"env": "METASTORE_CLUSTER_SECRET"}}, "must be named"),
    ({"root": "s3://b/wh", "credentials": {"env": ENV, "file": "/x"}}, '{"env": NAME}'),
    ({"root": "s3://b/wh", "credentials": {"file": "x.json"}}, "absolute, normalized"),
    ({"root": "s3://b/wh", "credentials": {"file": "/run/../etc/x"}}, "absolute, normalized"),
    ({"root": "s3://b/wh", "credentials": "METASTORE_STORAGE_CREDENTIALS_X"}, '{"env": NAME}'),
]


@pytest.mark.parametrize(("body", "problem"), REFUSED)
def test_a_bad_storage_is_a_400(body: Any, problem: str) -> None:
    with pytest.raises(BadRequest) as refused:
        Storage.from_json(body)
    assert problem in refused.value.message


@pytest.mark.parametrize(
    "key",
    [
        "s3.secret-access-key",
        "s3.access-key-id",
        "s3.session-token",
        "client.secret-access-key",
        "client.access-key-id",
        "S3.Secret-Access-Key",
    ],
)
def test_secret_looking_io_properties_are_refused_without_quoting_the_value(key: str) -> None:
    assert is_secret_key(key)
    with pytest.raises(BadRequest) as refused:
        Storage.from_json({"root": "s3://b/wh", "io-properties": {key: SECRET}})
    assert "looks like a secret" in refused.value.message
    assert key in refused.value.message and SECRET not in refused.value.message


def test_plain_io_properties_are_not_secret() -> None:
    for key in ("s3.endpoint", "s3.region", "s3.force-virtual-addressing", "s3.role-arn"):
        assert not is_secret_key(key), key
    assert not is_secret_key("s3.role-session-name")


def test_the_seed_keeps_secret_keys_of_the_node_setting_out_of_the_record() -> None:
    storage = seeded("file:///srv/wh/default/c", {"s3.endpoint": "e", **KEYS}, Credentials(env="X"))
    assert storage.io_properties == {"s3.endpoint": "e"}
    assert SECRET not in json.dumps(storage.to_properties())


# --- resolving a reference on a node ------------------------------------------------------


def test_an_environment_variable_resolves_to_its_secrets() -> None:
    sources = CredentialSources({ENV: json.dumps(KEYS)})
    assert Credentials(env=ENV).resolve(sources) == KEYS


def test_the_node_setting_reference_takes_its_secret_keys_only() -> None:
    node_io = json.dumps({"s3.endpoint": "http://x", **KEYS})
    sources = CredentialSources({"METASTORE_WAREHOUSE_IO": node_io})
    assert Credentials(env="METASTORE_WAREHOUSE_IO").resolve(sources) == KEYS


def test_a_file_inside_the_credentials_dir_resolves(tmp_path: Path) -> None:
    (tmp_path / "minio.json").write_text(json.dumps(KEYS))
    sources = CredentialSources({}, str(tmp_path))
    assert Credentials(file=str(tmp_path / "minio.json")).resolve(sources) == KEYS


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "cannot be read here"),
        (f"not json {SECRET}", "does not hold a JSON object of strings"),
        (json.dumps([SECRET]), "does not hold a JSON object of strings"),
        (json.dumps({"s3.secret-access-key": 1}), "does not hold a JSON object of strings"),
        (json.dumps({**KEYS, "s3.endpoint": "http://evil"}), "'s3.endpoint' is not a secret"),
        (json.dumps({"py-io-impl": SECRET}), "not an S3 FileIO property"),
    ],
)
def test_unusable_credentials_are_unavailable_never_quoted(
    tmp_path: Path, content: str | None, problem: str
) -> None:
    path = tmp_path / "credentials.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(StorageUnavailable) as unavailable:
        Credentials(file=str(path)).resolve(CredentialSources({}, str(tmp_path)))
    message = unavailable.value.message
    assert problem in message and str(path) in message, message
    assert SECRET not in message
    assert unavailable.value.status == 503


def test_a_missing_variable_or_a_file_outside_the_dir_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(StorageUnavailable, match=f"{ENV} is not set on this node"):
        Credentials(env=ENV).resolve(CredentialSources({}))
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps(KEYS))
    inside = tmp_path / "dir"
    inside.mkdir()
    (inside / "link.json").symlink_to(outside)  # a link out of the directory counts as out
    for path in (outside, inside / "link.json"):
        with pytest.raises(StorageUnavailable, match="outside this node's credentials directory"):
            Credentials(file=str(path)).resolve(CredentialSources({}, str(inside)))
    with pytest.raises(StorageUnavailable, match="outside"):
        Credentials(file=str(outside)).resolve(CredentialSources({}, ""))
