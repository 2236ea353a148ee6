"""The change feed's paging and cursors on the real engine and memory backend."""

from __future__ import annotations

from typing import Any

import pytest

from metastore.engine.chains import Chains, stored_links
from metastore.engine.commits import CommitRequest, RefAction
from metastore.engine.events import Event
from metastore.engine.feed import (
    HEAD,
    CursorExpired,
    FeedPage,
    InvalidCursor,
    Position,
    after_event,
    decode_cursor,
    encode_cursor,
    read_page,
)
from metastore.engine.object_cache import ObjectCache
from metastore.engine.objects import CatalogObjects
from metastore.model.objtypes import COMMIT
from tests.builders import MAIN, FaultyPersistence, Node, create_catalog_ref, create_request, ns_key


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


class Reader:
    """``read_page`` over one node's store with one remembered chain (like a node's)."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.chains = Chains()
        self.walked = 0  # commits whose links were read

    def links(self, commit_id: int) -> tuple[int, int] | None:
        self.walked += 1
        return stored_links(self.node.persistence, self.node.codec, "t1", "c1")(commit_id)

    def page(
        self, after: Position | str | None, limit: int, shows: Any = None, **kwargs: Any
    ) -> FeedPage:
        objects = fresh_objects(self.node)
        return read_page(
            objects,
            head(self.node),
            after,
            limit,
            shows or everyone,
            self.chains,
            self.links,
            **kwargs,
        )


def read_all(node: Node, limit: int, after: Position | None = None) -> list[Event]:
    return read_with(Reader(node), limit, after)


def read_with(reader: Reader, limit: int, after: Position | None = None) -> list[Event]:
    events: list[Event] = []
    while True:
        page = reader.page(after, limit)
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
    reader = Reader(node)
    page = reader.page(HEAD, 10)
    assert page.events == [] and not page.more
    again = reader.page(page.next, 10)
    assert again.events == [] and again.next == page.next


def test_filtered_commits_still_advance_the_cursor_and_bound_the_page(node: Node) -> None:
    ids = build(node, 5)
    reader = Reader(node)
    page = reader.page(None, 10, lambda e: False, max_commits=3)
    assert page.events == [] and page.more and page.next.commit_id == ids[2]
    rest = reader.page(page.next, 10)
    assert [e.commit_id for e in rest.events][::2] == ids[3:]


def test_a_page_is_bounded_by_the_events_it_derives_not_only_by_commits(node: Node) -> None:
    """Commits of many changes a reader sees none of: the page stops once it derived
    ``max_events`` (shown or not), so its work is bounded whatever the commits hold, and
    the next page resumes exactly there."""
    ids = build(node, 5)  # two events each after the first
    reader = Reader(node)
    page = reader.page(None, 10, lambda e: False, max_events=3)
    assert page.events == [] and page.more and page.next.commit_id == ids[1]
    whole = read_all(node, 1000)
    events: list[Event] = []
    after: Position | None = None
    while True:
        page = reader.page(after, 1000, max_events=3)
        events += page.events
        after = page.next
        if not page.more:
            break
    assert events == whole


def test_a_cursor_past_the_retained_history_is_gone(
    node: Node, persistence: FaultyPersistence
) -> None:
    ids = build(node, 4)
    reader = Reader(node)
    first = read_with(reader, 1000)  # it remembers the whole chain
    # garbage collection removed the two oldest commits: the history starts at the third
    persistence.write([], None, [fresh_objects(node).key(COMMIT.name, i) for i in ids[:2]])
    for fresh in (False, True):  # with the chain it remembered, and afresh
        if fresh:
            reader = Reader(node)
        retained = read_with(reader, 1000)
        assert retained == [e for e in first if e.commit_id in ids[2:]]
        with pytest.raises(CursorExpired):
            reader.page(after_event(first[0]), 10)
        kept = next(e for e in first if e.commit_id == ids[2])
        page = reader.page(after_event(kept), 100)
        assert page.events == [e for e in first if e.commit_id in ids[2:]][1:]


def test_a_cursor_a_ref_reset_left_behind_is_invalid(node: Node) -> None:
    ids = build(node, 3)
    reader = Reader(node)
    events = read_with(reader, 1000)
    beyond = after_event(events[-1])  # in the last commit
    reset = CommitRequest(operation="reset", ref_action=RefAction.RESET, reset_to=ids[1])
    node.committer.commit(MAIN, reset)
    with pytest.raises(InvalidCursor):  # past HEAD now
        reader.page(beyond, 10)
    # a cluster node's view may just be behind the node that handed the cursor out
    page = reader.page(beyond, 10, lagging=True)
    assert page.events == [] and page.next == beyond and not page.more
    node.committer.commit(MAIN, create_request(ns_key("x")))
    node.committer.commit(MAIN, create_request(ns_key("y")))
    with pytest.raises(InvalidCursor):  # same sequence number, another commit
        reader.page(beyond, 10)
    # the remembered chain follows the fork: after the reset target come the new commits
    after_reset = read_with(reader, 1000, after_event(events[2]))
    assert [e.name for e in after_reset] == [("x",), ("y",)]


def test_a_reader_far_behind_walks_the_history_once(node: Node) -> None:
    build(node, 60)
    reader = Reader(node)
    first = reader.page(None, 2)  # from the start: one walk down the whole chain
    walked = reader.walked
    assert walked >= 60
    page, pages = first, 1
    while page.more:
        page = reader.page(page.next, 2)
        pages += 1
    assert pages > 30 and reader.walked == walked  # later pages walk nothing again
    node.committer.commit(MAIN, create_request(ns_key("new")))
    newer = reader.page(page.next, 10)
    assert [e.name for e in newer.events] == [("new",)]
    assert reader.walked - walked <= 2  # the new HEAD, joined to what it remembered


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
