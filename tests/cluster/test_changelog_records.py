"""Changelog record encoding: what an owner produces is what a view decodes."""

from __future__ import annotations

import pytest

from metastore.cluster.changelog_records import RecordCodec, RefRecord, header, partition_for
from metastore.model.codec import default_codec
from metastore.model.keys import RefKey
from metastore.persistence.base import Ref

KEY = RefKey("acme", "sales", "main")


def test_a_ref_update_round_trips_with_its_cas_context() -> None:
    codec = RecordCodec(default_codec(), node="n1")
    record = RefRecord(KEY, 7, Ref(KEY, 9, 123, (7, 5)), epoch=42, objects_offset=1000)
    produced = codec.ref(record)
    assert produced.topic == "refs" and produced.value is not None
    assert codec.decode_ref(produced.key, produced.value) == record
    assert header(produced.headers, "n") == b"n1" and header(produced.headers, "e") == b"42"


@pytest.mark.parametrize("expected", [None, 9])
def test_a_ref_deletion_is_a_tombstone_carrying_its_cas_context_in_headers(
    expected: int | None,
) -> None:
    codec = RecordCodec(default_codec(), node="n1")
    record = RefRecord(KEY, expected, None, epoch=3, objects_offset=17)
    produced = codec.ref(record)
    assert produced.value is None  # compaction removes the key
    assert codec.decode_ref_tombstone(produced.key, produced.headers) == record


def test_a_tombstone_without_its_context_is_refused() -> None:
    codec = RecordCodec(default_codec(), node="n1")
    produced = codec.ref(RefRecord(KEY, None, None, epoch=3, objects_offset=17))
    with pytest.raises(ValueError, match="epoch or objects offset"):
        codec.decode_ref_tombstone(produced.key, [h for h in produced.headers if h[0] != "e"])


def test_partitions_are_stable_and_spread() -> None:
    # fixed values: a change here would move every catalog of a running cluster
    assert [partition_for("acme", f"c{i}", 12) for i in range(6)] == [3, 11, 8, 5, 1, 8]
    spread = {partition_for("acme", f"c{i}", 12) for i in range(200)}
    assert spread == set(range(12))
