"""How many live namespaces, tables and views a catalog holds, kept in every commit.

Entity quotas need exact counts under concurrency, so the count is part of the
state a commit produces: the commit engine adds each request's creations and
deletions to the count of the commit it builds on and stores the result in the new
commit (``Commit.counts``), in the same atomic write as the entities themselves.
Two concurrent creates in one catalog therefore see each other's count exactly as
they see each other's entities. Reading a catalog's count is reading its HEAD
commit (cached like every immutable object). A commit written before counts
existed holds none; the engine counts that catalog's index once (``count``) and
every later commit carries the result.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from metastore.model.keys import SEP, Kind

COUNTED = (Kind.NAMESPACE, Kind.TABLE, Kind.VIEW)
_FIELD = {Kind.NAMESPACE: "namespaces", Kind.TABLE: "tables", Kind.VIEW: "views"}


_BY_BYTE = {kind.value.encode()[0]: kind for kind in COUNTED}


def counted_kind(key: bytes) -> Kind | None:
    """The kind of an encoded entity key if it is counted, else None (read off the byte
    after the namespace, without decoding the key: this runs for every change)."""
    at = key.find(SEP)
    return _BY_BYTE.get(key[at + 1]) if 0 <= at < len(key) - 1 else None


class Keys(Protocol):
    """An index, as far as counting reads it: every live key in order."""

    def items(self, prefix: bytes = b"") -> Iterator[tuple[bytes, Any]]: ...


@dataclass(frozen=True, slots=True)
class Counts:
    namespaces: int = 0
    tables: int = 0
    views: int = 0

    def of(self, kind: Kind) -> int:
        value: int = getattr(self, _FIELD[kind])
        return value

    def added(self, delta: Mapping[Kind, int]) -> Counts:
        """These counts plus ``delta`` (per counted kind)."""
        return Counts(
            self.namespaces + delta.get(Kind.NAMESPACE, 0),
            self.tables + delta.get(Kind.TABLE, 0),
            self.views + delta.get(Kind.VIEW, 0),
        )

    def grown(self, before: Counts) -> frozenset[Kind]:
        """The kinds of which there are more than ``before``."""
        return frozenset(k for k in COUNTED if self.of(k) > before.of(k))

    def to_record(self) -> dict[str, int]:
        return {"namespaces": self.namespaces, "tables": self.tables, "views": self.views}

    @classmethod
    def from_record(cls, record: dict[str, Any] | None) -> Counts | None:
        if record is None:
            return None
        return cls(record["namespaces"], record["tables"], record["views"])


def count(index: Keys | None) -> Counts:
    """Count the live entities of one catalog state by reading its whole index (for a
    commit written before counts existed: once per catalog)."""
    counts = Counts()
    if index is None:
        return counts
    tally = dict.fromkeys(COUNTED, 0)
    for key, _ in index.items():
        kind = counted_kind(key)
        if kind is not None:
            tally[kind] += 1
    return counts.added(tally)
