"""A commit's parent and sequence number read without decoding it (history walks)."""

from __future__ import annotations

import pytest

from metastore.model.codec import CorruptRecord, default_codec
from metastore.model.records import Commit

PARENT = 250452023177121794


def commit_bytes(version: int, parent: int, seq: int) -> bytes:
    codec = default_codec()
    commit = Commit(PARENT + 1, parent, seq, 1, "p", "o", (), (), (), 0)
    record = codec.decode("commit", commit.encode(codec))
    if version == 1:
        del record["counts"]
    return codec.encode_with("commit", version, record)


@pytest.mark.parametrize("version", [1, 2])
def test_links_equal_the_full_decode_for_every_commit_version(version: int) -> None:
    codec = default_codec()
    data = commit_bytes(version, PARENT, 4)
    full = Commit.decode(codec, 7, data)
    assert Commit.links(codec, data) == (full.parent, full.seq) == (PARENT, 4)
    assert Commit.links(codec, commit_bytes(version, 0, 1)) == (0, 1)


def test_links_refuse_what_is_not_a_commit() -> None:
    codec = default_codec()
    data = commit_bytes(2, PARENT, 4)
    for bad in (data[:3], b"\x02" + data[1:], data[:3] + b"\xff" * 12, b""):
        with pytest.raises(CorruptRecord):
            Commit.links(codec, bad)
    with pytest.raises(CorruptRecord):  # a record whose schema does not start with them
        codec.leading_longs("entity", data, ("parent",))
