"""Commit ids of each catalog's history by sequence number, as far as a node has walked.

History is a chain of parent links from HEAD, so finding the commit at sequence number
``s`` means walking back from HEAD; for a reader far behind (the change feed resuming
an old cursor, or reading from the start) that walk would repeat on every page. A
``Chains`` remembers, per catalog, the ids of one contiguous stretch of the chain
(``base`` .. ``base + len - 1``) and extends it: upwards from a new HEAD until the walk
meets a remembered commit (a ref reset that moved HEAD elsewhere is detected by the ids
disagreeing, and the stretch above the fork is dropped), downwards as far as a reader
asks. A walk reads only each commit's parent and sequence number (``Links``), never the
rest of it.

Remembered ids are a cache of immutable facts (which commit has which parent) and may
name commits garbage collection has since removed: a reader that finds one missing
calls ``forget`` and walks again. Memory is bounded by ``max_ids`` over all catalogs,
least recently used catalogs first out. Thread-safe: stretches are replaced, never
changed in place.
"""

from __future__ import annotations

import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from metastore.model.codec import Codec
from metastore.model.keys import ObjKey
from metastore.model.objtypes import COMMIT
from metastore.model.records import Commit
from metastore.persistence.base import Persistence

# commit id -> (its parent's id, its sequence number); None when it is not stored
Links = Callable[[int], tuple[int, int] | None]
DEFAULT_MAX_IDS = 4_000_000  # 8 bytes each: 32 MB over all catalogs


@dataclass(frozen=True, slots=True)
class Stretch:
    """``ids[i]`` is the commit with sequence number ``base + i`` on one chain.

    ``floor``: ``base`` is where the retained history starts (the root, or a commit
    whose parent is no longer stored); nothing below it can be read."""

    base: int
    ids: array[int]
    floor: bool

    @property
    def top(self) -> int:
        return self.base + len(self.ids) - 1

    def at(self, seq: int) -> int | None:
        return self.ids[seq - self.base] if self.base <= seq <= self.top else None


def stored_links(persistence: Persistence, codec: Codec, tenant: str, catalog: str) -> Links:
    """``Links`` of a catalog's stored commits (one point read each, no full decode)."""

    def links(commit_id: int) -> tuple[int, int] | None:
        (stored,) = persistence.get_objects([ObjKey(tenant, catalog, COMMIT.name, commit_id)])
        return None if stored is None else Commit.links(codec, stored.data)

    return links


class Chains:
    def __init__(self, max_ids: int = DEFAULT_MAX_IDS) -> None:
        self._max_ids = max_ids
        self._stretches: OrderedDict[tuple[str, str], Stretch] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def stretch(
        self, tenant: str, catalog: str, head: int, head_seq: int, low: int | None, links: Links
    ) -> Stretch:
        """The chain from ``head`` (sequence ``head_seq``) down to sequence ``low`` or, if
        the retained history starts above it (or ``low`` is None), to its start."""
        key = (tenant, catalog)
        with self._lock:
            known = self._stretches.get(key)
        stretch = _up(known, head, head_seq, links)
        stretch = _down(stretch, low, links)
        with self._lock:
            previous = self._stretches.pop(key, None)
            if previous is not None:
                self._size -= len(previous.ids)
            if len(stretch.ids) <= self._max_ids:
                self._stretches[key] = stretch
                self._size += len(stretch.ids)
                while self._size > self._max_ids:
                    _, evicted = self._stretches.popitem(last=False)
                    self._size -= len(evicted.ids)
        return stretch

    def forget(self, tenant: str, catalog: str) -> None:
        """Drop what is remembered of a catalog (a remembered commit was collected)."""
        with self._lock:
            previous = self._stretches.pop((tenant, catalog), None)
            if previous is not None:
                self._size -= len(previous.ids)


def _up(known: Stretch | None, head: int, head_seq: int, links: Links) -> Stretch:
    """``known`` joined to ``head``: walk down from HEAD until a remembered commit."""
    newer: list[int] = []
    commit, seq = head, head_seq
    while True:
        if known is not None and known.at(seq) == commit:
            ids = known.ids[: seq - known.base + 1]
            ids.extend(reversed(newer))
            return Stretch(known.base, ids, known.floor)
        link = links(commit)
        if link is None:
            if not newer:
                raise LookupError(f"HEAD commit {commit} is not stored")
            return Stretch(seq + 1, array("Q", reversed(newer)), True)  # collected below
        newer.append(commit)
        if not link[0]:  # the root
            return Stretch(seq, array("Q", reversed(newer)), True)
        commit, seq = link[0], seq - 1


def _down(stretch: Stretch, low: int | None, links: Links) -> Stretch:
    """``stretch`` extended down to sequence ``low`` (None: to the history's start)."""
    if stretch.floor or (low is not None and stretch.base <= low):
        return stretch
    older: list[int] = []
    base, floor = stretch.base, False
    link = links(stretch.ids[0])
    parent = link[0] if link is not None else 0
    while low is None or base > low:
        parent_link = links(parent) if parent else None
        if parent_link is None:  # the root, or collected: the history starts at base
            floor = True
            break
        older.append(parent)
        base, parent = base - 1, parent_link[0]
    ids = array("Q", reversed(older))
    ids.extend(stretch.ids)
    return Stretch(base, ids, floor)
