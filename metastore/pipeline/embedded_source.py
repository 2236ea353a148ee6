"""The embedded source: a store directory opened read-only, read by catalog in tasks.

The directory is a checkpoint a running node took on request (the usual case: the
node keeps serving and the job never touches its live database), or the store of a
stopped node. The driver lists the catalogs (one short scan of the refs) and spreads
them over Spark tasks; each task opens the directory read-only itself and reads its
catalogs' key ranges (refs, objects, updateables), so a catalog's rows always land
in one partition.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pyspark import RDD
from pyspark.sql import SparkSession
from rocksdict import AccessType, Options, Rdict

from metastore.model.keys import catalog_prefix
from metastore.persistence.rocksdb_layout import DATA_PREFIXES, FORMAT, FORMAT_KEY, REF
from metastore.pipeline.exits import JobError
from metastore.pipeline.options import Scope
from metastore.pipeline.progress import Progress
from metastore.pipeline.rows import CatalogId, Row, catalog_of

TASKS_PER_CORE = 4  # small tasks balance uneven catalogs


def open_read_only(path: Path) -> Rdict:
    """The store at ``path`` opened read-only; ``JobError`` if it is not a store."""
    try:
        is_dir, has_database = path.is_dir(), (path / "CURRENT").is_file()
    except OSError as exc:  # a name too long for the file system, a denied directory
        raise JobError(f"--data-dir cannot be used: {exc.strerror}") from None
    if not is_dir:
        raise JobError(f"{path} is not a directory")
    if not has_database:
        raise JobError(f"{path} is not a metastore store (no RocksDB database in it)")
    try:
        db = Rdict(str(path), Options(raw_mode=True), access_type=AccessType.read_only())
    except Exception as exc:  # rocksdict raises plain exceptions for RocksDB errors
        raise JobError(f"{path}: cannot open the RocksDB database read-only ({exc})") from None
    found = db.get(FORMAT_KEY)
    if found != FORMAT:
        db.close()
        what = "no format marker" if found is None else f"format {found!r}"
        raise JobError(f"{path} is not a metastore store this release reads ({what})")
    return db


def scan(db: Rdict, prefix: bytes) -> Iterator[Row]:
    it: Any = db.iter()
    try:
        it.seek(prefix)
        while it.valid():
            key: bytes = it.key()
            if not key.startswith(prefix):
                return
            yield key, it.value()
            it.next()
    finally:
        del it


def catalogs(db: Rdict) -> list[CatalogId]:
    """Every catalog with a ref (a tenant's own records as catalog ""), in key order."""
    found: dict[CatalogId, None] = {}
    for key, _ in scan(db, REF):
        catalog = catalog_of(key)
        if catalog is not None:
            found[catalog] = None
    return list(found)


def read_catalogs(path: str, group: Sequence[CatalogId]) -> Iterator[Row]:
    """Inside a task: every data row of the catalogs of ``group``, catalog by catalog."""
    db = open_read_only(Path(path))
    try:
        for tenant, catalog in group:
            prefix = catalog_prefix(tenant, catalog)
            for data in DATA_PREFIXES:
                yield from scan(db, data + prefix)
    finally:
        db.close()


def spread(items: Sequence[CatalogId], groups: int) -> list[list[CatalogId]]:
    """``items`` dealt round-robin into at most ``groups`` non-empty groups."""
    count = max(1, min(groups, len(items)))
    dealt: list[list[CatalogId]] = [[] for _ in range(count)]
    for i, item in enumerate(items):
        dealt[i % count].append(item)
    return [group for group in dealt if group]


class EmbeddedSource:
    def __init__(self, path: Path, *, on_close: Any = None) -> None:
        self.path = path.resolve()
        self._on_close = on_close
        db = open_read_only(self.path)
        try:
            self._catalogs = catalogs(db)
        finally:
            db.close()

    def describe(self) -> str:
        return f"store {self.path}"

    def check(self, scope: Scope) -> None:
        if scope.tenant is None:
            return
        if (scope.tenant, "") not in self._catalogs:
            raise JobError(f"unknown tenant {scope.tenant!r} in {self.describe()}")
        if scope.catalog is not None and (scope.tenant, scope.catalog) not in self._catalogs:
            raise JobError(
                f"unknown catalog {scope.catalog!r} of tenant {scope.tenant!r} in {self.describe()}"
            )

    def catalogs(self, scope: Scope) -> list[CatalogId]:
        return [c for c in self._catalogs if scope.covers(*c)]

    def rows(self, spark: SparkSession, scope: Scope, progress: Progress) -> RDD[Row]:
        context = spark.sparkContext
        groups = spread(self.catalogs(scope), context.defaultParallelism * TASKS_PER_CORE)
        path, records = str(self.path), progress.records

        def read(group: list[CatalogId]) -> Iterator[Row]:
            count = 0
            for row in read_catalogs(path, group):
                count += 1
                yield row
            records.add(count)

        return context.parallelize(groups, len(groups) or 1).flatMap(read)

    def close(self) -> None:
        if self._on_close is not None:
            self._on_close()
