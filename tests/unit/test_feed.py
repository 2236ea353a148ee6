"""The change feed's paging and cursors on the real engine and memory backend."""

from __future__ import annotations

import pytest

from metastore.cache import ObjectCache
from metastore.commits import CommitRequest, RefAction
from metastore.events import Event
from metastore.feed import (
    HEAD,
    CursorExpired,
    InvalidCursor,
    Position,
    after_event,
    decode_cursor,
    encode_cursor,
    read_page,
)
from metastore.objtypes import COMMIT
from metastore.store import CatalogObjects

from .conftest import MAIN, FaultyPersistence, Node, create_catalog_ref, create_request, ns_key


def everyone(event: Event) -> bool:
    return True


def fresh_objects(node: Node) -> CatalogObjects:
    """A reader with an empty cache (so deleted objects are really gone)."""
    return CatalogObjects(node.persistence, node.codec, ObjectCache(), "t1", "c1")


def build(node: Node, commits: int) -> list[int]:
    ids = [create_catalog_ref(node.committer)]
    for i in range(commits):
        keys = (ns_key(f"a{i}"), ns_key(f"b{i}"))  # two events per commit
        ids.append(node.committer.commit(MAIN, create_request(*keys)).commit_id)
    return ids


def head(node: Node) -> int:
    ref = node.persistence.get_ref(MAIN)
    assert ref is not None
    return ref.head


def read_all(node: Node, limit: int, after: Position | None = None) -> list[Event]:
    events: list[Event] = []
    while True:
        page = read_page(fresh_objects(node), head(node), after, limit, everyone)
        events += page.events
        after = page.next
        if not page.more:
            return events


def test_every_page_size_reads_the_same_events_once_each(node: Node) -> None:
    ids = build(node, 4)
    whole = read_all(node, 1000)
    assert [e.commit_id for e in whole] == [ids[0], *[i for i in ids[1:] for _ in range(2)]]
    assert [e.index for e in whole] == [0, *[0, 1] * 4]
    for limit in (1, 2, 3, 5):
        assert read_all(node, limit) == whole
    for i, event in enumerate(whole):  # resume after any event: exactly the rest
        assert read_all(node, 3, after_event(event)) == whole[i + 1 :]


def test_head_and_an_idle_cursor(node: Node) -> None:
    build(node, 2)
    page = read_page(fresh_objects(node), head(node), HEAD, 10, everyone)
    assert page.events == [] and not page.more
    again = read_page(fresh_objects(node), head(node), page.next, 10, everyone)
    assert again.events == [] and again.next == page.next


def test_filtered_commits_still_advance_the_cursor_and_bound_the_page(node: Node) -> None:
    ids = build(node, 5)
    page = read_page(fresh_objects(node), head(node), None, 10, lambda e: False, max_commits=3)
    assert page.events == [] and page.more and page.next.commit_id == ids[2]
    rest = read_page(fresh_objects(node), head(node), page.next, 10, everyone)
    assert [e.commit_id for e in rest.events][::2] == ids[3:]


def test_a_cursor_past_the_retained_history_is_gone(
    node: Node, persistence: FaultyPersistence
) -> None:
    ids = build(node, 4)
    first = read_all(node, 1000)
    # garbage collection removed the two oldest commits: the history starts at the third
    persistence.write([], None, [fresh_objects(node).key(COMMIT.name, i) for i in ids[:2]])
    retained = read_all(node, 1000)
    assert retained == [e for e in first if e.commit_id in ids[2:]]
    with pytest.raises(CursorExpired):
        read_page(fresh_objects(node), head(node), after_event(first[0]), 10, everyone)
    kept = next(e for e in first if e.commit_id == ids[2])
    page = read_page(fresh_objects(node), head(node), after_event(kept), 100, everyone)
    assert page.events == [e for e in first if e.commit_id in ids[2:]][1:]


def test_a_cursor_a_ref_reset_left_behind_is_invalid(node: Node) -> None:
    ids = build(node, 3)
    events = read_all(node, 1000)
    beyond = after_event(events[-1])  # in the last commit
    reset = CommitRequest(operation="reset", ref_action=RefAction.RESET, reset_to=ids[1])
    node.committer.commit(MAIN, reset)
    with pytest.raises(InvalidCursor):  # past HEAD now
        read_page(fresh_objects(node), head(node), beyond, 10, everyone)
    # a cluster node's view may just be behind the node that handed the cursor out
    page = read_page(fresh_objects(node), head(node), beyond, 10, everyone, lagging=True)
    assert page.events == [] and page.next == beyond and not page.more
    node.committer.commit(MAIN, create_request(ns_key("x")))
    node.committer.commit(MAIN, create_request(ns_key("y")))
    with pytest.raises(InvalidCursor):  # same sequence number, another commit
        read_page(fresh_objects(node), head(node), beyond, 10, everyone)


def test_cursors_are_bound_to_their_catalog_and_checked() -> None:
    cursor = encode_cursor("t1", "c1", Position(12345, 3, 1))
    assert decode_cursor("t1", "c1", cursor) == Position(12345, 3, 1)
    for tenant, catalog, text in [
        ("t1", "c2", cursor),
        ("t2", "c1", cursor),
        ("t1", "c1", cursor[:-2]),
        ("t1", "c1", "%%%"),
        ("t1", "c1", encode_cursor("t1", "c1", Position(0, 3, 1))),
        ("t1", "c1", encode_cursor("t1", "c1", Position(1, 0, 1))),
        ("t1", "c1", encode_cursor("t1", "c1", Position(1, 1, -1))),
    ]:
        with pytest.raises(InvalidCursor):
            decode_cursor(tenant, catalog, text)
