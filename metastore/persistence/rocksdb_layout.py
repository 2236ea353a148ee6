"""The key layout and value encodings of our RocksDB databases, stated once.

An embedded store and a cluster node's view are the same kind of database: the
catalog data under three one-byte prefixes, read by ``RocksDBReader`` in both.
A view adds its own bookkeeping keys next to the data. Every prefix is listed
here, in one table, so two owners can never pick the same byte::

    b"o" + ObjKey.encode()  -> created_at_us (8 bytes BE) + data          (objects)
    b"r" + RefKey.encode()  -> encode_ref bytes                           (refs)
    b"u" + ObjKey.encode()  -> token length (1 byte) + token (utf-8) + data (updateables)
    b"m" + b"format"        -> FORMAT (every database)

    A view's own keys (metastore.cluster.view):
    b"x" + topic byte (b"r" | b"o") + partition (2 bytes BE) -> next offset to read (8 bytes BE)
    b"b" + partition -> latest refs barrier: its offset (= the partition's epoch, 8 bytes) + value
    b"c" + partition -> latest objects barrier: its offset (8 bytes) + value
    b"e" + partition -> highest updateable epoch read in objects[p] (8 bytes BE, signed)
    b"d" + b"dropped" -> records dropped so far (8 bytes BE)
    b"m" + b"view"    -> JSON {"partitions", "prefix"}: a view of which topics
    b"z" + RefKey.encode() -> offset of the ref's deletion (a deleted ref is never resurrected)

Everything here is pure: bytes in, bytes or values out. ``rocksdb.py`` reads and
writes these keys; the view's apply rules compute them without touching a
database, so a job can apply the changelog into a plain dict and get the exact
keys and values a node's view holds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from metastore.model.keys import ObjKey, RefKey
from metastore.persistence.base import StoredObject, UpdateableObject, decode_ref, encode_ref

# --- the catalog data (every database) ------------------------------------------------

OBJ = b"o"
REF = b"r"
UPD = b"u"
DATA_PREFIXES = (OBJ, REF, UPD)  # in key order
FORMAT_KEY = b"m" + b"format"
FORMAT = b"1"

# --- a view's own keys ------------------------------------------------------------------

OFFSETS = b"x"
REFS_BARRIER = b"b"
OBJECTS_BARRIER = b"c"
EPOCH_FLOOR = b"e"
DROPPED = b"d" + b"dropped"
VIEW_MARKER = b"m" + b"view"
DELETED_REF = b"z"

# The changelog topics by the byte that names them in an offsets key, and the prefix
# of their barrier keys (keyed by the topic role, "refs" or "objects").
TOPIC_BYTE: Mapping[str, bytes] = {"refs": b"r", "objects": b"o"}
BARRIER_PREFIX: Mapping[str, bytes] = {"refs": REFS_BARRIER, "objects": OBJECTS_BARRIER}

__all__ = [
    "BARRIER_PREFIX",
    "DATA_PREFIXES",
    "DELETED_REF",
    "DROPPED",
    "EPOCH_FLOOR",
    "FORMAT",
    "FORMAT_KEY",
    "OBJ",
    "OBJECTS_BARRIER",
    "OFFSETS",
    "REF",
    "REFS_BARRIER",
    "TOPIC_BYTE",
    "UPD",
    "VIEW_MARKER",
    "barrier_key",
    "decode_barrier",
    "decode_count",
    "decode_floor",
    "decode_object",
    "decode_ref",
    "decode_updateable",
    "deleted_ref_key",
    "encode_barrier",
    "encode_count",
    "encode_floor",
    "encode_object",
    "encode_ref",
    "encode_updateable",
    "floor_key",
    "object_key",
    "offsets_key",
    "partition_of_key",
    "ref_key",
    "updateable_key",
    "updateable_token",
    "view_marker",
]


def object_key(key: ObjKey) -> bytes:
    return OBJ + key.encode()


def ref_key(key: RefKey) -> bytes:
    return REF + key.encode()


def updateable_key(key: ObjKey) -> bytes:
    return UPD + key.encode()


def encode_object(obj: StoredObject) -> bytes:
    return obj.created_at_us.to_bytes(8, "big") + obj.data


def decode_object(key: ObjKey, raw: bytes) -> StoredObject:
    return StoredObject(key, raw[8:], int.from_bytes(raw[:8], "big"))


def encode_updateable(obj: UpdateableObject) -> bytes:
    token = obj.token.encode()
    if len(token) > 255:
        raise ValueError(f"updateable {obj.key}: token longer than 255 bytes")
    return bytes((len(token),)) + token + obj.data


def decode_updateable(key: ObjKey, raw: bytes) -> UpdateableObject:
    end = 1 + raw[0]
    return UpdateableObject(key, raw[end:], raw[1:end].decode())


def updateable_token(raw: bytes) -> str:
    """The token of a stored updateable, without building the object."""
    return raw[1 : 1 + raw[0]].decode()


# --- a view's own keys and values ---------------------------------------------------------


def _partition(partition: int) -> bytes:
    return partition.to_bytes(2, "big")


def partition_of_key(key: bytes) -> int:
    """The partition a per-partition view key (offsets, barrier, floor) is about."""
    return int.from_bytes(key[-2:], "big")


def offsets_key(role: str, partition: int) -> bytes:
    return OFFSETS + TOPIC_BYTE[role] + _partition(partition)


def barrier_key(role: str, partition: int) -> bytes:
    return BARRIER_PREFIX[role] + _partition(partition)


def floor_key(partition: int) -> bytes:
    return EPOCH_FLOOR + _partition(partition)


def deleted_ref_key(raw_ref_key: bytes) -> bytes:
    """The deletion marker of a ref, from its stored key (``REF`` + RefKey.encode())."""
    return DELETED_REF + raw_ref_key[len(REF) :]


def encode_count(value: int) -> bytes:
    """An offset or a count: 8 bytes, big-endian, unsigned."""
    return value.to_bytes(8, "big")


def decode_count(raw: bytes) -> int:
    return int.from_bytes(raw, "big")


def encode_floor(epoch: int) -> bytes:
    """An epoch floor: 8 bytes, big-endian, signed (-1 = before the first owner)."""
    return epoch.to_bytes(8, "big", signed=True)


def decode_floor(raw: bytes) -> int:
    return int.from_bytes(raw, "big", signed=True)


def encode_barrier(offset: int, value: bytes) -> bytes:
    """A barrier key's value: the barrier record's offset, then the record as consumed."""
    return offset.to_bytes(8, "big") + value


def decode_barrier(raw: bytes) -> tuple[int, bytes]:
    """(offset, the barrier record's value) of a barrier key's value."""
    return int.from_bytes(raw[:8], "big"), raw[8:]


def view_marker(prefix: str, partitions: int) -> bytes:
    """The value of ``VIEW_MARKER``: which topics (prefix, partition count) a view is of."""
    return json.dumps({"prefix": prefix, "partitions": partitions}, sort_keys=True).encode()
