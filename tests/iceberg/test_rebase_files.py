"""The files an append rebase reads and writes (``metastore.iceberg.rebase``,
``manifest_lists``, ``manifest_list_files``), on real PyIceberg tables of a
``SqlCatalog`` in a temporary directory: the stale appends are PyIceberg's own, and
the rebased commits are committed and scanned by PyIceberg.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from copy import copy
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.avro.codecs import AvroCompressionCodec
from pyiceberg.avro.file import AvroFile
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitStateUnknownException
from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    MANIFEST_LIST_FILE_SCHEMAS,
    UNASSIGNED_SEQ,
    ManifestFile,
    read_manifest_list,
    write_manifest_list,
)
from pyiceberg.schema import Schema
from pyiceberg.table import CommitTableResponse, Table
from pyiceberg.table.update import TableRequirement, TableUpdate
from pyiceberg.types import LongType, NestedField

from metastore.errors import BadRequest
from metastore.iceberg import manifest_list_files
from metastore.iceberg.manifest_lists import Listed, ManifestLists
from metastore.iceberg.rebase import is_append, rebased_commit, warm

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))
Commit = tuple[tuple[TableRequirement, ...], tuple[TableUpdate, ...]]


class HeldBack(SqlCatalog):
    """A ``SqlCatalog`` that keeps the commits its tables make and answers them with an
    unknown outcome (so PyIceberg keeps the files it wrote): what a client sent, for
    the test to rebase."""

    sent: list[Commit]

    def commit_table(
        self,
        table: Table,
        requirements: tuple[TableRequirement, ...],
        updates: tuple[TableUpdate, ...],
    ) -> CommitTableResponse:
        self.sent.append((requirements, updates))
        raise CommitStateUnknownException("held back")


def _rows(ids: Sequence[int]) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64())})


def _catalogs(tmp_path: Path, **properties: str) -> tuple[SqlCatalog, HeldBack]:
    settings = {"uri": f"sqlite:///{tmp_path / 'c.db'}", "warehouse": tmp_path.as_uri()}
    catalog = SqlCatalog("t", **settings)
    catalog.create_namespace("db")
    catalog.create_table("db.t", SCHEMA, properties=properties).append(_rows([1, 2]))
    held = HeldBack("t", **settings)
    held.sent = []
    return catalog, held


def _stale_append(held: HeldBack, stale: Table, ids: Sequence[int]) -> Commit:
    with pytest.raises(CommitStateUnknownException):
        stale.append(_rows(ids))
    return held.sent.pop()


def _read(io: FileIO, location: str) -> tuple[ManifestFile, ...]:
    return tuple(read_manifest_list(io.new_input(location)))


def _rebase_and_commit(
    catalog: SqlCatalog, sent: Commit, lists: ManifestLists
) -> tuple[str, Table]:
    """``sent`` rebased on the table's head and committed; the rebased list's location."""
    table = catalog.load_table("db.t")
    written: list[str] = []
    durable: list[tuple[str, bool]] = []  # each location handed over, and whether it was there

    def made_durable(location: str) -> None:
        durable.append((location, os.path.exists(location.removeprefix("file://"))))

    requirements, updates = rebased_commit(
        *sent, table.metadata, lambda _: table.io, written, lists, durable=made_durable
    )
    catalog.commit_table(table, requirements, updates)
    assert len(written) == 1
    assert durable == [(written[0], True)]  # handed over once written, before the commit
    return written[0], catalog.load_table("db.t")


@pytest.mark.parametrize("codec", ["gzip", "zstd", "null"])
def test_rebased_lists_read_back_as_kept(tmp_path: Path, codec: str) -> None:
    """Two stale appends rebased one after the other: each rebased list is kept as
    written (the second rebase builds on the first's without reading it), each reads
    back as kept, the own manifest first with the commit's sequence number, and
    PyIceberg scans every row once."""
    catalog, held = _catalogs(tmp_path, **{"write.avro.compression-codec": codec})
    first, second = held.load_table("db.t"), held.load_table("db.t")  # both at one head
    catalog.load_table("db.t").append(_rows([3, 4]))  # the branch moves on
    lists = ManifestLists()

    location, table = _rebase_and_commit(catalog, _stale_append(held, first, [5, 6]), lists)
    kept = lists.get(location)
    assert kept is not None and kept.encoded is not None  # kept as written, encoded
    assert kept.manifests == _read(table.io, location)
    head = table.current_snapshot()
    assert head is not None and head.manifest_list == location
    assert kept.manifests[0].sequence_number == head.sequence_number
    assert kept.manifests[0].added_snapshot_id == head.snapshot_id
    assert len(kept.manifests) == 3  # its own, then the two before it

    reads = len(lists)
    location, table = _rebase_and_commit(catalog, _stale_append(held, second, [7, 8]), lists)
    kept = lists.get(location)
    assert kept is not None and kept.manifests == _read(table.io, location)
    assert len(kept.manifests) == 4
    assert len(lists) == reads + 2  # its client's list and its own: the head's was kept
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert [s.sequence_number for s in table.metadata.snapshots] == [1, 2, 3, 4]


def test_encoded_list_matches_pyiceberg_writer(tmp_path: Path) -> None:
    """A version 2 list written from encoded records holds what pyiceberg's own
    ``write_manifest_list`` writes for the same manifests, under every codec."""
    catalog, _ = _catalogs(tmp_path)
    table = catalog.load_table("db.t")
    for n in range(3):
        table.append(_rows([10 + n]))
    snapshot = table.current_snapshot()
    assert snapshot is not None
    mine, *before = _read(table.io, snapshot.manifest_list)
    unassigned = copy(mine)
    unassigned.sequence_number = unassigned.min_sequence_number = UNASSIGNED_SEQ
    header: dict[str, Any] = {
        "snapshot_id": snapshot.snapshot_id,
        "parent_snapshot_id": snapshot.parent_snapshot_id,
        "sequence_number": 99,
    }
    codecs: tuple[AvroCompressionCodec, ...] = ("deflate", "zstandard", "null", "bzip2")
    for codec in codecs:
        ours, theirs = f"{tmp_path}/ours-{codec}.avro", f"{tmp_path}/theirs-{codec}.avro"
        written = manifest_list_files.write(
            table.io.new_output(ours),
            2,
            snapshot.snapshot_id,
            header["parent_snapshot_id"],
            99,
            codec,
            [unassigned],
            Listed(tuple(before)),
        )
        with write_manifest_list(
            format_version=2,
            output_file=table.io.new_output(theirs),
            avro_compression=codec,
            **header,
        ) as writer:
            writer.add_manifests([unassigned, *before])
        assert written is not None and written.manifests[0].sequence_number == 99
        assert _read(table.io, ours) == _read(table.io, theirs) == written.manifests
        assert _header(table.io, ours) == _header(table.io, theirs)


def _header(io: FileIO, location: str) -> dict[str, str]:
    """The Avro container's header entries (file schema, codec, snapshot ids...)."""
    with AvroFile[ManifestFile](io.new_input(location), MANIFEST_LIST_FILE_SCHEMAS[2]) as file:
        return file.header.meta


def test_version_1_lists_are_written_but_not_kept(tmp_path: Path) -> None:
    catalog, held = _catalogs(tmp_path, **{"format-version": "1"})
    stale = held.load_table("db.t")
    catalog.load_table("db.t").append(_rows([3]))
    lists = ManifestLists()
    location, table = _rebase_and_commit(catalog, _stale_append(held, stale, [4]), lists)
    assert lists.get(location) is None
    assert len(_read(table.io, location)) == 3
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3, 4]


def test_warm_reads_a_stale_appends_list_inside_the_table_only(tmp_path: Path) -> None:
    catalog, held = _catalogs(tmp_path)
    stale = held.load_table("db.t")
    sent = _stale_append(held, stale, [3])
    table = catalog.load_table("db.t")
    assert is_append(sent[1]) and not is_append(sent[1][:1])
    lists = ManifestLists()
    warm(sent[1], "file:///elsewhere", lambda _: table.io, lists)
    assert len(lists) == 0  # outside the table's location: never read
    warm(sent[1], table.metadata.location, lambda _: table.io, lists)
    assert len(lists) == 1
    warm(sent[1][:1], table.metadata.location, lambda _: table.io, lists)  # not an append
    assert len(lists) == 1


def test_lists_are_bounded_by_lists_and_by_manifests(tmp_path: Path) -> None:
    catalog, _ = _catalogs(tmp_path)
    table = catalog.load_table("db.t")
    snapshot = table.current_snapshot()
    assert snapshot is not None
    one = _read(table.io, snapshot.manifest_list)
    lists = ManifestLists(lists=3, manifests=4)
    for n in range(5):
        lists.put(f"l{n}", Listed(one * 2))  # 2 manifests each
    assert len(lists) == 2 and lists.held() == 4  # the manifests bound
    assert lists.get("l4") is not None and lists.get("l0") is None
    lists.put("big", Listed(one * 9))  # larger than the bound alone: kept alone
    assert len(lists) == 1 and lists.get("big") is not None
    with pytest.raises(BadRequest):
        lists.read(table.io, f"{tmp_path}/missing.avro")
