"""The Avro bytes of an index (``schemas/avro/index.v1.avsc``), written entry by entry.

Every commit embeds the index of recently changed keys, and a commit changes only a
few of them: most entries of its embedded index encode to the very bytes they had in
its parent's. ``encode_index`` writes the ``Index`` record itself, byte for byte what
the codec writes for ``index.encode_entries``' record (zigzag varints, length-prefixed
bytes and strings, a non-empty array as one counted block, every array ended by a zero
count), and takes an entry's bytes from the previous encoding whenever the entry, its
type number and the key before it are unchanged. A commit then pays for its own
changes, not for the whole embedded index, and the exact serialized size comes free
(the length of the bytes). The unit tests hold the output to the codec's over random
indexes; a new version of the ``Index`` schema needs a new writer here
(``INDEX_VERSION``, checked by ``Codec.frame``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

IndexValue = tuple[str, int]  # (object type, object id)
Entry = tuple[bytes, IndexValue | None]  # None = tombstone (embedded index only)
TOMBSTONE = -1
INDEX_VERSION = 1  # the ``index`` schema version ``encode_index`` writes

# One entry's encoding, reusable while these hold: (previous key, type number, id, bytes).
Piece = tuple[bytes, int, int, bytes]


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
    """An index's Avro bytes (no record header) and each entry's piece of them."""

    data: bytes
    pieces: Mapping[bytes, Piece]  # key -> its entry's encoding and what that depends on


def encode_index(entries: Sequence[Entry], previous: EncodedIndex | None = None) -> EncodedIndex:
    """The ``Index`` record of sorted ``entries``, reusing ``previous``' unchanged pieces."""
    reuse: Mapping[bytes, Piece] = previous.pieces if previous is not None else {}
    types: list[str] = []
    type_pos: dict[str, int] = {}
    pieces: dict[bytes, Piece] = {}
    parts: list[bytes] = []
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
        piece = reuse.get(key)
        if piece is None or piece[0] != prev or piece[1] != type_no or piece[2] != obj_id:
            shared = shared_prefix(prev, key)
            suffix = key[shared:]
            encoded = b"".join(
                (zigzag(shared), zigzag(len(suffix)), suffix, zigzag(type_no), zigzag(obj_id))
            )
            piece = (prev, type_no, obj_id, encoded)
        pieces[key] = piece
        parts.append(piece[3])
        prev = key
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
    return EncodedIndex(b"".join(out), pieces)


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
