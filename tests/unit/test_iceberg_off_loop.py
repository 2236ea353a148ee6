"""Iceberg table and view services keep the event loop free: every store read runs in a thread.

The services run on the real engine over the memory backend, with an object cache
that keeps nothing, so every read of an entity, index or metadata piece reaches the
backend; the backend notes the thread of each read. Loop-side work is only the commit
itself (handed to the commit lanes' executor).
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from pyiceberg.schema import Schema
from pyiceberg.table.update import AddSchemaUpdate, AssertTableUUID, SetPropertiesUpdate
from pyiceberg.types import LongType, NestedField, StringType
from pyiceberg.view.metadata import SQLViewRepresentation, ViewVersion

from metastore.cache import ObjectCache
from metastore.catalog_storage import CatalogStorage, NodeStorage
from metastore.changes import CreateEntity
from metastore.clock import ManualClock
from metastore.codec import default_codec
from metastore.commits import CommitRequest, Committer, EngineLimits
from metastore.credentials import CredentialSources
from metastore.iceberg.files import Warehouse
from metastore.iceberg.tables import TableChange, Tables, table_key
from metastore.iceberg.view_updates import AddViewVersionUpdate, SetCurrentViewVersionUpdate
from metastore.iceberg.views import CommitViewRequest, CreateViewRequest, Views
from metastore.ids import SnowflakeGenerator
from metastore.keys import EntityKey, Kind, ObjKey
from metastore.lanes import CommitLanes
from metastore.persistence.base import StoredObject
from metastore.persistence.memory import MemoryPersistence
from metastore.service import Metastore
from tests.unit.conftest import SMALL_INDEX

TENANT, CATALOG = "t1", "c1"
DB = ("db",)
NOW_US = 1_767_225_600_123_456
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


class ReadThreads(MemoryPersistence):
    """The memory backend, noting which thread read objects while ``watching``."""

    def __init__(self) -> None:
        super().__init__()
        self.watching = False
        self.threads: set[int] = set()

    def get_objects(self, keys: Sequence[ObjKey]) -> list[StoredObject | None]:
        if self.watching:
            self.threads.add(threading.get_ident())
        return super().get_objects(keys)


class Stack:
    def __init__(self, persistence: ReadThreads, tables: Tables, views: Views) -> None:
        self.persistence = persistence
        self.tables = tables
        self.views = views

    def reads_on_the_loop(self) -> bool:
        return threading.get_ident() in self.persistence.threads


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    persistence = ReadThreads()
    codec, clock = default_codec(), ManualClock(NOW_US)
    holder: list[Metastore] = []
    committer = Committer(
        persistence,
        codec,
        lambda tenant, catalog: holder[0].objects(tenant, catalog),
        SnowflakeGenerator(1, clock),
        clock,
        EngineLimits(index=SMALL_INDEX),
    )
    with ThreadPoolExecutor(2, thread_name_prefix="commit") as executor:
        lanes = CommitLanes(committer, executor)
        metastore = Metastore(persistence, codec, ObjectCache(0), lanes)  # caches nothing
        holder.append(metastore)
        await metastore.create_tenant(TENANT, {}, "test")
        await metastore.create_catalog(TENANT, CATALOG, {}, "test")
        node = NodeStorage((tmp_path / "warehouse").as_uri(), {}, None, CredentialSources({}))
        warehouse = Warehouse(CatalogStorage(metastore, node))
        tables = Tables(metastore, codec, warehouse)
        views = Views(metastore, codec, warehouse, tables, clock)
        namespace = CommitRequest(changes=(CreateEntity(EntityKey.namespace_key(DB)),))
        await metastore.commit(TENANT, CATALOG, namespace)
        yield Stack(persistence, tables, views)
        await lanes.close()


async def test_table_create_commit_and_drop_read_the_store_off_the_loop(stack: Stack) -> None:
    key = table_key(DB, "t")
    tables = stack.tables
    metadata = tables.new_metadata(TENANT, CATALOG, key, SCHEMA, None, None, None, {})
    location = tables.warehouse.new_metadata_location(metadata, None)
    stack.persistence.watching = True
    await tables.create(TENANT, CATALOG, key, metadata, "test", location)
    wider = Schema(*SCHEMA.fields, NestedField(2, "name", StringType(), required=False))
    change = TableChange(
        key,
        (AssertTableUUID(uuid=metadata.table_uuid),),
        (AddSchemaUpdate(schema=wider), SetPropertiesUpdate(updates={"k": "v"})),
    )
    (result,) = await tables.commit(TENANT, CATALOG, [change], "test")
    assert result["metadata"]["properties"] == {"k": "v"}
    await tables.drop(TENANT, CATALOG, key, purge=True, principal="test")
    assert stack.persistence.threads  # the reads were seen...
    assert not stack.reads_on_the_loop()  # ...and none of them on the loop


def _version(sql: str) -> ViewVersion:
    return ViewVersion(
        version_id=1,
        schema_id=0,
        timestamp_ms=1,
        summary={"engine": "test"},
        representations=[SQLViewRepresentation(type="sql", sql=sql, dialect="spark")],
        default_namespace=list(DB),
    )


async def test_view_create_and_replace_read_the_store_off_the_loop(stack: Stack) -> None:
    key = EntityKey(Kind.VIEW, DB, "v")
    body = CreateViewRequest(
        name="v", schema=SCHEMA, view_version=_version("SELECT 1"), properties={}
    )
    stack.persistence.watching = True
    await stack.views.create(TENANT, CATALOG, key, body, "test")
    replace = CommitViewRequest(
        updates=[
            AddViewVersionUpdate(view_version=_version("SELECT 2")),
            SetCurrentViewVersionUpdate(view_version_id=-1),
        ]
    )
    result = await stack.views.replace(TENANT, CATALOG, key, replace, "test")
    assert result["metadata"]["current-version-id"] == 2
    # the version log entry carries the time of the clock the service was given
    assert result["metadata"]["version-log"][-1]["timestamp-ms"] == NOW_US // 1000
    assert stack.persistence.threads
    assert not stack.reads_on_the_loop()
