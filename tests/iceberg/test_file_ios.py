"""Shared FileIO instances, and the local metadata file writer."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO

from metastore.errors import StorageUnavailable
from metastore.iceberg.file_ios import FileIOs
from metastore.iceberg.files import TableFiles


def test_requests_with_the_same_properties_share_one_file_io() -> None:
    ios = FileIOs(limit=2)
    one = ios.get({"s3.access-key-id": "a"}, "s3://bucket/t")
    assert ios.get({"s3.access-key-id": "a"}, "s3://bucket/other") is one
    rotated = ios.get({"s3.access-key-id": "b"}, "s3://bucket/t")
    assert rotated is not one and rotated.properties == {"s3.access-key-id": "b"}
    assert isinstance(ios.get({}, "file:///tmp/x"), PyArrowFileIO)
    assert len(ios) == 2  # bounded: the oldest instance was let go
    assert ios.get({"s3.access-key-id": "a"}, "s3://bucket/t") is not one


@pytest.mark.parametrize("shared", [False, True])
def test_a_metadata_file_is_created_with_its_folders_and_never_over_another(
    tmp_path: Path, shared: bool
) -> None:
    files = TableFiles(dict, FileIOs() if shared else None)
    location = (tmp_path / "t" / "metadata" / "00000-a.metadata.json").as_uri()
    files.write_text('{"a":1}', location)
    assert files.read_bytes(location) == b'{"a":1}'
    with pytest.raises(StorageUnavailable, match="cannot write"):
        files.write_text('{"b":2}', location)
    assert files.read_bytes(location) == b'{"a":1}'  # the first file is untouched


def test_a_path_blocked_by_a_file_is_a_503_and_leaves_nothing(tmp_path: Path) -> None:
    (tmp_path / "t").write_text("not a folder")
    location = (tmp_path / "t" / "metadata" / "00000-a.metadata.json").as_uri()
    with pytest.raises(StorageUnavailable, match="cannot write"):
        TableFiles(dict).write_text("{}", location)
    assert (tmp_path / "t").read_text() == "not a folder"
