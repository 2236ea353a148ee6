"""The change feed of a catalog: its history's events, oldest first, from a cursor.

A position in the feed is a commit and an index among that commit's events
(``metastore.engine.events``): "resume at event ``index`` of commit ``commit_id``", the
commit's sequence number alongside so a reader finds it by walking parent links back
from HEAD without reading further than the cursor. Every node holds the same
commits, so a cursor one node handed out resumes at exactly the same event on any
other: a client that reconnects elsewhere misses nothing and sees nothing twice.

Cursors are opaque to clients (base64 of a small JSON, bound to the tenant and
catalog by a fingerprint) and checked like page tokens: anything malformed, of
another catalog, or naming a commit that is not on this catalog's history (forged,
or left behind when a ref reset moved HEAD below it) is a 400. A cursor whose commit
lies beyond the retained history (garbage collection removed the commits up to
it) is a 410: the events in between are gone, and the client must start again.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass

from metastore.engine.chains import Chains, Links
from metastore.engine.events import Event, derive
from metastore.engine.objects import Objects
from metastore.engine.paging import decode_opaque, fingerprint
from metastore.errors import BadRequest, MetastoreError, NoSuchCommit
from metastore.model.records import Commit

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
MAX_COMMITS_SCANNED = 10_000  # per page: commits with nothing to show still end a page
# per page: the events derived, shown or not (a commit holds up to the change limit, so a
# page's work is bounded by events, not commits, whatever the reader may see)
MAX_EVENTS_SCANNED = 10_000
_VERSION = 1
_MAX_INDEX = 1 << 20  # far past the events one commit can hold (its change limit)
HEAD = "head"  # ``after=head``: only what comes after the current HEAD
MAX_CURSOR_CHARS = 256  # one the node hands out is at most 120
UNREADABLE_CURSOR = "invalid cursor: send back an event's id or a page's next cursor as is"


class InvalidCursor(BadRequest):
    """A cursor that is malformed, of another catalog, or not on this catalog's history."""


class CursorExpired(MetastoreError):
    """A cursor older than the retained history: the events after it were collected."""

    status = 410
    error_type = "GoneException"


@dataclass(frozen=True, slots=True)
class Position:
    """Resume at event ``index`` of commit ``commit_id`` (sequence number ``seq``)."""

    commit_id: int
    seq: int
    index: int


def after_event(event: Event) -> Position:
    """The position just after ``event``: its cursor."""
    return Position(event.commit_id, event.commit_seq, event.index + 1)


def encode_cursor(tenant: str, catalog: str, position: Position) -> str:
    payload = {
        "v": _VERSION,
        "f": _listing(tenant, catalog),
        "c": position.commit_id,
        "s": position.seq,
        "i": position.index,
    }
    raw = json.dumps(payload, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(tenant: str, catalog: str, text: str) -> Position:
    """The position ``text`` names; InvalidCursor in fixed words for one the node did not
    hand out for this feed (never a parser's text: ``paging.decode_opaque``)."""
    payload = decode_opaque(text) if len(text) <= MAX_CURSOR_CHARS else None
    if payload is None or payload.get("v") != _VERSION:
        raise InvalidCursor(UNREADABLE_CURSOR)
    if payload.get("f") != _listing(tenant, catalog):
        raise InvalidCursor("invalid cursor: it belongs to another catalog's feed")
    return Position(
        _bounded(payload.get("c"), 1, 1 << 64),
        _bounded(payload.get("s"), 1, 1 << 62),
        _bounded(payload.get("i"), 0, _MAX_INDEX),
    )


def _bounded(value: object, low: int, high: int) -> int:
    """A cursor's number: an int (not a bool) in ``[low, high)``."""
    if type(value) is not int or not low <= value < high:
        raise InvalidCursor(UNREADABLE_CURSOR)
    return value


def _listing(tenant: str, catalog: str) -> int:
    return fingerprint(tenant, catalog, "events")


def check_limit(value: int | None) -> int:
    if value is None:
        return DEFAULT_LIMIT
    if not 1 <= value <= MAX_LIMIT:
        raise BadRequest(f"limit must be between 1 and {MAX_LIMIT}, got {value}")
    return value


@dataclass(frozen=True, slots=True)
class FeedPage:
    events: list[Event]
    next: Position  # where to resume: past every commit this page read
    more: bool  # the page stopped before the catalog's HEAD


Shows = Callable[[Event], bool]


def read_page(
    objects: Objects,
    head_id: int,
    after: Position | str | None,
    limit: int,
    shows: Shows,
    chains: Chains,
    links: Links,
    max_commits: int = MAX_COMMITS_SCANNED,
    lagging: bool = False,
    max_events: int = MAX_EVENTS_SCANNED,
) -> FeedPage:
    """The events after ``after`` (None: from the oldest retained commit; ``HEAD``: from
    the current HEAD on) up to ``head_id``, at most ``limit`` that ``shows`` keeps, in
    commit order. Blocking reads: run it through ``Metastore.read``.

    The commits are found by sequence number in ``chains`` (walked with ``links``, only
    as far as this page needs), so a reader far behind pays for the walk once, not on
    every page. ``lagging``: this reader's history may be behind the one the cursor came
    from (a cluster node's view, milliseconds behind another node's): a cursor past HEAD
    is then not yet here, and the page is empty with ``next`` the cursor itself, so the
    client asks again (a stream waits). Otherwise (one embedded node) such a cursor was
    never handed out by this history, or a ref reset left it behind: a 400."""
    head = objects.commit(head_id)
    if after == HEAD:
        return FeedPage([], Position(head.id, head.seq, len(derive(objects, head))), False)
    assert not isinstance(after, str)
    if after is not None and after.seq > head.seq:
        if lagging:
            return FeedPage([], after, False)
        raise InvalidCursor("invalid cursor: it names a commit past this catalog's HEAD")
    try:
        return _page(objects, head, after, limit, shows, chains, links, max_commits, max_events)
    except NoSuchCommit:  # a commit it remembered was collected since: walk afresh
        chains.forget(objects.tenant, objects.catalog)
        return _page(objects, head, after, limit, shows, chains, links, max_commits, max_events)


def _page(
    objects: Objects,
    head: Commit,
    after: Position | None,
    limit: int,
    shows: Shows,
    chains: Chains,
    links: Links,
    max_commits: int,
    max_events: int,
) -> FeedPage:
    low = after.seq if after is not None else None
    stretch = chains.stretch(objects.tenant, objects.catalog, head.id, head.seq, low, links)
    if after is None:
        first_seq, start = stretch.base, 0
    elif after.seq < stretch.base:  # the walk ended above it: the history was collected
        raise CursorExpired(
            "the cursor is older than this catalog's retained history (garbage collection "
            "removed the commits after it); read the feed again from its start (no cursor)"
        )
    elif stretch.at(after.seq) != after.commit_id:
        raise InvalidCursor("invalid cursor: its commit is not on this catalog's history")
    else:
        first_seq, start = after.seq, after.index
    events: list[Event] = []
    position = after
    scanned = 0
    for seq in range(first_seq, head.seq + 1):
        if seq - first_seq == max_commits or scanned >= max_events:
            assert position is not None
            return FeedPage(events, position, True)
        commit_id = stretch.at(seq)
        assert commit_id is not None
        commit = objects.commit(commit_id)
        first = start if seq == first_seq else 0
        derived = derive(objects, commit)
        scanned += len(derived) - first
        for event in derived[first:]:
            position = after_event(event)
            if shows(event):
                events.append(event)
                if len(events) == limit:
                    more = position.index < len(derived) or seq < head.seq
                    return FeedPage(events, position, more)
        position = Position(commit.id, commit.seq, max(first, len(derived)))
    assert position is not None  # the stretch holds at least HEAD
    return FeedPage(events, position, False)
