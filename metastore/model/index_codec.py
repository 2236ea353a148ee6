"""The Avro bytes of an index (``schemas/avro/index.v1.avsc``), written entry by entry.

Every commit embeds the index of recently changed keys, and a commit changes only a
few of them: most entries of its embedded index encode to the very bytes they had in
its parent's. ``encode_index`` writes the ``Index`` record itself, byte for byte what
the codec writes for ``index.encode_entries``' record (zigzag varints, length-prefixed
bytes and strings, a non-empty array as one counted block, every array ended by a zero
count). ``encode_changed`` builds the next commit's encoding from its parent's: the
changed entries (and the one after each inserted key) are written again, every other
entry keeps its bytes. A commit then pays for its own changes, not for the whole
embedded index, and the exact serialized size comes free (the length of the bytes).
The unit tests hold the output to the codec's over random indexes and edits; a new
version of the ``Index`` schema needs a new writer here
(``INDEX_VERSION``, checked by ``Codec.frame``).
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

IndexValue = tuple[str, int]  # (object type, object id)
Entry = tuple[bytes, IndexValue | None]  # None = tombstone (embedded index only)
TOMBSTONE = -1
INDEX_VERSION = 1  # the ``index`` schema version ``encode_index`` writes


def zigzag(value: int) -> bytes:
    """An Avro ``int``/``long``: zigzag, then a little-endian base-128 varint."""
    if 0 <= value < 64:
        return _SMALL[value]
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL = [bytes((v << 1,)) for v in range(64)]
_END = b"\x00"  # the zero count that ends every Avro array


def shared_prefix(a: bytes, b: bytes) -> int:
    """The length of the prefix ``a`` and ``b`` share."""
    # Binary search with slice comparisons: a few C-level compares instead of a
    # Python loop per byte (this runs for every changed entry of every commit).
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True, slots=True)
class EncodedIndex:
    """Sorted index entries with their Avro bytes (no record header), entry by entry.

    Tuples, not lists: an encoding lives on in ``RecentEncodings`` and the commit it
    was built for, and the cyclic collector stops walking a tuple of bytes (or of
    tuples it already stopped walking) after one look, where it walks a list again
    in every collection of its generation until it is frozen (``metastore.node.heap``).
    A stripe's keys and parts are thousands of references; every commit makes new ones.
    """

    entries: tuple[Entry, ...]
    keys: tuple[bytes, ...]  # the entries' keys, for bisection
    parts: tuple[bytes, ...]  # each entry's bytes, which depend on the key before it
    types: tuple[str, ...]  # object types in order of first appearance (their numbers)
    live: int  # entries that are not tombstones
    data: bytes  # the whole record


def _entry(prev: bytes, key: bytes, type_no: int, obj_id: int) -> bytes:
    shared = shared_prefix(prev, key)
    suffix = key[shared:]
    return b"".join((zigzag(shared), zigzag(len(suffix)), suffix, zigzag(type_no), zigzag(obj_id)))


def _record(types: Sequence[str], parts: Sequence[bytes]) -> bytes:
    out: list[bytes] = []
    if types:
        out.append(zigzag(len(types)))
        for name in types:
            raw = name.encode()
            out += (zigzag(len(raw)), raw)
    out.append(_END)
    if parts:
        out.append(zigzag(len(parts)))
        out += parts
    out.append(_END)
    return b"".join(out)


def encode_index(entries: Sequence[Entry]) -> EncodedIndex:
    """The ``Index`` record of sorted ``entries``, every entry encoded."""
    types: list[str] = []
    type_pos: dict[str, int] = {}
    parts: list[bytes] = []
    live = 0
    prev = b""
    for key, value in entries:
        if value is None:
            type_no, obj_id = TOMBSTONE, 0
        else:
            type_no = type_pos.get(value[0], -2)
            if type_no == -2:
                type_no = type_pos[value[0]] = len(types)
                types.append(value[0])
            obj_id = value[1]
            live += 1
        parts.append(_entry(prev, key, type_no, obj_id))
        prev = key
    listed = tuple(entries)
    keys = tuple([k for k, _ in listed])
    return EncodedIndex(listed, keys, tuple(parts), tuple(types), live, _record(types, parts))


def encode_changed(
    previous: EncodedIndex, changes: Mapping[bytes, IndexValue | None]
) -> EncodedIndex:
    """``previous``' entries with ``changes`` applied (a key's new value or tombstone),
    encoded: only the changed entries and the ones right after an inserted key are
    written again, the other entries keep their bytes (list copies and one join, no
    Python work per entry). Type numbers are by first appearance, so an index of other
    than exactly one object type, or a change that would alter its types, is encoded
    whole instead (an embedded index holds entity entries only, in practice)."""
    if len(previous.types) != 1 or any(
        v is not None and v[0] != previous.types[0] for v in changes.values()
    ):
        return encode_index(_merged(previous.entries, changes))
    entries, keys, parts = list(previous.entries), list(previous.keys), list(previous.parts)
    live = previous.live
    dirty: list[bytes] = []
    for key in sorted(changes):
        value = changes[key]
        at = bisect.bisect_left(keys, key)
        if at < len(keys) and keys[at] == key:
            live += (value is not None) - (entries[at][1] is not None)
            entries[at] = (key, value)
        else:
            live += value is not None
            entries.insert(at, (key, value))
            keys.insert(at, key)
            parts.insert(at, b"")
            if at + 1 < len(keys):
                dirty.append(keys[at + 1])  # its previous key changed
        dirty.append(key)
    if live == 0:  # no type left: the types array changes
        return encode_index(entries)
    for key in dirty:
        at = bisect.bisect_left(keys, key)
        value = entries[at][1]
        prev = keys[at - 1] if at else b""
        parts[at] = (
            _entry(prev, key, TOMBSTONE, 0) if value is None else _entry(prev, key, 0, value[1])
        )
    return EncodedIndex(
        tuple(entries),
        tuple(keys),
        tuple(parts),
        previous.types,
        live,
        _record(previous.types, parts),
    )


def _merged(entries: Sequence[Entry], changes: Mapping[bytes, IndexValue | None]) -> list[Entry]:
    merged = dict(entries)
    merged.update(changes)
    return sorted(merged.items())


class RecentEncodings:
    """The encoded embedded indexes of the last commits built, by commit id (bounded).

    The next commit of a catalog is built on its HEAD, usually the commit built just
    before on this node: its encoding is here, and only the changed entries are encoded
    again. A miss (a HEAD another node wrote, an evicted one) encodes every entry once.
    Thread-safe: the lanes of different catalogs build their commits side by side.
    """

    def __init__(self, capacity: int = 256) -> None:
        self._capacity = capacity
        self._lock = threading.Lock()
        self._items: OrderedDict[int, EncodedIndex] = OrderedDict()

    def get(self, commit_id: int) -> EncodedIndex | None:
        with self._lock:
            return self._items.get(commit_id)

    def put(self, commit_id: int, encoded: EncodedIndex) -> None:
        with self._lock:
            self._items[commit_id] = encoded
            self._items.move_to_end(commit_id)
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)
