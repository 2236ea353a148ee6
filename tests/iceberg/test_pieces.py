"""Iceberg metadata as pieces: exact round trip, and a commit's writes independent of history."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.types import LongType, NestedField

from metastore.engine.objects import MissingObject
from metastore.iceberg import pieces
from metastore.model.codec import default_codec

CODEC = default_codec()


class Store:
    """Written pieces by id, decoded the way the service decodes them."""

    def __init__(self) -> None:
        self.data: dict[int, bytes] = {}

    def keep(self, split: pieces.Split) -> pieces.Split:
        for obj in split.objects:
            self.data[obj.id] = obj.data
        return split

    def load(self, obj_id: int) -> Any:
        return pieces.decode_piece(CODEC, self.data[obj_id])


def _metadata(snapshots: int) -> dict[str, Any]:
    schema = Schema(NestedField(1, "id", LongType(), required=False))
    base = new_table_metadata(
        schema, UNPARTITIONED_PARTITION_SPEC, UNSORTED_SORT_ORDER, "file:///w/t"
    )
    metadata: dict[str, Any] = base.model_dump(mode="json", by_alias=True, exclude_none=True)
    for i in range(1, snapshots + 1):
        _append(metadata, i)
    return metadata


def _append(metadata: dict[str, Any], i: int) -> None:
    snapshot = {
        "snapshot-id": i,
        "sequence-number": i,
        "timestamp-ms": 1_700_000_000_000 + i,
        "manifest-list": f"file:///w/t/metadata/snap-{i}.avro",
        "summary": {"operation": "append", "added-records": "1"},
        "schema-id": 0,
    }
    if i > 1:
        snapshot["parent-snapshot-id"] = i - 1
    metadata["snapshots"] = [*metadata["snapshots"], snapshot]
    metadata["snapshot-log"] = [*metadata["snapshot-log"], {"snapshot-id": i, "timestamp-ms": i}]
    metadata["current-snapshot-id"] = i
    metadata["refs"] = {"main": {"snapshot-id": i, "type": "branch"}}


def _split(store: Store, metadata: dict[str, Any], old: tuple[Any, Any] | None) -> pieces.Split:
    attachments, old_metadata = old if old is not None else ({}, None)
    return store.keep(
        pieces.split(
            CODEC, pieces.TABLE_LAYOUT, metadata, "loc", attachments, old_metadata, store.load
        )
    )


@pytest.mark.parametrize("snapshots", [0, 1, 31, 32, 33, 100])
def test_round_trip(snapshots: int) -> None:
    store = Store()
    metadata = _metadata(snapshots)
    split = _split(store, metadata, None)
    properties = metadata["properties"]
    assembled, location = pieces.assemble(
        pieces.TABLE_LAYOUT, split.attachments, properties, store.load
    )
    assert assembled == metadata and location == "loc"
    assert "schema/0" in split.attachments and "spec/0" in split.attachments


@pytest.mark.parametrize("history", [10, 1000])
def test_an_append_writes_the_same_few_objects_whatever_the_history(history: int) -> None:
    store = Store()
    metadata = _metadata(history)
    first = _split(store, metadata, None)
    new = {**metadata}
    _append(new, history + 1)
    split = _split(store, new, (first.attachments, metadata))
    kinds = sorted(
        pieces.decode_piece(CODEC, o.data) is not None and _kind(o.data) for o in split.objects
    )
    # the core, the head page of snapshots and of snapshot-log; at most one page frozen each
    assert len(split.objects) <= 5, kinds
    assert sum(len(o.data) for o in split.objects) < 20_000
    assert split.attachments["schema/0"] == first.attachments["schema/0"]
    assembled, _ = pieces.assemble(
        pieces.TABLE_LAYOUT, split.attachments, new["properties"], store.load
    )
    assert assembled == new


def test_removing_snapshots_rewrites_the_log() -> None:
    store = Store()
    metadata = _metadata(70)
    first = _split(store, metadata, None)
    expired = {**metadata, "snapshots": metadata["snapshots"][40:]}
    split = _split(store, expired, (first.attachments, metadata))
    assembled, _ = pieces.assemble(pieces.TABLE_LAYOUT, split.attachments, {}, store.load)
    assert [s["snapshot-id"] for s in assembled["snapshots"]] == list(range(41, 71))


def test_a_missing_piece_is_reported() -> None:
    store = Store()
    split = _split(store, _metadata(3), None)
    del store.data[split.attachments["snapshots"]]

    def load(obj_id: int) -> Any:
        if obj_id not in store.data:
            raise MissingObject(f"piece {obj_id} missing")
        return store.load(obj_id)

    with pytest.raises(MissingObject):
        pieces.assemble(pieces.TABLE_LAYOUT, split.attachments, {}, load)
    with pytest.raises(MissingObject):
        pieces.assemble(pieces.TABLE_LAYOUT, {}, {}, load)


def _kind(data: bytes) -> str:
    return str(CODEC.decode("metadata_piece", data)["kind"])


def test_an_unchanged_schema_keeps_its_piece_and_a_changed_one_is_written() -> None:
    store = Store()
    metadata = _metadata(2)
    first = _split(store, metadata, None)
    old = (first.attachments, metadata)
    same = _split(store, {**metadata, "last-updated-ms": 1}, old)
    assert same.attachments["schema/0"] == first.attachments["schema/0"]
    assert not [o for o in same.objects if o.id == first.attachments["schema/0"]]
    # the same schema id with other contents: never the old piece
    schema = {
        **metadata["schemas"][0],
        "fields": [{"id": 1, "name": "other", "type": "long", "required": False}],
    }
    changed = _split(store, {**metadata, "schemas": [schema]}, old)
    assert changed.attachments["schema/0"] != first.attachments["schema/0"]
    assert changed.attachments["schema/0"] in {o.id for o in changed.objects}
    assembled, _ = pieces.assemble(pieces.TABLE_LAYOUT, changed.attachments, {}, store.load)
    assert assembled["schemas"] == [schema]


def _log_entry(i: int) -> dict[str, Any]:
    return {"metadata-file": f"file:///w/t/metadata/{i:05d}.metadata.json", "timestamp-ms": i}


def test_a_bounded_log_that_slides_writes_its_head_page_only() -> None:
    """The metadata log of a table past its previous-versions-max: each commit drops the
    oldest entry and adds one, yet writes one page and the core (not the whole chain)
    until a page's worth is skipped, and reads back exactly the log."""
    store = Store()
    metadata = {**_metadata(0), "metadata-log": [_log_entry(i) for i in range(100)]}
    split = _split(store, metadata, None)
    rewrites = 0
    for n in range(100, 200):
        new = {**metadata, "metadata-log": [*metadata["metadata-log"][1:], _log_entry(n)]}
        split = _split(store, new, (split.attachments, metadata))
        assembled, _ = pieces.assemble(pieces.TABLE_LAYOUT, split.attachments, {}, store.load)
        assert assembled == new
        rewrites += len(split.objects) > 3
        metadata = new
    assert rewrites <= 100 // pieces.PAGE_ITEMS + 1  # the chain, rewritten once a page is skipped


# a log's next value: keep a slice of the old one (dropping from the front, the back or
# both, as expiry and bounded logs do), then append new entries
_STEPS = st.lists(
    st.tuples(st.integers(0, 40), st.integers(0, 3), st.integers(0, 40)), min_size=1, max_size=12
)


@settings(max_examples=100, deadline=None)
@given(start=st.integers(0, 80), steps=_STEPS)
def test_every_log_history_reads_back_exactly(
    start: int, steps: list[tuple[int, int, int]]
) -> None:
    store = Store()
    counter = start
    metadata = {**_metadata(0), "metadata-log": [_log_entry(i) for i in range(start)]}
    split = _split(store, metadata, None)
    for drop_front, drop_back, added in steps:
        log = metadata["metadata-log"]
        kept = log[drop_front : max(drop_front, len(log) - drop_back)]
        new_entries = [_log_entry(counter + i) for i in range(added)]
        counter += added
        new = {**metadata, "metadata-log": [*kept, *new_entries]}
        split = _split(store, new, (split.attachments, metadata))
        assembled, _ = pieces.assemble(pieces.TABLE_LAYOUT, split.attachments, {}, store.load)
        assert assembled == new
        metadata = new
