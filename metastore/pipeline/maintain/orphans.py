"""Files under a set of roots that nothing references: a warehouse listing anti-joined
with a reachable set, in Spark.

``listing`` walks each root in its own Spark task (a local one itself, below; others
with pyarrow's filesystems: ``s3://``, ``gs://``, ``hdfs://``, ... with the root's
FileIO-style properties) and
keeps files last modified before a cut-off, so a file a writer has just written and
not yet committed is never taken for an orphan. ``orphans`` anti-joins the listing
with the reachable paths. Both sides are compared by their normalized location
(``metastore.model.locations``: ``/a/b`` and ``file:///a/b`` are one file), and every
listed file is checked to lie inside the root it was listed under, symlinks
resolved, so a link out of a table's location is never offered for deletion.

A local root is walked without following symbolic links (``walk_regular_files``):
pyarrow's recursive listing follows them, so a link to ``/`` in one table's folder
listed the whole machine, and two links back to the folder made the listing
exponential (it had not finished after 30 s with 3 files in the folder), holding the
job of every tenant. Only regular files are listed; a link is never an orphan.

Used by ``metastore maintain`` (roots: tables' locations; reachable: everything their
metadata references) and reusable for any warehouse collection.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from metastore.errors import BadRequest
from metastore.model.locations import is_inside, normalize

LISTING_DDL = "root string, path string, key string, size bigint, modified_ms bigint"
PATHS_DDL = "key string"


@dataclass(frozen=True, slots=True)
class Root:
    """A directory to list, with the properties its filesystem needs (credentials,
    endpoint: the catalog's storage properties)."""

    location: str
    properties: Mapping[str, str]


def path_key(path: str) -> str | None:
    """The normalized location ``path`` is compared by; None if it is malformed."""
    try:
        return normalize(path, "path", file=True).key
    except BadRequest:
        return None


def list_root(root: Root, older_than_ms: int) -> Iterator[tuple[str, str, str, int, int]]:
    """Every regular file below ``root`` modified before ``older_than_ms``, as a
    ``LISTING_DDL`` row; a root that does not exist lists nothing."""
    prefix = _uri_prefix(root.location)
    for name, size, modified_ms in _files(root):
        if modified_ms >= older_than_ms:
            continue
        path = prefix + name
        key = path_key(path)
        if key is None or not is_inside(path, root.location, resolve=True):
            continue
        yield root.location, path, key, size, modified_ms


def _files(root: Root) -> Iterator[tuple[str, int, int]]:
    """``(path, size, modified_ms)`` of each file below the root, in its filesystem's
    own spelling (no scheme)."""
    location = normalize(root.location, "root")
    if location.scheme == "file":
        yield from walk_regular_files(location.local_path())
        return
    from pyarrow import fs

    filesystem, base = _filesystem(root)
    selector = fs.FileSelector(base, recursive=True, allow_not_found=True)
    for info in filesystem.get_file_info(selector):
        if info.type == fs.FileType.File and info.mtime is not None:
            yield info.path, int(info.size or 0), int(info.mtime.timestamp() * 1000)


def walk_regular_files(base: str) -> Iterator[tuple[str, int, int]]:
    """``(path, size, modified_ms)`` of every regular file below ``base``, never through
    a symbolic link; a ``base`` that does not exist holds none."""
    folders = [base]
    while folders:
        folder = folders.pop()
        try:
            entries = os.scandir(folder)
        except (FileNotFoundError, NotADirectoryError):
            continue  # the root is not there (yet), or went away while we listed
        with entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    folders.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    stat = entry.stat(follow_symlinks=False)
                    yield entry.path, stat.st_size, stat.st_mtime_ns // 1_000_000


def _filesystem(root: Root) -> tuple[Any, str]:
    from pyarrow import fs

    location = normalize(root.location, "root")
    if location.scheme in ("s3", "s3a", "s3n"):
        props = root.properties
        filesystem = fs.S3FileSystem(
            access_key=props.get("s3.access-key-id"),
            secret_key=props.get("s3.secret-access-key"),
            session_token=props.get("s3.session-token"),
            region=props.get("s3.region"),
            endpoint_override=props.get("s3.endpoint"),
        )
        return filesystem, f"{location.authority}/{'/'.join(location.segments)}"
    found: tuple[Any, str] = fs.FileSystem.from_uri(root.location)
    return found


def _uri_prefix(location: str) -> str:
    parsed = normalize(location, "root")
    if parsed.scheme == "file":
        return "file://"
    if parsed.scheme in ("s3", "s3a", "s3n"):
        return f"{parsed.scheme}://"
    return f"{parsed.scheme}://{parsed.authority}"


def _list_partition(older_than_ms: int, roots: Iterable[Root]) -> Iterator[tuple[Any, ...]]:
    for root in roots:
        yield from list_root(root, older_than_ms)


def listing(spark: SparkSession, roots: list[Root], older_than_ms: int) -> DataFrame:
    """The files below ``roots`` older than ``older_than_ms`` (``LISTING_DDL``), the
    roots spread over a few tasks per core. Nested roots list a file once per root
    that holds it."""
    context = spark.sparkContext
    if not roots:
        return spark.createDataFrame([], LISTING_DDL)
    slices = min(len(roots), context.defaultParallelism * 4)
    rdd = context.parallelize(roots, slices).mapPartitions(
        lambda part: _list_partition(older_than_ms, part)
    )
    return spark.createDataFrame(rdd, LISTING_DDL)


def reachable_frame(spark: SparkSession, paths: Iterable[str]) -> DataFrame:
    """A reachable set given on the driver, as a frame of normalized keys."""
    keys = {key for key in map(path_key, paths) if key is not None}
    return spark.createDataFrame([(key,) for key in sorted(keys)], PATHS_DDL)


def orphans(listed: DataFrame, reachable: DataFrame) -> DataFrame:
    """The listed files whose key is not in ``reachable`` (a frame with a ``key``
    column): the anti-join, distinct by path."""
    return listed.join(
        reachable.select("key").distinct(), on="key", how="left_anti"
    ).dropDuplicates(["path"])
