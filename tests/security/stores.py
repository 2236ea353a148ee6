"""The real commit engine on a stopped node's data directory (tests only)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from harness.engine import build_engine
from metastore.engine.commits import CommitRequest
from metastore.model.changes import Change
from metastore.model.keys import SYSTEM_CATALOG, Kind
from metastore.persistence.rocksdb import RocksDBPersistence
from metastore.security.signing import TOKEN_KEYS, KeyRing


class OfflineStore:
    """The real engine on a stopped node's RocksDB: reads and writes the default tenant's
    system records as the node would (to see what it stored, or to write what an
    earlier version left)."""

    def __init__(self, data_dir: Path, executor: ThreadPoolExecutor) -> None:
        self.persistence = RocksDBPersistence(data_dir / "rocksdb")
        self.metastore, self.lanes = build_engine(self.persistence, executor, node_id=1023)

    def commit(self, *changes: Change) -> None:
        request = CommitRequest(changes=changes, principal="system", operation="offline write")

        async def write() -> None:
            await self.metastore.commit("default", SYSTEM_CATALOG, request)
            await self.lanes.close()

        asyncio.run(write())

    def system_names(self) -> set[str]:
        page = self.metastore.list_entities("default", SYSTEM_CATALOG, (), Kind.SYSTEM)
        return {entity.path[-1] for entity in page.items}

    def key_ring(self) -> KeyRing:
        entity = self.metastore.get_entity("default", SYSTEM_CATALOG, TOKEN_KEYS)
        return KeyRing.of(entity.properties)


@contextmanager
def offline_store(data_dir: Path) -> Iterator[OfflineStore]:
    with ThreadPoolExecutor(max_workers=1) as executor:
        store = OfflineStore(data_dir, executor)
        try:
            yield store
        finally:
            store.persistence.close()
