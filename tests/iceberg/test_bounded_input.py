"""Client-written files the node reads whole, each within the bound (``bounded_input``):
a real manifest list of a PyIceberg table (``SqlCatalog`` in a temporary directory),
and metadata files read back for an idempotent retry."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from metastore.errors import BadRequest
from metastore.iceberg.bounded_input import read_bounded
from metastore.iceberg.files import TableFiles
from metastore.iceberg.manifest_lists import ManifestLists

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))
SETTING = "METASTORE_MAX_METADATA_FILE_BYTES"


def test_a_file_of_exactly_the_bound_is_read_and_one_byte_more_is_refused(
    tmp_path: Path,
) -> None:
    path = tmp_path / "f.json"
    path.write_bytes(b"a" * 1000)
    assert read_bounded(PyArrowFileIO(), path.as_uri(), 1000, "metadata file") == b"a" * 1000
    with pytest.raises(BadRequest, match=f"is larger than 999 bytes \\({SETTING}\\)"):
        read_bounded(PyArrowFileIO(), path.as_uri(), 999, "metadata file")


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "f.json"
    os.mkfifo(fifo)
    with pytest.raises(BadRequest, match="is not a regular file"):
        read_bounded(PyArrowFileIO(), fifo.as_uri(), 1000, "metadata file")


def test_a_manifest_list_is_read_within_the_bound_only(tmp_path: Path) -> None:
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=tmp_path.as_uri())
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", SCHEMA)
    table.append(pa.table({"id": pa.array([1, 2], pa.int64())}))
    snapshot = table.current_snapshot()
    assert snapshot is not None
    location = snapshot.manifest_list
    size = len(table.io.new_input(location))

    manifests = ManifestLists(read_limit=size).read(table.io, location)
    assert [m.added_snapshot_id for m in manifests] == [snapshot.snapshot_id]
    with pytest.raises(BadRequest, match=f"manifest list .* is larger than {size - 1:,} bytes"):
        ManifestLists(read_limit=size - 1).read(table.io, location)


def test_a_metadata_file_read_back_for_a_retry_is_bounded(tmp_path: Path) -> None:
    path = tmp_path / "00001-a.metadata.json"
    path.write_bytes(b"{" + b" " * 5000 + b"}")
    assert TableFiles(dict, read_limit=5002).read_bytes(path.as_uri()).startswith(b"{")
    with pytest.raises(BadRequest, match="is larger than 5,001 bytes"):
        TableFiles(dict, read_limit=5001).read_bytes(path.as_uri())
