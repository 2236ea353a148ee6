"""A commit's stripe list written from its own bytes: the codec's bytes, and never stale.

The engine writes each commit's ``stripes`` field from bytes it keeps per recent commit
(``metastore.model.index.RecentStripeRefs``) instead of through the codec; the stored commit
must be byte for byte the codec's, and after every spill it must name the new stripes.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from metastore.engine.commits import EngineLimits
from metastore.model.codec import default_codec
from metastore.model.index import IndexLimits, StripeRef, encode_entries, encode_stripe_refs
from metastore.model.index_codec import encode_index
from metastore.model.objtypes import COMMIT
from metastore.model.records import Commit
from metastore.persistence.memory import MemoryPersistence
from tests.builders import (
    MAIN,
    create_catalog_ref,
    create_request,
    make_node,
    ns_key,
    table_key,
)

CODEC = default_codec()
STRIPES = st.lists(
    st.builds(
        StripeRef,
        st.binary(max_size=40),
        st.binary(max_size=40),
        st.one_of(st.integers(0, 200), st.integers(0, (1 << 63) - 1)),
    ),
    max_size=70,
).map(tuple)


def full_commit(commit: Commit) -> bytes:
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


@given(STRIPES)
def test_stripe_refs_encode_to_the_codecs_bytes(stripes: tuple[StripeRef, ...]) -> None:
    commit = Commit(1, 0, 1, 0, "p", "o", (), ((b"k", ("entity", 7)),), stripes, 0)
    index = encode_index(commit.index).data
    assert commit.encode(CODEC, index, encode_stripe_refs(stripes)) == full_commit(commit)
    assert Commit.decode(CODEC, 1, full_commit(commit)).stripes == stripes


def test_every_stored_commit_names_the_stripes_its_engine_built() -> None:
    """A chain through many spills: each stored commit, decoded from its bytes, has the
    stripes the engine built it with (the commit object it keeps), and the codec's bytes."""
    persistence = MemoryPersistence()
    node = make_node(persistence, limits=EngineLimits(index=IndexLimits(512, 2048)))
    create_catalog_ref(node.committer)
    node.committer.commit(MAIN, create_request(ns_key("n")))
    for i in range(80):
        batch = [
            create_request(table_key(("n",), f"t{(i * 37 + j) % 97}_{i}_{j}")) for j in range(3)
        ]
        node.committer.commit_batch(MAIN, batch)
    head = persistence.get_ref(MAIN)
    assert head is not None
    objects = node.objects()
    lists: set[tuple[StripeRef, ...]] = set()
    commit_id = head.head
    while commit_id:
        built = objects.commit(commit_id)  # the engine's own commit object (cached)
        (stored,) = persistence.get_objects([objects.key(COMMIT.name, commit_id)])
        assert stored is not None
        decoded = Commit.decode(CODEC, commit_id, stored.data)
        assert decoded.stripes == built.stripes
        assert stored.data == full_commit(decoded)
        lists.add(decoded.stripes)
        commit_id = decoded.parent
    assert len(lists) > 5  # the stripe list changed many times along the chain
