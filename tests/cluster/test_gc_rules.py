"""The view's pure rules for GC tombstones, as the partition owner writes them."""

from __future__ import annotations

from metastore.cluster.changelog_records import RecordCodec
from metastore.model.codec import default_codec
from metastore.persistence.rocksdb_layout import object_key
from tests.cluster.view_log import DictView, Log


def test_an_owner_tombstone_deletes_and_a_later_write_stores_again() -> None:
    log, view = Log(), DictView()
    piece = log.obj(1, b"piece")
    written = log.objects(piece)
    tombstone = log.append(RecordCodec(default_codec(), "n1").object_tombstone(piece.key, 0))
    rewritten = log.objects(piece)

    first = view.apply(written)
    assert first.applied == 1 and view.get(object_key(piece.key)) is not None

    gone = view.apply([tombstone])
    assert (gone.applied, gone.dropped) == (1, 0)
    assert view.get(object_key(piece.key)) is None

    again = view.apply(rewritten)  # a commit referencing it again writes it again
    assert (again.applied, again.dropped) == (1, 0)
    assert view.get(object_key(piece.key)) is not None


def test_a_tombstone_then_the_object_in_one_call_leaves_it_stored() -> None:
    """Deletions go ahead of a write's objects in the log: one that deletes and writes
    the same key keeps it, as in every persistence backend."""
    log, view = Log(), DictView()
    piece = log.obj(1, b"piece")
    view.apply(log.objects(piece))
    tombstone = log.append(RecordCodec(default_codec(), "n1").object_tombstone(piece.key, 0))
    view.apply([tombstone, *log.objects(piece)])
    assert view.get(object_key(piece.key)) is not None
