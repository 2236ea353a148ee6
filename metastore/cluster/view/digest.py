"""A stable fingerprint of a view's data, to prove two views of one log are equal."""

from __future__ import annotations

import hashlib
from typing import Any

from metastore.cluster.view.store import ViewStore
from metastore.persistence.rocksdb import OBJ, REF, UPD


def digest(store: ViewStore) -> str:
    """SHA-256 over every object, ref and updateable (keys and stored values, in key
    order), read from one RocksDB snapshot. Offsets, barriers and counters are not
    part of it: two nodes that read the same log at different speeds agree."""
    sha = hashlib.sha256()
    snapshot: Any = store._live().snapshot()
    try:
        for prefix in (OBJ, REF, UPD):
            sha.update(b"section" + prefix)
            it: Any = snapshot.iter()
            try:
                it.seek(prefix)
                while it.valid():
                    key: bytes = it.key()
                    if not key.startswith(prefix):
                        break
                    value: bytes = it.value()
                    sha.update(len(key).to_bytes(4, "big") + key)
                    sha.update(len(value).to_bytes(4, "big") + value)
                    it.next()
            finally:
                del it
    finally:
        del snapshot
    return sha.hexdigest()
