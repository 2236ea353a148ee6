"""Which paths of Iceberg metadata the server may act on, checked when they enter a table.

A purge reads a table's manifest lists and deletes its metadata files, and the
server writes metadata.json under ``write.metadata.path``: so each of these
paths must lie inside the table's own location when a commit, a create or a
register brings it in (400 otherwise, nothing written), and a purge re-checks
them anyway (``purge.py``). Paths already in the table are not checked again
on later commits: after a ``set-location`` the old files lie outside the new
location, and the purge keeps them.

Data and manifest paths live inside manifest files the server does not read at
commit time; only the purge sees them, and keeps those outside the location.
Statistics files (puffin) are never read by the server either: engines may keep
them anywhere (Java's catalogs accept any path), so they are not checked at commit,
and a purge deletes only those inside the table's location.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pyiceberg.table.metadata import TableMetadata

from metastore.model.locations import check_inside

# Properties naming where files go (Iceberg's table and view properties; the last two are
# deprecated spellings Java still reads). Only these: a pattern such as ``write.*.path``
# would also match column settings like ``write.metadata.metrics.column.path``.
LOCATION_PROPERTIES = frozenset(
    {
        "write.metadata.path",
        "write.data.path",
        "write.object-storage.path",
        "write.folder-storage.path",
    }
)


def check_properties(properties: Mapping[str, str], location: str) -> None:
    """Every location property lies inside ``location`` (or is it); 400 otherwise."""
    for key, value in properties.items():
        if key in LOCATION_PROPERTIES:
            what = f"property {key}"
            check_inside(value, [location], what, allow_equal=True, resolve=True)


def check_paths(paths: Iterable[tuple[str, str]], location: str) -> None:
    """Each ``(what, path)`` lies below ``location``; 400 otherwise."""
    for what, path in paths:
        check_inside(path, [location], what, file=True, resolve=True)


def added_paths(
    new: TableMetadata, base: TableMetadata | None, previous: str | None
) -> list[tuple[str, str]]:
    """The paths ``new`` brings in that ``base`` did not have (all of them without a base).

    ``previous`` (the metadata file the server wrote last, which it appends to the
    metadata log itself) is not the client's and is not checked again.
    """
    known = set(_paths(base)) if base is not None else set()
    if previous is not None:
        known.add(("metadata-log entry", previous))
    return [item for item in _paths(new) if item not in known]


def _paths(metadata: TableMetadata) -> Iterable[tuple[str, str]]:
    for snapshot in metadata.snapshots:
        yield "manifest list", snapshot.manifest_list
    for entry in metadata.metadata_log:
        yield "metadata-log entry", entry.metadata_file
