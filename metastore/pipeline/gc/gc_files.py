"""Metadata files in the warehouse that no live or retained table references.

A table's commits write a new ``*.metadata.json`` under ``<location>/metadata/``
each time; a commit that fails after writing its file, or a write another node
forwarded and then lost, leaves one behind that no table names. The mark gives,
per catalog, the locations of every reachable table and every metadata file a
reachable table version names (current file and metadata log); a file under one of
those locations' ``metadata/`` directory that is named by none and is older than
the grace period is an orphan.

Containment follows ``metastore.model.locations``: a file is only ever listed or deleted
if it lies inside the table's own location, in both readings of the path and by its
real path (symlinks); nothing outside a table's location is touched. Only
``file://`` warehouses are listed here (the other schemes have no listing in
PyIceberg's FileIO); their tables are counted as unlisted.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from metastore.errors import MetastoreError
from metastore.model.locations import is_inside, linked_below, normalize

log = logging.getLogger(__name__)

METADATA_DIR = "metadata"
METADATA_SUFFIX = ".metadata.json"


@dataclass(frozen=True, slots=True)
class OrphanFile:
    location: str  # the table location it lies in
    path: str  # normalized file:// path
    modified_us: int
    size: int


@dataclass
class Listing:
    orphans: list[OrphanFile]
    unlisted: int = 0  # table locations on a storage this job cannot list


def _normalized(path: str) -> str | None:
    try:
        return str(normalize(path, file=True))
    except MetastoreError:
        return None


def orphan_metadata_files(
    table_locations: Iterable[str],
    referenced: Iterable[str],
    older_than_us: int,
    storage_roots: Sequence[str] = (),
    spared: Iterable[str] = (),
) -> Listing:
    """The unreferenced metadata files older than ``older_than_us`` under the tables. A
    location reached through a symbolic link below its catalog's ``storage_roots`` is
    not listed (``locations.linked_below``: its folder is another one's) but counted
    as unlisted, and so is one at, inside or around a location of ``spared`` (the
    views': a table's past location a view stands at now holds the view's files)."""
    named = {n for n in (_normalized(p) for p in referenced) if n is not None}
    kept_out = []
    for raw in spared:
        try:
            kept_out.append(normalize(raw))
        except MetastoreError:
            continue
    listing = Listing([])
    seen: set[str] = set()
    for raw in sorted(set(table_locations)):
        try:
            location = normalize(raw)
        except MetastoreError:
            continue
        if location.scheme != "file":
            listing.unlisted += 1
            continue
        if linked_below(location, storage_roots):
            log.warning("gc: not listing %s: reached through a symbolic link", location)
            listing.unlisted += 1
            continue
        if any(location.within(view) or view.within(location) for view in kept_out):
            log.warning("gc: not listing %s: a view's location is at or inside it", location)
            listing.unlisted += 1
            continue
        directory = os.path.join(location.local_path(), METADATA_DIR)
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            if not entry.name.endswith(METADATA_SUFFIX) or not entry.is_file(follow_symlinks=False):
                continue
            path = _normalized(f"{str(location).rstrip('/')}/{METADATA_DIR}/{entry.name}")
            if path is None or path in named or path in seen:
                continue
            if not is_inside(path, location, resolve=True):
                continue
            stat = entry.stat(follow_symlinks=False)
            modified_us = int(stat.st_mtime * 1_000_000)
            if modified_us >= older_than_us:
                continue
            seen.add(path)
            listing.orphans.append(OrphanFile(str(location), path, modified_us, stat.st_size))
    return listing


def delete_file(orphan: OrphanFile) -> bool:
    """Delete one orphan after checking again that it is what a listing finds: a
    metadata file right in its table's ``metadata/`` folder, contained in it by its
    real path (True: it is gone now)."""
    path = _normalized(orphan.path)
    folder = _normalized(f"{orphan.location.rstrip('/')}/{METADATA_DIR}")
    if (
        path is None
        or folder is None
        or not path.endswith(METADATA_SUFFIX)
        or path.rsplit("/", 1)[0] != folder
        or not is_inside(orphan.path, orphan.location, resolve=True)
    ):
        return False
    location = normalize(orphan.path, file=True)
    try:
        os.remove(location.local_path())
    except FileNotFoundError:
        return False
    return True
