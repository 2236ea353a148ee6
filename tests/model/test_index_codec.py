"""The index's direct Avro writer against the codec's: the same bytes, always.

``encode_index`` writes the ``Index`` record itself and ``encode_changed`` writes the
next commit's from its parent's, reusing the unchanged entries' bytes;
``Codec.encode_around`` writes a commit around those bytes. Each is held to the full
fastavro encoding of the same value (``encode_entries`` + ``Codec.encode``)
over random indexes, random edits of them and random commits, and a chain of commits
the engine writes decodes and re-encodes to the bytes it stored.
"""

from __future__ import annotations

import gc
import itertools
import random
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from metastore.engine.commits import CommitRequest, EngineLimits
from metastore.model.changes import CreateEntity, DeleteEntity
from metastore.model.codec import default_codec
from metastore.model.counts import Counts
from metastore.model.index import (
    Entry,
    IndexLimits,
    IndexUpdate,
    IndexValue,
    IndexView,
    StripeRef,
    encode_entries,
)
from metastore.model.index_codec import (
    INDEX_VERSION,
    EncodedIndex,
    RecentEncodings,
    encode_changed,
    encode_index,
    zigzag,
)
from metastore.model.keys import EntityKey
from metastore.model.objtypes import COMMIT
from metastore.model.records import Commit, CommitChange, stripe_encode
from metastore.persistence.memory import MemoryPersistence
from tests.builders import MAIN, create_catalog_ref, make_node, ns_key, table_key

CODEC = default_codec()

# Keys that share prefixes often (few letters, short), ids from 0 to snowflake-sized and
# past 2**63 - 1's varint width boundaries, a few object types, tombstones.
KEYS = st.binary(min_size=0, max_size=12).map(lambda b: bytes(97 + x % 4 for x in b))
IDS = st.one_of(st.integers(0, 200), st.integers(0, (1 << 63) - 1))
VALUES = st.one_of(st.none(), st.tuples(st.sampled_from(["entity", "piece", "ünïcode-type"]), IDS))
INDEXES = st.dictionaries(KEYS, VALUES, max_size=60).map(lambda d: sorted(d.items()))


def full(entries: list[Entry]) -> bytes:
    """The codec's encoding of the ``Index`` record, without the record header."""
    return CODEC.encode("index", encode_entries(entries))[3:]


@given(st.integers(-(1 << 63), (1 << 63) - 1))
def test_zigzag_is_avros_long(value: int) -> None:
    assert CODEC.encode("index", {"types": [], "entries": [
        {"shared": 0, "suffix": b"", "type": 0, "id": value}
    ]})[3:] == b"\x00\x02\x00\x00\x00" + zigzag(value) + b"\x00"  # fmt: skip


@given(INDEXES)
def test_an_index_encodes_to_the_codecs_bytes(entries: list[Entry]) -> None:
    assert encode_index(entries).data == full(entries)


# Changes as a commit makes them: new keys, new values and tombstones for old keys.
CHANGES = st.dictionaries(KEYS, VALUES, max_size=8)
ONE_TYPE = st.dictionaries(
    KEYS, st.one_of(st.none(), st.tuples(st.just("entity"), IDS)), max_size=60
).map(lambda d: sorted(d.items()))


@given(st.one_of(INDEXES, ONE_TYPE), CHANGES, st.data())
def test_an_index_encoded_from_its_parents_is_the_codecs_bytes(
    before: list[Entry], changes: dict[bytes, IndexValue | None], data: st.DataObject
) -> None:
    # mostly changes of the one type (the fast path), sometimes of others (encoded whole)
    if data.draw(st.booleans()):
        changes = {k: None if v is None else ("entity", v[1]) for k, v in changes.items()}
    merged = dict(before)
    merged.update(changes)
    after = sorted(merged.items())
    again = encode_changed(encode_index(before), changes)
    assert again.data == full(after)
    assert again.entries == tuple(after) and again.keys == tuple(k for k, _ in after)
    # and the generation after it, built on the spliced one
    undo = {k: dict(before).get(k) for k in changes}
    third = encode_changed(again, undo)
    merged.update(undo)
    assert third.data == full(sorted(merged.items()))


def test_unchanged_entries_keep_their_bytes() -> None:
    entries: list[Entry] = [(b"k%03d" % i, ("entity", 1000 + i)) for i in range(100)]
    first = encode_index(entries)
    second = encode_changed(first, {b"k050x": ("entity", 7), b"k010": None})
    reused = [
        key
        for key, part in zip(first.keys, first.parts, strict=True)
        if second.parts[second.keys.index(key)] is part
    ]
    assert len(reused) == 98  # all but the tombstoned entry and the one after the new key
    assert second.data == full(second.entries)


@given(INDEXES)
def test_a_stripe_encodes_to_the_codecs_bytes(entries: list[Entry]) -> None:
    live = [(k, v) for k, v in entries if v is not None]
    assert stripe_encode(CODEC, live) == CODEC.encode("index", encode_entries(live))
    assert stripe_encode(CODEC, live, encode_index(live).data) == stripe_encode(CODEC, live)


def full_commit(commit: Commit) -> bytes:
    """The commit as one fastavro record (every field written by the codec)."""
    record: dict[str, Any] = {
        "parent": commit.parent,
        "seq": commit.seq,
        "created_at_us": commit.created_at_us,
        "principal": commit.principal,
        "operation": commit.operation,
        "changes": [{"key": c.key, "action": c.action} for c in commit.changes],
        "index": encode_entries(commit.index),
        "stripes": [{"first": s.first, "last": s.last, "id": s.id} for s in commit.stripes],
        "counts": commit.counts.to_record() if commit.counts is not None else None,
    }
    return CODEC.encode("commit", record)


COMMITS = st.builds(
    Commit,
    id=IDS,
    parent=IDS,
    seq=st.integers(1, 1 << 40),
    created_at_us=st.integers(0, 1 << 60),
    principal=st.text(max_size=20),
    operation=st.text(max_size=20),
    changes=st.lists(
        st.builds(CommitChange, KEYS, st.sampled_from(["CREATE", "UPDATE", "DELETE"])),
        max_size=5,
    ).map(tuple),
    index=INDEXES.map(tuple),
    stripes=st.just(()),
    index_size=st.just(0),
    counts=st.one_of(
        st.none(), st.builds(Counts, st.integers(0, 99), st.integers(0, 99), st.integers(0, 99))
    ),
)


@given(COMMITS)
def test_a_commit_encodes_to_the_codecs_bytes_and_back(commit: Commit) -> None:
    data = commit.encode(CODEC)
    assert data == full_commit(commit)
    assert commit.encode(CODEC, encode_index(commit.index).data) == data
    decoded = Commit.decode(CODEC, commit.id, data)
    assert (decoded.index, decoded.changes, decoded.counts) == (
        commit.index,
        commit.changes,
        commit.counts,
    )


def test_a_commit_written_by_the_previous_version_still_decodes() -> None:
    record = {
        "parent": 1,
        "seq": 2,
        "created_at_us": 3,
        "principal": "p",
        "operation": "o",
        "changes": [],
        "index": encode_entries([(b"a", ("entity", 5))]),
        "stripes": [],
    }
    old = CODEC.encode_with("commit", 1, record)
    commit = Commit.decode(CODEC, 9, old)
    assert commit.index == ((b"a", ("entity", 5)),) and commit.counts is None
    assert commit.index_size >= len(encode_index(commit.index).data)


def test_a_body_for_another_schema_version_is_refused() -> None:
    with pytest.raises(ValueError, match="current is v"):
        CODEC.frame("index", INDEX_VERSION + 1, b"\x00\x00")


def test_recent_encodings_keep_only_the_newest() -> None:
    recent = RecentEncodings(capacity=2)
    empty = encode_index([])
    for commit_id in (1, 2, 3):
        recent.put(commit_id, empty)
    assert recent.get(1) is None and recent.get(2) is empty and recent.get(3) is empty


def test_the_engines_stored_commits_and_stripes_are_the_codecs_bytes() -> None:
    """A chain of commits through spills: every stored commit and stripe is what the full
    encoder writes for its decoded value."""
    persistence = MemoryPersistence()
    node = make_node(persistence, limits=EngineLimits(index=IndexLimits(512, 2048)))
    create_catalog_ref(node.committer)
    node.committer.commit(MAIN, _create(ns_key("n")))
    for i in range(120):
        # names spread over the key space, so spills touch several stripes
        batch = [_create(table_key(("n",), f"t{(i * 37 + j) % 97}_{i}_{j}")) for j in range(3)]
        node.committer.commit_batch(MAIN, batch)
    head = persistence.get_ref(MAIN)
    assert head is not None
    objects = node.objects()
    seen_stripes: set[int] = set()
    commit_id = head.head
    while commit_id:
        (stored,) = persistence.get_objects([objects.key(COMMIT.name, commit_id)])
        assert stored is not None
        commit = Commit.decode(CODEC, commit_id, stored.data)
        assert stored.data == full_commit(commit)
        for stripe in commit.stripes:
            if stripe.id not in seen_stripes:
                seen_stripes.add(stripe.id)
                (raw,) = persistence.get_objects([objects.key("index", stripe.id)])
                assert raw is not None
                entries = list(objects.stripe(stripe.id))
                assert raw.data == CODEC.encode("index", encode_entries(entries))
        commit_id = commit.parent
    assert len(seen_stripes) > 3  # the chain did spill, more than once


def _create(key: EntityKey) -> CommitRequest:
    return CommitRequest(changes=(CreateEntity(key),), operation="create")


EDITS = st.lists(
    st.dictionaries(KEYS, st.one_of(st.none(), st.tuples(st.just("entity"), IDS)), max_size=12),
    min_size=1,
    max_size=25,
)


Chain = list[tuple[list[StripeRef], Mapping[int, bytes], bytes]]


def _spill_chains(rounds: list[dict[bytes, IndexValue | None]]) -> tuple[Chain, Chain, list[bool]]:
    """The same edits built twice: spilling from the stripes' known encodings (as the
    engine does), and loading and encoding every touched stripe whole; and, for the
    first, whether each stripe asked for was known."""
    limits = IndexLimits(96, 256)
    known: dict[int, EncodedIndex] = {}
    hits: list[bool] = []

    def known_encoding(stripe_id: int) -> EncodedIndex | None:
        hits.append(stripe_id in known)
        return known.get(stripe_id)

    chains: list[Chain] = []
    for reuse in (True, False):
        stored: dict[int, list[Entry]] = {}
        ids = itertools.count(1)
        view: IndexView | None = None
        chain: Chain = []
        for changes in rounds:
            update = IndexUpdate(view, stored.__getitem__)
            for key, value in changes.items():
                if value is None:
                    update.remove(key)
                else:
                    update.put(key, value)
            built = update.build(
                limits, ids.__next__, None, known_encoding if reuse else lambda _: None
            )
            for stripe_id, entries in built.new_stripes:
                stored[stripe_id] = entries
                assert built.stripe_data[stripe_id] == full(entries)
            if reuse:
                known.update(built.stripe_encodings)
            chain.append((built.stripes, built.stripe_data, built.encoded.data))
            view = IndexView(built.embedded, built.stripes, stored.__getitem__)
        chains.append(chain)
    return chains[0], chains[1], hits


@given(EDITS)
def test_a_spill_from_known_stripe_encodings_writes_the_same_stripes(
    rounds: list[dict[bytes, IndexValue | None]],
) -> None:
    """Every stripe the codec's bytes, and the same stripes either way."""
    reused, whole, hits = _spill_chains(rounds)
    assert reused == whole
    assert all(hits)  # every stripe a spill touched is one this chain wrote: known


def test_spills_into_existing_stripes_reuse_their_encodings() -> None:
    rng = random.Random(7)
    rounds: list[dict[bytes, IndexValue | None]] = [
        {f"k{rng.randrange(400):03d}".encode(): ("entity", rng.randrange(10**6)) for _ in range(8)}
        for _ in range(40)
    ]
    for edit in rounds[20::5]:  # some deletions too (those stripes are encoded whole)
        edit[b"k100"] = None
    reused, whole, hits = _spill_chains(rounds)
    assert reused == whole
    assert len(hits) > 10 and all(hits)


def test_the_engines_spills_with_deletions_keep_every_live_key() -> None:
    """Creates and deletes spread over the key space through many spills: the engine's
    stripes are the codec's bytes and the index holds exactly the live keys."""
    persistence = MemoryPersistence()
    node = make_node(persistence, limits=EngineLimits(index=IndexLimits(512, 2048)))
    create_catalog_ref(node.committer)
    node.committer.commit(MAIN, _create(ns_key("n")))
    live: set[str] = set()
    for i in range(150):
        names = [f"t{(i * 37 + j) % 97}_{i}_{j}" for j in range(3)]
        requests = [_create(table_key(("n",), name)) for name in names]
        if i % 4 == 3:  # now and then drop two tables created earlier
            gone = sorted(live)[i % 7 :: 11][:2]
            requests += [_delete(table_key(("n",), name)) for name in gone]
            live.difference_update(gone)
        live.update(names)
        node.committer.commit_batch(MAIN, requests)
    objects = node.objects()
    head = objects.commit(persistence.get_ref(MAIN).head)  # type: ignore[union-attr]
    index = objects.index(head)
    assert index is not None
    tables = {key for key, _ in index.items(table_key(("n",), "").encode()[:-1])}
    assert {EntityKey.decode(key).name for key in tables} == live
    for stripe in head.stripes:
        (raw,) = persistence.get_objects([objects.key("index", stripe.id)])
        assert raw is not None
        assert raw.data == CODEC.encode("index", encode_entries(list(objects.stripe(stripe.id))))


def _delete(key: EntityKey) -> CommitRequest:
    return CommitRequest(changes=(DeleteEntity(key),), operation="delete")


def test_the_collector_stops_walking_an_encoding_after_looking_at_it_once() -> None:
    """An encoding's keys and parts are thousands of references kept for the next
    commits (``RecentEncodings``): tuples of bytes, which the cyclic collector stops
    tracking at its first look, where a list would be walked in every collection. Its
    entries follow once their values and then the entries themselves are untracked."""
    entries = [(f"k{i:05d}".encode(), ("entity", i)) for i in range(2000)]
    whole = encode_index(entries)
    changed = encode_changed(whole, {b"k00001x": ("entity", 9), b"k00002": None})
    gc.collect()
    for encoded in (whole, changed):
        assert not gc.is_tracked(encoded.keys) and not gc.is_tracked(encoded.parts)
    gc.collect()  # an entry's value tuple first, then the entry, then their tuple
    gc.collect()
    for encoded in (whole, changed):
        assert not gc.is_tracked(encoded.entries)
