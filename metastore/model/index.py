"""The commit index: sorted entity keys -> (object type, object id), spillable.

A commit embeds an index of recently changed keys; when its serialized
size passes a threshold, all but this commit's own changes spill into "stripe"
objects (sorted, non-overlapping key ranges) that the commit references. An
embedded entry always shadows a spilled one, and a deleted key is an embedded
tombstone until the next spill removes it from its stripe. Only the stripes a
spill touches are rewritten, so most stripes are written once and then cached
forever. Keys are bytes compared lexicographically; serialization shares each
key's common prefix with the previous key (``encode_entries``).
"""

from __future__ import annotations

import bisect
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from metastore.model.index_codec import TOMBSTONE as TOMBSTONE

# The entry types are defined with their encoding and exported from here as well.
from metastore.model.index_codec import (
    EncodedIndex,
    encode_changed,
    encode_index,
    shared_prefix,
    zigzag,
)
from metastore.model.index_codec import Entry as Entry
from metastore.model.index_codec import IndexValue as IndexValue


class StripeRef(NamedTuple):
    first: bytes
    last: bytes
    id: int


def encode_stripe_refs(stripes: Sequence[StripeRef]) -> bytes:
    """A commit's ``stripes`` field as Avro bytes (an array of ``StripeRef`` records),
    byte for byte what the codec writes: one counted block, then the zero count.

    Every commit records all its index's stripes, and they change only when a commit
    spills: the engine writes them once per change (``RecentStripeRefs``) instead of
    through the codec on every commit, where they cost more than the rest of the
    record at a few thousand tables and grow with the catalog.
    """
    if not stripes:
        return b"\x00"
    out = [zigzag(len(stripes))]
    for first, last, obj_id in stripes:
        out += (zigzag(len(first)), first, zigzag(len(last)), last, zigzag(obj_id))
    out.append(b"\x00")
    return b"".join(out)


class RecentStripeRefs:
    """The stripe list of the last commits built and its bytes, by commit id (bounded).

    A commit built on one of these HEADs that did not spill has the same stripes: their
    bytes are reused. Thread-safe like ``RecentEncodings``.
    """

    def __init__(self, capacity: int = 256) -> None:
        self._capacity = capacity
        self._lock = threading.Lock()
        self._items: OrderedDict[int, tuple[tuple[StripeRef, ...], bytes]] = OrderedDict()

    def encoded(self, head_id: int | None, stripes: tuple[StripeRef, ...]) -> bytes:
        """``encode_stripe_refs(stripes)``, reused from commit ``head_id`` if its are these."""
        if head_id is not None:
            with self._lock:
                known = self._items.get(head_id)
            if known is not None and known[0] == stripes:
                return known[1]
        return encode_stripe_refs(stripes)

    def put(self, commit_id: int, stripes: tuple[StripeRef, ...], data: bytes) -> None:
        with self._lock:
            self._items[commit_id] = (stripes, data)
            self._items.move_to_end(commit_id)
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)


@dataclass(frozen=True, slots=True)
class IndexLimits:
    """Serialized-size thresholds (bytes)."""

    embedded_max: int = 4 * 1024  # spill the embedded index past this size
    stripe_max: int = 64 * 1024  # split a stripe past this size


# --- serialization -------------------------------------------------------------------


def _varint_len(value: int) -> int:
    zigzag = (value << 1) ^ (value >> 63)
    return max(1, math.ceil(zigzag.bit_length() / 7))


def encode_entries(entries: Sequence[Entry]) -> dict[str, Any]:
    """The Avro ``Index`` record for sorted ``entries`` (prefix-compressed keys)."""
    types: list[str] = []
    type_pos: dict[str, int] = {}
    out: list[dict[str, Any]] = []
    prev = b""
    for key, value in entries:
        shared = shared_prefix(prev, key)
        if value is None:
            type_no, obj_id = TOMBSTONE, 0
        else:
            type_no = type_pos.get(value[0], -2)
            if type_no == -2:
                type_no = type_pos[value[0]] = len(types)
                types.append(value[0])
            obj_id = value[1]
        out.append({"shared": shared, "suffix": key[shared:], "type": type_no, "id": obj_id})
        prev = key
    return {"types": types, "entries": out}


def decode_entries(record: Mapping[str, Any]) -> list[Entry]:
    types: list[str] = record["types"]
    entries: list[Entry] = []
    prev = b""
    for item in record["entries"]:
        key = prev[: item["shared"]] + item["suffix"]
        type_no = item["type"]
        entries.append((key, None if type_no == TOMBSTONE else (types[type_no], item["id"])))
        prev = key
    return entries


def entries_size(entries: Sequence[Entry]) -> int:
    """Serialized size of ``entries`` as ``encode_entries`` + Avro would write them."""
    size = 4  # array block headers, roughly
    prev = b""
    seen: set[str] = set()
    for key, value in entries:
        shared = shared_prefix(prev, key)
        suffix = len(key) - shared
        size += _varint_len(shared) + _varint_len(suffix) + suffix
        if value is None:
            size += 2
        else:
            size += 1 + _varint_len(value[1])
            if value[0] not in seen:
                seen.add(value[0])
                size += 1 + len(value[0])
        prev = key
    return size


# --- reading -------------------------------------------------------------------------

StripeLoader = Callable[[int], Sequence[Entry]]
StripeEncodings = Callable[[int], EncodedIndex | None]  # a stripe's encoding, if known


class IndexView:
    """The index as of one commit: embedded entries over the spilled stripes."""

    __slots__ = ("_embedded", "_embedded_keys", "_firsts", "_load", "stripes")

    def __init__(
        self,
        embedded: Sequence[Entry],
        stripes: Sequence[StripeRef],
        load: StripeLoader,
        keys: Sequence[bytes] | None = None,
    ) -> None:
        """``keys``: ``embedded``'s keys, if the caller has them (never changed after)."""
        self._embedded = embedded
        self._embedded_keys = keys if keys is not None else [key for key, _ in embedded]
        self.stripes = tuple(stripes)
        self._firsts = [s.first for s in stripes]
        self._load = load

    @property
    def embedded(self) -> Sequence[Entry]:
        return self._embedded

    def get(self, key: bytes) -> IndexValue | None:
        pos = bisect.bisect_left(self._embedded_keys, key)
        if pos < len(self._embedded_keys) and self._embedded_keys[pos] == key:
            return self._embedded[pos][1]
        return self._spilled_get(key)

    def _spilled_get(self, key: bytes) -> IndexValue | None:
        pos = bisect.bisect_right(self._firsts, key) - 1
        if pos < 0 or key > self.stripes[pos].last:
            return None
        entries = self._load(self.stripes[pos].id)
        i = bisect.bisect_left(entries, (key,))
        if i < len(entries) and entries[i][0] == key:
            return entries[i][1]
        return None

    def items(
        self, prefix: bytes = b"", start_after: bytes | None = None, stop: bytes | None = None
    ) -> Iterator[tuple[bytes, IndexValue]]:
        """Live entries with ``prefix`` in key order, after ``start_after``, before ``stop``."""
        start = prefix if start_after is None or start_after < prefix else start_after
        embedded = self._embedded_from(start, start_after)
        spilled = self._spilled_from(start, start_after)
        for key, value in _merge(embedded, spilled):
            if not key.startswith(prefix) or (stop is not None and key >= stop):
                return
            if value is not None:
                yield key, value

    def _embedded_from(self, start: bytes, after: bytes | None) -> Iterator[Entry]:
        pos = bisect.bisect_left(self._embedded_keys, start)
        for key, value in self._embedded[pos:]:
            if after is not None and key <= after:
                continue
            yield key, value

    def _spilled_from(self, start: bytes, after: bytes | None) -> Iterator[Entry]:
        pos = max(bisect.bisect_right(self._firsts, start) - 1, 0)
        for stripe in self.stripes[pos:]:
            if stripe.last < start:
                continue
            entries = self._load(stripe.id)
            # by position, not over a slice: a reader that stops at its prefix's end (most
            # do, after a few entries) would otherwise copy the rest of the stripe first
            for i in range(bisect.bisect_left(entries, (start,)), len(entries)):
                entry = entries[i]
                if after is not None and entry[0] <= after:
                    continue
                yield entry


def _merge(first: Iterator[Entry], second: Iterator[Entry]) -> Iterator[Entry]:
    """Merge two sorted streams of distinct keys; on equal keys the entry of ``first``
    (the embedded index, or a commit's changes) wins and ``second``'s is skipped.

    Two streams need no heap: ``heapq.merge`` cost more to set up than most reads use
    (a location's overlap check, a point-like prefix read, stops after an entry or two),
    and a stream found empty hands over the other one whole."""
    a = next(first, None)
    b = next(second, None)
    while a is not None and b is not None:
        if b[0] < a[0]:
            yield b
            b = next(second, None)
            continue
        if b[0] == a[0]:
            b = next(second, None)
        yield a
        a = next(first, None)
    if a is not None:
        yield a
        yield from first
    elif b is not None:
        yield b
        yield from second


# --- building the next commit's index ------------------------------------------------


@dataclass(frozen=True, slots=True)
class BuiltIndex:
    embedded: Sequence[Entry]
    embedded_size: int  # exact: the length of ``encoded.data``
    stripes: list[StripeRef]
    new_stripes: list[tuple[int, Sequence[Entry]]]  # (object id, entries) to write
    encoded: EncodedIndex  # ``embedded``'s Avro bytes, for the commit record
    stripe_data: Mapping[int, bytes] = field(default_factory=dict)  # new stripe -> its bytes
    stripe_encodings: Mapping[int, EncodedIndex] = field(default_factory=dict)  # the same


class IndexUpdate:
    """Changes on top of a base ``IndexView``, readable while being built."""

    def __init__(self, base: IndexView | None, load: StripeLoader) -> None:
        self._base = base
        self._load = load
        self._changes: dict[bytes, IndexValue | None] = {}

    @property
    def changed_keys(self) -> Iterable[bytes]:
        return self._changes.keys()

    def put(self, key: bytes, value: IndexValue) -> None:
        self._changes[key] = value

    def remove(self, key: bytes) -> None:
        self._changes[key] = None

    def get(self, key: bytes) -> IndexValue | None:
        if key in self._changes:
            return self._changes[key]
        return self._base.get(key) if self._base is not None else None

    def items(
        self, prefix: bytes = b"", start_after: bytes | None = None
    ) -> Iterator[tuple[bytes, IndexValue]]:
        changed = sorted(
            (k, v)
            for k, v in self._changes.items()
            if k.startswith(prefix) and (start_after is None or k > start_after)
        )
        base: Iterator[Entry] = (  # live entries only; tombstones come from the changes
            self._base.items(prefix, start_after) if self._base is not None else iter(())
        )
        for key, value in _merge(iter(changed), base):
            if value is not None:
                yield key, value

    def build(
        self,
        limits: IndexLimits,
        new_id: Callable[[], int],
        previous: EncodedIndex | None = None,
        stripe_encoding: StripeEncodings = lambda _: None,
    ) -> BuiltIndex:
        """The next commit's index. ``previous`` is the base's encoded embedded index, if
        known: its unchanged entries are not encoded again (``metastore.model.index_codec``);
        ``stripe_encoding`` gives a stripe's, if known, for the same use in a spill."""
        stripes = list(self._base.stripes) if self._base is not None else []
        base_embedded = self._base.embedded if self._base is not None else []
        if previous is not None and len(previous.entries) == len(base_embedded):
            encoded = encode_changed(previous, self._changes)
        else:
            merged = dict(base_embedded)
            merged.update(self._changes)
            encoded = encode_index(sorted(merged.items()))
        # The commit record needs these bytes anyway; their length is the exact size.
        embedded = encoded.entries
        if len(encoded.data) <= limits.embedded_max:
            return BuiltIndex(embedded, len(encoded.data), stripes, [], encoded)
        # Spill everything but this commit's own changes (if those alone stay small).
        own = sorted(self._changes.items())
        own_encoded = encode_index(own)
        keep = own if len(own_encoded.data) <= limits.embedded_max // 2 else []
        kept = own_encoded if keep else encode_index(keep)
        kept_keys = {k for k, _ in keep}
        spill = [(k, v) for k, v in embedded if k not in kept_keys]
        spilled = _spill(stripes, spill, limits, self._load, new_id, stripe_encoding)
        return BuiltIndex(
            keep,
            len(kept.data),
            spilled.stripes,
            [(obj_id, encoded.entries) for obj_id, encoded in spilled.written.items()],
            kept,
            {obj_id: encoded.data for obj_id, encoded in spilled.written.items()},
            spilled.written,
        )


class _Spilled(NamedTuple):
    stripes: list[StripeRef]
    written: dict[int, EncodedIndex]  # the new stripes, by object id


def _spill(
    stripes: list[StripeRef],
    spill: list[Entry],
    limits: IndexLimits,
    load: StripeLoader,
    new_id: Callable[[], int],
    stripe_encoding: StripeEncodings,
) -> _Spilled:
    """Merge ``spill`` into the stripes; rewrite only the stripes it touches.

    A touched stripe whose encoding is known (``stripe_encoding``: the stripes this
    node wrote lately) and that only gains or changes keys is encoded from it, its
    unchanged entries keeping their bytes; otherwise it is loaded, merged and encoded
    whole. Either way the bytes are the same.
    """
    firsts = [s.first for s in stripes]
    touched: dict[int, list[Entry]] = {}
    for key, value in spill:
        pos = max(bisect.bisect_right(firsts, key) - 1, 0) if stripes else -1
        touched.setdefault(pos, []).append((key, value))
    result: list[StripeRef] = []
    written: dict[int, EncodedIndex] = {}

    def emit(encodings: list[EncodedIndex]) -> None:
        for encoded in encodings:
            obj_id = new_id()
            written[obj_id] = encoded
            result.append(StripeRef(encoded.keys[0], encoded.keys[-1], obj_id))

    if not stripes:
        emit(_split([(k, v) for k, v in touched.get(-1, []) if v is not None], limits.stripe_max))
        return _Spilled(result, written)
    for pos, stripe in enumerate(stripes):
        changes = touched.get(pos)
        if changes is None:
            result.append(stripe)
            continue
        known = stripe_encoding(stripe.id)
        if known is not None and all(value is not None for _, value in changes):
            encoded = encode_changed(known, dict(changes))
            fits = len(encoded.data) <= limits.stripe_max
            emit([encoded] if fits else _split(encoded.entries, limits.stripe_max))
            continue
        current = dict(load(stripe.id))
        for key, value in changes:
            if value is None:
                current.pop(key, None)
            else:
                current[key] = value
        emit(_split(sorted(current.items()), limits.stripe_max))
    return _Spilled(result, written)


def _split(entries: Sequence[Entry], stripe_max: int) -> list[EncodedIndex]:
    """``entries`` in stripes of at most about ``stripe_max`` bytes, each encoded."""
    if not entries:
        return []
    whole = encode_index(entries)
    size = len(whole.data)
    if size <= stripe_max:
        return [whole]
    parts = math.ceil(size / (stripe_max * 0.75))
    per = math.ceil(len(entries) / parts)
    return [encode_index(entries[i : i + per]) for i in range(0, len(entries), per)]
