"""Avro codec: round trips, header, schema evolution, unreadable records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from metastore.errors import MetastoreError
from metastore.model.codec import FORMAT, HEADER_LEN, Codec, CorruptRecord, default_codec
from metastore.model.keys import EntityKey, Kind

INDEX = {
    "types": ["entity", "commit"],
    "entries": [
        {"shared": 0, "suffix": EntityKey.namespace_key(("a",)).encode(), "type": 0, "id": 17},
        {"shared": 3, "suffix": b"\x00tt", "type": 0, "id": 2**62},
        {"shared": 1, "suffix": b"b", "type": -1, "id": 0},
    ],
}

ENTITY_V1 = {
    "entity_id": 1 << 40,
    "kind": "table",
    "path": ["a", "ünï", "orders"],
    "properties": {"owner": "alice", "comment": "日本"},
    "location": "s3://bucket/a/orders",
    "version": 3,
    "created_at_us": 1_767_225_600_000_000,
    "updated_at_us": 1_767_225_600_000_001,
}

SAMPLES: dict[str, dict[str, Any]] = {
    "commit": {
        "parent": 0,
        "seq": 1,
        "created_at_us": 1_767_225_600_000_000,
        "principal": "alice",
        "operation": "create-table",
        "changes": [
            {"key": EntityKey(Kind.TABLE, ("a",), "t").encode(), "action": "CREATE"},
            {"key": b"\x00na", "action": "UPDATE"},
            {"key": b"\x00nb", "action": "DELETE"},
        ],
        "index": INDEX,
        "stripes": [{"first": b"\x00na", "last": b"z\x00tz", "id": 123_456_789}],
        "counts": {"namespaces": 2, "tables": 1, "views": 0},
    },
    "entity": {**ENTITY_V1, "location": None, "attachments": {"schema": 42, "snapshots": 43}},
    "index": INDEX,
    "metadata_piece": {"kind": "schema", "json": '{"type": "struct", "fields": []}'},
    "node_lease": {"node_id": 1023, "holder": "host-1:4242", "leased_until_us": 2**62},
    "ref": {"head": 99, "created_at_us": 5, "recent": [98, 97, 96]},
    "task_table": {
        "tasks": [
            {
                "job": "gc",
                "scope": "t/c",
                "run": "r1",
                "holder": "root",
                "leased_until_us": 2**62,
                "status": "running",
                "progress": '{"phase": "mark"}',
                "summary": "{}",
                "started_at_us": 5,
                "updated_at_us": 6,
            }
        ]
    },
    "changelog_object": {
        "created_at_us": 5,
        "data": b"\x01\x00\x01xyz",
        "token": "t2",
        "expected_token": "t1",
        "epoch": 77,
    },
    "changelog_ref": {
        "expected_head": 98,
        "deleted": False,
        "head": 99,
        "created_at_us": 5,
        "recent": [98, 97],
        "epoch": 1234,
        "objects_offset": 4321,
    },
    "barrier": {"node": "n1", "url": "http://127.0.0.1:1", "nonce": "ab12", "created_at_us": 5},
}


@pytest.fixture(scope="module")
def codec() -> Codec:
    return default_codec()


def test_shipped_schemas(codec: Codec) -> None:
    assert codec.names() == sorted(SAMPLES)
    assert {n: codec.version(n) for n in codec.names()} == {
        "commit": 2,
        "entity": 2,
        "index": 1,
        "metadata_piece": 1,
        "node_lease": 1,
        "ref": 1,
        "task_table": 1,
        "changelog_object": 1,
        "changelog_ref": 1,
        "barrier": 1,
    }
    assert default_codec() is codec


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_round_trip(codec: Codec, name: str) -> None:
    record = SAMPLES[name]
    data = codec.encode(name, record)
    assert data[0] == FORMAT == 0x01
    assert int.from_bytes(data[1:3], "big") == codec.version(name)
    assert codec.decode(name, data) == record


def test_header_carries_the_writer_version(codec: Codec) -> None:
    v1 = codec.encode_with("entity", 1, ENTITY_V1)
    v2 = codec.encode("entity", {**ENTITY_V1, "attachments": {}})
    assert HEADER_LEN == 3
    assert v1[:3] == b"\x01\x00\x01"
    assert v2[:3] == b"\x01\x00\x02"
    # v2 adds one empty map (a single zero byte) to the same body.
    assert v2[3:] == v1[3:] + b"\x00"


def test_entity_v1_record_decodes_with_current_schema(codec: Codec) -> None:
    data = codec.encode_with("entity", 1, ENTITY_V1)
    decoded = codec.decode("entity", data)
    assert decoded == {**ENTITY_V1, "attachments": {}}
    assert decoded["attachments"] == {}


def test_commit_v1_record_decodes_without_counts(codec: Codec) -> None:
    v1 = {k: v for k, v in SAMPLES["commit"].items() if k != "counts"}
    decoded = codec.decode("commit", codec.encode_with("commit", 1, v1))
    assert decoded == {**v1, "counts": None}  # written before counts were kept


def test_unknown_future_version_is_corrupt(codec: Codec) -> None:
    data = bytearray(codec.encode("ref", SAMPLES["ref"]))
    data[1:3] = (99).to_bytes(2, "big")
    with pytest.raises(CorruptRecord, match=r"ref: written with schema v99.*up to v1") as info:
        codec.decode("ref", bytes(data))
    assert isinstance(info.value, MetastoreError)


@pytest.mark.parametrize(
    "data",
    [b"", b"\x01", b"\x01\x00", b"\x00\x00\x01\x02", b"\x02\x00\x01\x02", b"{}"],
    ids=["empty", "one-byte", "two-bytes", "format-0", "format-2", "json"],
)
def test_bad_header_is_corrupt(codec: Codec, data: bytes) -> None:
    with pytest.raises(CorruptRecord, match="bad header"):
        codec.decode("ref", data)


def test_unknown_record_name_is_corrupt(codec: Codec) -> None:
    data = codec.encode("ref", SAMPLES["ref"])
    with pytest.raises(CorruptRecord, match="nope: written with schema v1"):
        codec.decode("nope", data)


# --- a codec over another directory -------------------------------------------------------


def _write(directory: Path, filename: str, schema: dict[str, Any]) -> None:
    (directory / filename).write_text(json.dumps(schema))


FOO_V1 = {
    "type": "record",
    "name": "Foo",
    "namespace": "test",
    "fields": [{"name": "a", "type": "string"}],
}
FOO_V2 = {
    **FOO_V1,
    "fields": [
        {"name": "a", "type": "string"},
        {"name": "b", "type": "int", "default": 7},
    ],
}


def test_codec_from_directory_resolves_old_versions(tmp_path: Path) -> None:
    _write(tmp_path, "foo.v1.avsc", FOO_V1)
    _write(tmp_path, "foo.v2.avsc", FOO_V2)
    codec = Codec(tmp_path)
    assert codec.names() == ["foo"]
    assert codec.version("foo") == 2

    old = codec.encode_with("foo", 1, {"a": "x"})
    assert old[:3] == b"\x01\x00\x01"
    assert codec.decode("foo", old) == {"a": "x", "b": 7}

    new = codec.encode("foo", {"a": "y", "b": 3})
    assert new[:3] == b"\x01\x00\x02"
    assert codec.decode("foo", new) == {"a": "y", "b": 3}


def test_codec_only_knowing_v1_refuses_v2_data(tmp_path: Path) -> None:
    """An old node during a rolling upgrade: told to upgrade, never handed garbage."""
    new_dir, old_dir = tmp_path / "new", tmp_path / "old"
    new_dir.mkdir()
    old_dir.mkdir()
    _write(new_dir, "foo.v1.avsc", FOO_V1)
    _write(new_dir, "foo.v2.avsc", FOO_V2)
    _write(old_dir, "foo.v1.avsc", FOO_V1)
    data = Codec(new_dir).encode("foo", {"a": "y", "b": 3})
    with pytest.raises(CorruptRecord, match=r"foo: written with schema v2.*up to v1"):
        Codec(old_dir).decode("foo", data)


def test_codec_resolves_references_across_files(tmp_path: Path) -> None:
    # "aaa" sorts first but references a type declared in "zzz": parsed on a later pass.
    _write(
        tmp_path,
        "aaa.v1.avsc",
        {
            "type": "record",
            "name": "Outer",
            "namespace": "t",
            "fields": [{"name": "z", "type": "t.Z"}],
        },
    )
    _write(
        tmp_path,
        "zzz.v1.avsc",
        {
            "type": "record",
            "name": "Z",
            "namespace": "t",
            "fields": [{"name": "n", "type": "long"}],
        },
    )
    codec = Codec(tmp_path)
    assert codec.decode("aaa", codec.encode("aaa", {"z": {"n": 5}})) == {"z": {"n": 5}}


def test_codec_rejects_unresolvable_reference(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "aaa.v1.avsc",
        {
            "type": "record",
            "name": "Outer",
            "namespace": "t",
            "fields": [{"name": "z", "type": "t.Missing"}],
        },
    )
    with pytest.raises(ValueError, match="unresolvable schema references"):
        Codec(tmp_path)


@pytest.mark.parametrize("filename", ["foo.avsc", "Foo.v1.avsc", "foo.v1.json.avsc", "foo.vx.avsc"])
def test_codec_rejects_unexpected_file_names(tmp_path: Path, filename: str) -> None:
    _write(tmp_path, filename, FOO_V1)
    with pytest.raises(ValueError, match="unexpected schema file name"):
        Codec(tmp_path)
