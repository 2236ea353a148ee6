"""Iceberg table and view services on the real engine: off the event loop, and rebased.

The services run on the real engine over the memory backend, with an object cache
that keeps nothing, so every read of an entity, index or metadata piece reaches the
backend; the backend notes the thread of each read, and can let "another process"
commit just before a write (``FaultyPersistence``), so that the write loses its
``AssertVersion`` and the request is redone on the fresh state.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from pyiceberg.schema import Schema
from pyiceberg.table.update import AddSchemaUpdate, AssertTableUUID, SetPropertiesUpdate
from pyiceberg.types import LongType, NestedField, StringType
from pyiceberg.view.metadata import SQLViewRepresentation, ViewVersion

from metastore.catalog.service import Metastore, catalog_ref
from metastore.engine.commits import CommitRequest, EngineLimits
from metastore.engine.committer import Committer
from metastore.engine.lanes import CommitLanes
from metastore.engine.object_cache import ObjectCache
from metastore.errors import CommitConflict
from metastore.iceberg.files import Warehouse
from metastore.iceberg.table_state import REBASES, TableChange, table_key
from metastore.iceberg.tables import Tables
from metastore.iceberg.view_updates import AddViewVersionUpdate, SetCurrentViewVersionUpdate
from metastore.iceberg.views import CommitViewRequest, CreateViewRequest, Views
from metastore.model.changes import CreateEntity, UpdateEntity
from metastore.model.codec import default_codec
from metastore.model.ids import SnowflakeGenerator
from metastore.model.keys import EntityKey, Kind, ObjKey
from metastore.persistence.base import StoredObject
from metastore.storage.catalog_storage import CatalogStorage, NodeStorage
from metastore.storage.credentials import CredentialSources
from metastore.util.clock import ManualClock
from tests.builders import SMALL_INDEX, FaultyPersistence

TENANT, CATALOG = "t1", "c1"
DB = ("db",)
NOW_US = 1_767_225_600_123_456
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))
VIEW = EntityKey(Kind.VIEW, DB, "v")
TABLE = table_key(DB, "t")


class ReadThreads(FaultyPersistence):
    """The memory backend with faults, noting which thread read objects while ``watching``."""

    def __init__(self) -> None:
        super().__init__()
        self.watching = False
        self.threads: set[int] = set()

    def get_objects(self, keys: Sequence[ObjKey]) -> list[StoredObject | None]:
        if self.watching:
            self.threads.add(threading.get_ident())
        return super().get_objects(keys)


class Stack:
    def __init__(
        self,
        persistence: ReadThreads,
        metastore: Metastore,
        other: Committer,
        tables: Tables,
        views: Views,
        warehouse: Path,
    ) -> None:
        self.persistence = persistence
        self.metastore = metastore
        self.other = other  # another process's committer on the same backend
        self.tables = tables
        self.views = views
        self.warehouse = warehouse
        self.interfered = 0

    def reads_on_the_loop(self) -> bool:
        return threading.get_ident() in self.persistence.threads

    def interfere(self, key: EntityKey, times: int) -> None:
        """Just before each of the next ``times`` writes, another process sets a property
        of ``key`` (keeping its Iceberg metadata), so that the write loses its
        ``AssertVersion``. (A batch whose requirement fails writes nothing, so each
        write is one attempt of the request.)"""

        def hook() -> None:
            entity = self.metastore.get_entity(TENANT, CATALOG, key)
            self.interfered += 1
            other = {"other": str(self.interfered)}
            change = UpdateEntity(key, other, attachments=entity.attachments)
            self.other.commit(catalog_ref(TENANT, CATALOG), CommitRequest(changes=(change,)))
            if self.interfered < times:
                self.persistence.before_write = hook

        self.persistence.before_write = hook

    def metadata_files(self, key: EntityKey) -> list[str]:
        return sorted(p.name for p in self.warehouse.rglob(f"{key.name}/metadata/*.json"))


def _committer(persistence: ReadThreads, metastore: list[Metastore], node_id: int) -> Committer:
    clock = ManualClock(NOW_US)
    return Committer(
        persistence,
        default_codec(),
        lambda tenant, catalog: metastore[0].objects(tenant, catalog),
        SnowflakeGenerator(node_id, clock),
        clock,
        EngineLimits(index=SMALL_INDEX),
        require_tenant=True,
    )


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    persistence = ReadThreads()
    codec = default_codec()
    holder: list[Metastore] = []
    with ThreadPoolExecutor(2, thread_name_prefix="commit") as executor:
        lanes = CommitLanes(_committer(persistence, holder, 1), executor)
        metastore = Metastore(persistence, codec, ObjectCache(0), lanes)  # caches nothing
        holder.append(metastore)
        await metastore.create_tenant(TENANT, {}, "test")
        await metastore.create_catalog(TENANT, CATALOG, {}, "test")
        namespace = CommitRequest(changes=(CreateEntity(EntityKey.namespace_key(DB)),))
        await metastore.commit(TENANT, CATALOG, namespace)
        warehouse = tmp_path / "warehouse"
        node = NodeStorage(warehouse.as_uri(), {}, None, CredentialSources({}))
        files = Warehouse(CatalogStorage(metastore, node))
        tables = Tables(metastore, codec, files)
        views = Views(metastore, codec, files, tables, ManualClock(NOW_US))
        other = _committer(persistence, holder, 2)
        yield Stack(persistence, metastore, other, tables, views, warehouse)
        await lanes.close()


async def _create_table(stack: Stack) -> str:
    tables = stack.tables  # metadata and its location are made in a thread, as the route does
    metadata = await asyncio.to_thread(
        tables.new_metadata, TENANT, CATALOG, TABLE, SCHEMA, None, None, None, {}
    )
    location = await asyncio.to_thread(tables.warehouse.new_metadata_location, metadata, None)
    await tables.create(TENANT, CATALOG, TABLE, metadata, "test", location, may_read=lambda _: True)
    return str(metadata.table_uuid)


def _table_change(uuid: str) -> TableChange:
    wider = Schema(
        *SCHEMA.fields, NestedField(2, "name", StringType(), required=False), schema_id=1
    )
    return TableChange(
        TABLE,
        (AssertTableUUID(uuid=uuid),),
        (AddSchemaUpdate(schema=wider), SetPropertiesUpdate(updates={"k": "v"})),
    )


def _version(sql: str) -> ViewVersion:
    return ViewVersion(
        version_id=1,
        schema_id=0,
        timestamp_ms=1,
        summary={"engine": "test"},
        representations=[SQLViewRepresentation(type="sql", sql=sql, dialect="spark")],
        default_namespace=list(DB),
    )


async def _create_view(stack: Stack) -> None:
    body = CreateViewRequest(
        name=VIEW.name, schema=SCHEMA, view_version=_version("SELECT 1"), properties={}
    )
    await stack.views.create(TENANT, CATALOG, VIEW, body, "test")


REPLACE = CommitViewRequest(
    updates=[
        AddViewVersionUpdate(view_version=_version("SELECT 2")),
        SetCurrentViewVersionUpdate(view_version_id=-1),
    ]
)


# --- off the event loop ------------------------------------------------------------------


async def test_table_create_commit_and_drop_read_the_store_off_the_loop(stack: Stack) -> None:
    stack.persistence.watching = True
    uuid = await _create_table(stack)
    (result,) = await stack.tables.commit(
        TENANT, CATALOG, [_table_change(uuid)], "test", may_read=lambda _: True
    )
    properties = result["metadata"]["properties"]
    assert properties == {"k": "v", "write.parquet.compression-codec": "zstd"}  # + the default
    await stack.tables.drop(TENANT, CATALOG, TABLE, purge=True, principal="test")
    assert stack.persistence.threads  # the reads were seen...
    assert not stack.reads_on_the_loop()  # ...and none of them on the loop


async def test_view_create_and_replace_read_the_store_off_the_loop(stack: Stack) -> None:
    stack.persistence.watching = True
    await _create_view(stack)
    result = await stack.views.replace(TENANT, CATALOG, VIEW, REPLACE, "test")
    assert result["metadata"]["current-version-id"] == 2
    # the version log entry carries the time of the clock the service was given
    assert result["metadata"]["version-log"][-1]["timestamp-ms"] == NOW_US // 1000
    assert stack.persistence.threads
    assert not stack.reads_on_the_loop()


# --- rebased on a lost AssertVersion -------------------------------------------------------


async def test_a_view_replace_that_lost_to_another_commit_is_redone_on_its_result(
    stack: Stack,
) -> None:
    await _create_view(stack)
    stack.interfere(VIEW, times=2)
    result = await stack.views.replace(TENANT, CATALOG, VIEW, REPLACE, "test")
    assert stack.interfered == 2
    assert result["metadata"]["current-version-id"] == 2
    assert result["metadata"]["properties"] == {"other": "2"}  # the other commit's, kept
    assert stack.views.load(TENANT, CATALOG, VIEW) == result
    # the metadata files of the two lost attempts are gone: the create's and the last
    assert len(stack.metadata_files(VIEW)) == 2


async def test_a_view_replace_gives_up_after_the_rebase_attempts(stack: Stack) -> None:
    await _create_view(stack)
    before = stack.views.load(TENANT, CATALOG, VIEW)
    stack.interfere(VIEW, times=1000)
    with pytest.raises(CommitConflict):
        await stack.views.replace(TENANT, CATALOG, VIEW, REPLACE, "test")
    stack.persistence.before_write = None
    assert REBASES.max_attempts is not None and stack.interfered == REBASES.max_attempts
    assert stack.views.load(TENANT, CATALOG, VIEW)["metadata"]["current-version-id"] == 1
    assert stack.metadata_files(VIEW) == [Path(before["metadata-location"]).name]


async def test_a_table_commit_gives_up_after_the_rebase_attempts(stack: Stack) -> None:
    uuid = await _create_table(stack)
    stack.interfere(TABLE, times=1000)
    with pytest.raises(CommitConflict):
        await stack.tables.commit(
            TENANT, CATALOG, [_table_change(uuid)], "test", may_read=lambda _: True
        )
    stack.persistence.before_write = None
    assert stack.interfered == REBASES.max_attempts
    assert len(stack.metadata_files(TABLE)) == 1  # the create's: every attempt's was deleted
