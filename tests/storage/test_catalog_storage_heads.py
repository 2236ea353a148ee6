"""The storage a catalog has at each HEAD (``CatalogStorage.of``): read from its record
when HEAD's commit changed the record, inherited from the parent's otherwise, and
never stale: a storage update is seen by the very next read, whatever came between."""

from __future__ import annotations

from pathlib import Path

import pytest

from metastore.catalog.service import Metastore
from metastore.model.changes import CreateEntity
from metastore.model.keys import EntityKey
from metastore.model.records import Entity
from metastore.storage.catalog_storage import CatalogStorage, NodeStorage
from metastore.storage.credentials import CredentialSources
from metastore.storage.settings import seeded

TENANT, CATALOG = "t1", "c1"


class Counted(CatalogStorage):
    """The real catalog storage, counting its reads of the storage record."""

    reads = 0

    def recorded(self, tenant: str, catalog: str, at: int | None = None) -> Entity | None:
        self.reads += 1
        return super().recorded(tenant, catalog, at)


async def _namespace(service: Metastore, name: str) -> None:
    await service.change(
        TENANT, CATALOG, (CreateEntity(EntityKey.namespace_key((name,))),), "test", "ns"
    )


@pytest.fixture
async def storages(service: Metastore, tmp_path: Path) -> Counted:
    await service.create_tenant(TENANT, {}, "test")
    await service.create_catalog(TENANT, CATALOG, {}, "test")
    node = NodeStorage((tmp_path / "w").as_uri(), {}, None, CredentialSources({}))
    return Counted(service, node)


async def test_a_commit_that_leaves_storage_alone_inherits_it_unread(
    service: Metastore, storages: Counted, tmp_path: Path
) -> None:
    first = seeded((tmp_path / "a").as_uri(), {}, None)
    await storages.update(TENANT, CATALOG, first, None, "test", None)
    at_update = storages.of(TENANT, CATALOG)
    assert at_update.root == first.root and at_update.version == 1
    reads = storages.reads
    for i in range(3):  # HEAD moves; the record does not
        await _namespace(service, f"n{i}")
        assert storages.of(TENANT, CATALOG) is at_update
    assert storages.reads == reads

    second = seeded((tmp_path / "b").as_uri(), {}, None)
    await storages.update(TENANT, CATALOG, second, 1, "test", None)
    changed = storages.of(TENANT, CATALOG)
    assert changed.root == second.root and changed.version == 2  # read again, at once
    assert storages.reads == reads + 2  # once by update (its expected version), once here
    await _namespace(service, "after")
    assert storages.of(TENANT, CATALOG) is changed
    assert storages.reads == reads + 2


async def test_a_head_whose_parent_was_never_read_reads_the_record(
    service: Metastore, storages: Counted, tmp_path: Path
) -> None:
    storage = seeded((tmp_path / "a").as_uri(), {}, None)
    await storages.update(TENANT, CATALOG, storage, None, "test", None)
    await _namespace(service, "n")
    fresh = Counted(service, storages.node)  # another node's view: nothing kept yet
    assert fresh.of(TENANT, CATALOG).root == storage.root
    assert fresh.reads == 1


async def test_a_catalog_without_a_record_keeps_its_seed_across_commits(
    service: Metastore, storages: Counted
) -> None:
    seed = storages.of(TENANT, CATALOG)
    assert seed.version == 0
    await _namespace(service, "n")
    assert storages.of(TENANT, CATALOG) is seed
