"""A stable fingerprint of a view's data, to prove two views of one log are equal."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Protocol

from metastore.persistence.rocksdb import Snapshot
from metastore.persistence.rocksdb_layout import DATA_PREFIXES


class Snapshots(Protocol):
    """Anything that hands out consistent readers of a view's database (``ViewStore``)."""

    def snapshot(self) -> AbstractContextManager[Snapshot]: ...


def digest(store: Snapshots) -> str:
    """The ``fingerprint`` of a view, read from one RocksDB snapshot."""
    with store.snapshot() as snapshot:
        return fingerprint(snapshot.items)


def fingerprint(items: Callable[[bytes], Iterable[tuple[bytes, bytes]]]) -> str:
    """SHA-256 over every object, ref and updateable (keys and stored values, in key
    order); ``items(prefix)`` yields the pairs under a prefix in key order. Offsets,
    barriers and counters are not part of it: two nodes that read the same log at
    different speeds agree, and a job that applies the log into a dict can compare
    its result with a node's view."""
    sha = hashlib.sha256()
    for prefix in DATA_PREFIXES:
        sha.update(b"section" + prefix)
        for key, value in items(prefix):
            sha.update(len(key).to_bytes(4, "big") + key)
            sha.update(len(value).to_bytes(4, "big") + value)
    return sha.hexdigest()
