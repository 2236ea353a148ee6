"""The storage of each catalog, as both APIs use it: read, seeded, checked, recorded.

A catalog's storage is its ``storage`` record (``metastore.storage.settings``), written
in the catalog's own commits, so every node reads the same one. A node's
``METASTORE_WAREHOUSE`` / ``METASTORE_WAREHOUSE_IO`` only seed the storage of a
catalog created without one (``<warehouse>/<tenant>/<catalog>``), and of a
catalog created before storage was recorded: ``record_missing`` writes that seed
once, on the first start of a node that knows storage records; until then the
catalog reads as its seed, which is what the node used before.

What storage a client may give a catalog (``check``) is bounded by this node:

- every prefix lies inside ``METASTORE_STORAGE_ROOTS`` when that is set;
- no ``file://`` prefix contains this node's data directory or lies inside it
  (except its default warehouse, ``<data dir>/warehouse``): RocksDB lives there;
- no prefix equals, contains or lies inside a prefix of another catalog (of any
  tenant), so a purge in one catalog never reaches another's files. This is
  checked against this node's view when the storage is written: two catalogs
  given overlapping storage at the same moment can both pass (they are separate
  refs with no common commit), a gap the maintenance audit must report;
- the credentials a client names must resolve on the node that writes the record.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from metastore.catalog.service import Metastore
from metastore.engine.commits import CommitOutcome, CommitRequest, Record
from metastore.errors import (
    AlreadyExists,
    BadRequest,
    CommitConflict,
    NoSuchCatalog,
    NoSuchTenant,
    NotFound,
    NotOwner,
    ServiceUnavailable,
    StorageUnavailable,
)
from metastore.model.changes import Change, CreateEntity, UpdateEntity
from metastore.model.keys import MAIN_REF
from metastore.model.locations import Location, catalog_root, is_inside
from metastore.model.records import Entity
from metastore.model.requirements import AssertNotExists, AssertVersion, Requirement
from metastore.storage import io_rules
from metastore.storage.credentials import Credentials, CredentialSources
from metastore.storage.remote_signing import ON_REQUEST, RemoteSigning
from metastore.storage.settings import STORAGE_RECORD, Storage, seeded
from metastore.storage.vending import VendingSettings
from metastore.util.lru import Lru
from metastore.util.retry import RetryPolicy

log = logging.getLogger(__name__)
# Waiting for the owners (cluster mode) of catalogs without a storage record.
RECORD_RETRY = RetryPolicy(0.1, 2.0)
STORAGES_AT_HEADS = 256  # (catalog, HEAD) pairs whose storage is kept
_STORAGE_KEY = STORAGE_RECORD.encode()


@dataclass(frozen=True, slots=True)
class NodeStorage:
    """What this node contributes: the seed, where it finds secrets, its bounds."""

    warehouse_root: str
    io_properties: dict[str, str]
    credentials: Credentials | None
    sources: CredentialSources
    roots: tuple[Location, ...] = ()
    data_dir: Path | None = None
    vending: VendingSettings | None = None
    remote_signing: RemoteSigning = ON_REQUEST


class CatalogStorage:
    def __init__(self, metastore: Metastore, node: NodeStorage) -> None:
        self._metastore = metastore
        self.node = node
        # the storage at each recent HEAD, by (tenant, catalog, HEAD commit id): what a
        # commit holds never changes, and a request reads its catalog's storage 2-4 times
        self._at_head: Lru[tuple[str, str, int], Storage] = Lru(STORAGES_AT_HEADS)

    # --- reads -------------------------------------------------------------------------

    def of(self, tenant: str, catalog: str) -> Storage:
        """The catalog's storage at HEAD (its seed if none is recorded yet). Every call
        reads HEAD (404 for an unknown catalog); the record is read and parsed only when
        HEAD's commit changed it, or when its parent's storage is not kept here."""
        head = self._metastore.get_ref(tenant, catalog).head
        key = (tenant, catalog, head)
        storage = self._at_head.get(key)
        if storage is None:
            storage = self._inherited(tenant, catalog, head)
            if storage is None:
                entity = self.recorded(tenant, catalog, head)
                if entity is None:
                    storage = self.seed(tenant, catalog)
                else:
                    storage = Storage.from_properties(entity.properties, entity.version)
            storage = self._at_head.put(key, storage)
        return storage

    def _inherited(self, tenant: str, catalog: str, head: int) -> Storage | None:
        """The storage of ``head``'s parent when that is kept and ``head`` left the record
        as it was: nearly every commit moves HEAD without touching storage, and reading
        the record at each new HEAD cost a create or commit step a few percent of its
        CPU. A commit lists every entity it created, updated or deleted (``changes``;
        only location records, never the storage record, are left out), so this is
        exactly the record a read at ``head`` would find."""
        try:
            commit = self._metastore.objects(tenant, catalog).commit(head)
        except NotFound:  # no commit yet, or one collected: read the record instead
            return None
        if not commit.parent:
            return None
        parent = self._at_head.get((tenant, catalog, commit.parent))
        if parent is None or any(change.key == _STORAGE_KEY for change in commit.changes):
            return None
        return parent

    def recorded(self, tenant: str, catalog: str, at: int | None = None) -> Entity | None:
        """The catalog's storage record at HEAD (or at commit ``at``), if it has one."""
        try:
            return self._metastore.get_entity(tenant, catalog, STORAGE_RECORD, at)
        except (NoSuchTenant, NoSuchCatalog):
            raise
        except NotFound:
            return None

    def seed(self, tenant: str, catalog: str) -> Storage:
        root = catalog_root(self.node.warehouse_root, tenant, catalog)
        node = self.node
        return seeded(root, node.io_properties, node.credentials, node.vending, node.remote_signing)

    def io_properties(self, storage: Storage) -> dict[str, str]:
        """The FileIO properties of ``storage`` with its secrets, read now (blocking);
        ``StorageUnavailable`` when this node lacks them."""
        secrets = storage.credentials.resolve(self.node.sources) if storage.credentials else {}
        return {**storage.io_properties, **secrets}

    # --- writes ------------------------------------------------------------------------

    def check(
        self,
        tenant: str,
        catalog: str,
        storage: Storage,
        *,
        given: bool,
        own_tenant: bool = False,
        current: Storage | None = None,
    ) -> None:
        """``storage`` may be the catalog's (see the module docstring); 400 otherwise.
        ``given``: a client named it (its credentials must resolve here); ``own_tenant``:
        one who is no service admin named it, so inside this node's warehouse it must lie
        in the tenant's own folder (``<warehouse>/<tenant>``, where the node seeds the
        tenant's catalogs): elsewhere in it, another tenant's catalogs, those made later
        included, would overlap it and be refused, and whether a path overlapped one would
        tell what catalogs another tenant has; and where the node connects and as whom
        stays this node's, or as the catalog's ``current`` storage has it (what a service
        admin chose: ``io_rules.check_own``). Blocking."""
        for prefix in storage.locations():
            self._check_bounds(prefix)
            if own_tenant:
                self._check_tenant_folder(tenant, prefix)
        if own_tenant:
            kept = current.io_properties if current is not None else {}
            io_rules.check_own(storage.io_properties, self.node.io_properties, kept)
        clash = self._overlap(tenant, catalog, storage.locations())
        if clash is not None:
            raise BadRequest(clash)
        if given and storage.credentials is not None:
            try:
                storage.credentials.resolve(self.node.sources)
            except StorageUnavailable as exc:
                raise BadRequest(exc.message) from None

    def _check_bounds(self, prefix: Location) -> None:
        roots = self.node.roots
        if roots and not any(is_inside(prefix, root, allow_equal=True) for root in roots):
            allowed = ", ".join(str(root) for root in roots)
            raise BadRequest(
                f"storage location {prefix} is outside this deployment's storage roots"
                f" ({allowed}; METASTORE_STORAGE_ROOTS)"
            )
        data_dir = self.node.data_dir
        if prefix.scheme != "file" or data_dir is None:
            return
        data = data_dir.as_uri()
        warehouse = data_dir.joinpath("warehouse").as_uri()
        if is_inside(data, prefix, allow_equal=True, resolve=True) or (
            is_inside(prefix, data, allow_equal=True, resolve=True)
            and not is_inside(prefix, warehouse, allow_equal=True, resolve=True)
        ):
            raise BadRequest(
                f"storage location {prefix} overlaps this node's data directory"
                " (only its warehouse folder may hold table files)"
            )

    def _check_tenant_folder(self, tenant: str, prefix: Location) -> None:
        warehouse = self.node.warehouse_root
        if not is_inside(prefix, warehouse, allow_equal=True):
            return
        own = catalog_root(warehouse, tenant, "").rstrip("/")
        if not is_inside(prefix, own):
            raise BadRequest(
                f"storage location {prefix} is in this node's warehouse outside the "
                f"tenant's own folder {own}/: only a service admin may place it there"
            )

    def _overlap(self, tenant: str, catalog: str, prefixes: Sequence[Location]) -> str | None:
        """Why ``prefixes`` overlap another catalog's storage, if they do (a catalog of
        another tenant is not named: tenants do not learn of each other)."""
        for ref in self._metastore.persistence.scan_refs():
            key = ref.key
            if key.name != MAIN_REF or not key.catalog:
                continue
            if (key.tenant, key.catalog) == (tenant, catalog):
                continue
            try:
                theirs = self.of(key.tenant, key.catalog).locations()
            except (NotFound, BadRequest):  # deleted meanwhile, or an unreadable old root
                continue
            for mine in prefixes:
                if any(mine.within(other) or other.within(mine) for other in theirs):
                    whose = (
                        f"catalog {key.catalog!r}" if key.tenant == tenant else "another catalog"
                    )
                    return (
                        f"storage location {mine} overlaps the storage of {whose}:"
                        " catalogs keep their files apart"
                    )
        return None

    def create_changes(self, storage: Storage) -> tuple[Change, ...]:
        """The record a catalog's creation writes in its root commit."""
        return (CreateEntity(STORAGE_RECORD, storage.to_properties()),)

    async def update(
        self,
        tenant: str,
        catalog: str,
        storage: Storage,
        expected_version: int | None,
        principal: str,
        record: Record | None,
    ) -> CommitOutcome:
        """Replace the catalog's storage record (create it for a catalog without one),
        iff it is still at ``expected_version`` when given."""
        current = self.recorded(tenant, catalog)
        requirements: tuple[Requirement, ...] = ()
        change: Change
        if current is None:
            if expected_version is not None:
                raise CommitConflict(
                    "requirement failed: the catalog's storage is not recorded yet, expected"
                    f" version {expected_version}"
                )
            requirements = (AssertNotExists(STORAGE_RECORD),)
            change = CreateEntity(STORAGE_RECORD, storage.to_properties())
        else:
            if expected_version is not None:
                requirements = (AssertVersion(STORAGE_RECORD, expected_version),)
            change = UpdateEntity(STORAGE_RECORD, storage.to_properties())
        operation = "update catalog storage"
        return await self._metastore.change(
            tenant, catalog, (change,), principal, operation, requirements, record
        )

    # --- catalogs from before storage was recorded ------------------------------------

    async def record_missing(self, *, retry: bool) -> int:
        """Record the seed of every catalog that has no storage record (what it used
        until now); returns how many this node wrote. ``retry``: cluster mode, where only
        a catalog's owner can write and the owner may be another node: keep trying
        (backing off) until every such catalog has a record, by whichever node."""
        written = 0
        attempts = RECORD_RETRY.start()
        while True:
            waiting = 0
            refs = await asyncio.to_thread(lambda: list(self._metastore.persistence.scan_refs()))
            for ref in refs:
                tenant, catalog = ref.key.tenant, ref.key.catalog
                if ref.key.name != MAIN_REF or not catalog:
                    continue
                try:
                    written += await self._record_one(tenant, catalog)
                except (NotOwner, ServiceUnavailable) as exc:
                    if not retry:
                        raise
                    log.debug("storage of %s/%s waits: %s", tenant, catalog, exc.message)
                    waiting += 1
            if not waiting:
                return written
            await attempts.abackoff()  # unbounded: a node serves once every catalog has one

    async def _record_one(self, tenant: str, catalog: str) -> int:
        try:
            if await asyncio.to_thread(self.recorded, tenant, catalog) is not None:
                return 0
            storage = self.seed(tenant, catalog)
            request = CommitRequest(
                (AssertNotExists(STORAGE_RECORD),),
                self.create_changes(storage),
                "system",
                "record catalog storage",
            )
            await self._metastore.commit(tenant, catalog, request)
        except (NotFound, AlreadyExists, CommitConflict):  # deleted, or recorded meanwhile
            return 0
        log.info("recorded the storage of catalog %s/%s: %s", tenant, catalog, storage.root)
        return 1
