"""Changelog records of the cluster mode: keys, values, headers, partitioning.

Two key-compacted topics hold the metastore's tables (a changelog per table): ``<prefix>.refs``
and ``<prefix>.objects``. A catalog's refs and objects live in the same
partition number of both, ``partition_for(tenant, catalog)``, a stable hash that
never depends on the Python process (no ``hash()``), so every node and every
release agrees. Keys are the storage keys with a one-byte kind prefix; values are
codec records (Avro with their schema version). Headers carry what a reader
needs before decoding: the record kind, the schema version, the writer node and
the owner epoch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from metastore.model.codec import Codec
from metastore.model.keys import ObjKey, RefKey
from metastore.persistence.base import Ref, StoredObject, UpdateableObject

OBJECT_KEY = b"o"
UPDATEABLE_KEY = b"u"
REF_KEY = b"r"
BARRIER_KEY = b"!barrier"  # one per partition in each topic; compaction keeps the latest

Role = Literal["refs", "objects"]  # which of the two topics
ROLES: tuple[Role, Role] = ("refs", "objects")
# where an owner produces: the two changelog topics, and the change events (opt-in)
Topic = Literal["refs", "objects", "events"]
RecordKind = Literal["object", "updateable", "ref", "barrier"]
H_KIND = "k"
H_VERSION = "v"
H_NODE = "n"
H_EPOCH = "e"
H_EXPECTED = "h"  # a ref tombstone's expected HEAD (absent: none expected)
H_OBJECTS = "o"  # a ref tombstone's objects offset


def partition_for(tenant: str, catalog: str, partitions: int) -> int:
    """Stable partition of a catalog (or of a tenant's own ref, catalog "")."""
    digest = hashlib.blake2b(f"{tenant}\x00{catalog}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % partitions


@dataclass(frozen=True, slots=True)
class RefRecord:
    key: RefKey
    expected_head: int | None
    new: Ref | None  # None = delete
    epoch: int
    objects_offset: int  # apply only once objects[p] is applied up to here


@dataclass(frozen=True, slots=True)
class UpdateableRecord:
    key: ObjKey
    expected_token: str | None  # None = must not exist
    new: UpdateableObject | None  # None = delete
    epoch: int


@dataclass(frozen=True, slots=True)
class Barrier:
    node: str
    url: str
    nonce: str
    created_at_us: int


@dataclass(frozen=True, slots=True)
class Produced:
    """One record to produce: topic ("refs", "objects" or "events"), key, value, headers."""

    topic: Topic
    key: bytes
    value: bytes | None  # None: a tombstone (compaction removes the key)
    headers: list[tuple[str, bytes]]


def _headers(kind: RecordKind, version: int, node: str, epoch: int) -> list[tuple[str, bytes]]:
    return [
        (H_KIND, kind.encode()),
        (H_VERSION, str(version).encode()),
        (H_NODE, node.encode()),
        (H_EPOCH, str(epoch).encode()),
    ]


def header(headers: Sequence[tuple[str, bytes | None]] | None, name: str) -> bytes | None:
    for key, value in headers or ():
        if key == name:
            return value
    return None


class RecordCodec:
    """Encodes what an owner writes and decodes what a view reads."""

    def __init__(self, codec: Codec, node: str) -> None:
        self._codec = codec
        self.node = node

    def _produce(
        self,
        topic: Role,
        kind: RecordKind,
        schema: str,
        key: bytes,
        record: Mapping[str, object],
        epoch: int,
    ) -> Produced:
        value = self._codec.encode(schema, record)
        headers = _headers(kind, self._codec.version(schema), self.node, epoch)
        return Produced(topic, key, value, headers)

    def object(self, obj: StoredObject, epoch: int) -> Produced:
        record = {"created_at_us": obj.created_at_us, "data": obj.data}
        key = OBJECT_KEY + obj.key.encode()
        return self._produce("objects", "object", "changelog_object", key, record, epoch)

    def object_tombstone(self, key: ObjKey, epoch: int) -> Produced:
        """A garbage-collected object: every view and replay deletes it, compaction drops
        the key from the log."""
        headers = _headers("object", self._codec.version("changelog_object"), self.node, epoch)
        return Produced("objects", OBJECT_KEY + key.encode(), None, headers)

    def updateable(self, record: UpdateableRecord) -> Produced:
        """A CAS on an updateable object; views apply it only if the token chain matches."""
        new = record.new
        value = {
            "created_at_us": 0,
            "data": new.data if new is not None else b"",
            "token": new.token if new is not None else None,
            "expected_token": record.expected_token,
            "epoch": record.epoch,
        }
        key = UPDATEABLE_KEY + record.key.encode()
        return self._produce("objects", "updateable", "changelog_object", key, value, record.epoch)

    def ref(self, record: RefRecord) -> Produced:
        """A ref's new state; a deletion is a tombstone whose CAS context is in headers."""
        new = record.new
        key = REF_KEY + record.key.encode()
        if new is None:
            headers = _headers("ref", self._codec.version("changelog_ref"), self.node, record.epoch)
            headers.append((H_OBJECTS, str(record.objects_offset).encode()))
            if record.expected_head is not None:
                headers.append((H_EXPECTED, str(record.expected_head).encode()))
            return Produced("refs", key, None, headers)
        value = {
            "expected_head": record.expected_head,
            "deleted": new is None,
            "head": new.head if new is not None else 0,
            "created_at_us": new.created_at_us if new is not None else 0,
            "recent": list(new.recent) if new is not None else [],
            "epoch": record.epoch,
            "objects_offset": record.objects_offset,
        }
        return self._produce("refs", "ref", "changelog_ref", key, value, record.epoch)

    def barrier(self, barrier: Barrier, topic: Role) -> Produced:
        value = {
            "node": barrier.node,
            "url": barrier.url,
            "nonce": barrier.nonce,
            "created_at_us": barrier.created_at_us,
        }
        return self._produce(topic, "barrier", "barrier", BARRIER_KEY, value, -1)

    # --- decoding ----------------------------------------------------------------------

    def decode_object(self, key: bytes, value: bytes) -> StoredObject:
        record = self._codec.decode("changelog_object", value)
        return StoredObject(ObjKey.decode(key[1:]), record["data"], record["created_at_us"])

    def decode_updateable(self, key: bytes, value: bytes) -> UpdateableRecord:
        record = self._codec.decode("changelog_object", value)
        obj_key = ObjKey.decode(key[1:])
        new = None
        if record["token"] is not None:
            new = UpdateableObject(obj_key, record["data"], record["token"])
        return UpdateableRecord(obj_key, record["expected_token"], new, record["epoch"])

    def decode_ref(self, key: bytes, value: bytes) -> RefRecord:
        record = self._codec.decode("changelog_ref", value)
        ref_key = RefKey.decode(key[1:])
        new = None
        if not record["deleted"]:
            new = Ref(ref_key, record["head"], record["created_at_us"], tuple(record["recent"]))
        return RefRecord(
            ref_key, record["expected_head"], new, record["epoch"], record["objects_offset"]
        )

    def decode_ref_tombstone(
        self, key: bytes, headers: Sequence[tuple[str, bytes | None]] | None
    ) -> RefRecord:
        epoch, objects = header(headers, H_EPOCH), header(headers, H_OBJECTS)
        if epoch is None or objects is None:
            raise ValueError("a ref tombstone without its epoch or objects offset")
        expected = header(headers, H_EXPECTED)
        return RefRecord(
            RefKey.decode(key[1:]),
            None if expected is None else int(expected),
            None,
            int(epoch),
            int(objects),
        )

    def decode_barrier(self, value: bytes) -> Barrier:
        record = self._codec.decode("barrier", value)
        return Barrier(record["node"], record["url"], record["nonce"], record["created_at_us"])
