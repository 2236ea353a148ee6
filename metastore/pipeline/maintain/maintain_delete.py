"""Deleting files in Spark tasks, each one contained in its table's location.

Every path is checked before anything touches it: it must lie below the location
of the table it is deleted for (``metastore.model.locations.is_inside``, in both readings
of its percent-escapes and, for ``file://``, with symlinks resolved). A path
outside (hostile metadata naming another table's file or a system file) is skipped
and reported as ``outside``, never deleted. Each path's outcome is returned to the
driver, which logs and counts it: ``deleted``, ``would-delete`` (``--dry-run``),
``missing`` (already gone), ``failed`` or ``outside``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame

from metastore.model.locations import is_inside

OUTCOMES = ("deleted", "would-delete", "missing", "failed", "outside")


@dataclass(frozen=True, slots=True)
class Outcome:
    path: str
    kind: str  # manifest-list, manifest, data, delete, orphan
    table_location: str
    outcome: str
    detail: str = ""

    def to_json(self) -> dict[str, str]:
        return {
            "path": self.path,
            "kind": self.kind,
            "table": self.table_location,
            "outcome": self.outcome,
            "detail": self.detail,
        }


LINKED = "its table's location is reached through a symbolic link"


def delete_one(
    path: str, kind: str, table_location: str, io: Any, dry_run: bool, linked: bool = False
) -> Outcome:
    """``linked``: the table's location is (now) a link's (``locations.linked_below``),
    so containment in it says nothing and nothing of it is deleted."""
    if linked:
        return Outcome(path, kind, table_location, "outside", LINKED)
    if not is_inside(path, table_location, resolve=True):
        return Outcome(path, kind, table_location, "outside", "not below the table's location")
    if dry_run:
        return Outcome(path, kind, table_location, "would-delete")
    try:
        io.delete(path)
    except FileNotFoundError:
        return Outcome(path, kind, table_location, "missing")
    except OSError as exc:
        return Outcome(path, kind, table_location, "failed", str(exc)[:200])
    return Outcome(path, kind, table_location, "deleted")


def delete_partition(
    io_properties: Mapping[str, str],
    dry_run: bool,
    rows: Iterable[Any],
    linked: frozenset[str] = frozenset(),
) -> Iterator[Outcome]:
    from pyiceberg.io import load_file_io

    ios: dict[str, Any] = {}
    for row in rows:
        location = row["table_location"]
        if location not in ios:
            ios[location] = load_file_io(json.loads(io_properties.get(location, "{}")), location)
        refused = location in linked
        yield delete_one(row["path"], row["kind"], location, ios[location], dry_run, refused)


def delete(
    frame: DataFrame,
    io_properties: Mapping[str, str],
    dry_run: bool,
    linked: frozenset[str] = frozenset(),
) -> list[Outcome]:
    """Delete the files of ``frame`` (``path``, ``kind``, ``table_location``) in Spark
    tasks; ``io_properties``: a table location's FileIO properties as JSON; ``linked``:
    table locations reached through a symbolic link, whose files are all refused."""
    properties = dict(io_properties)
    outcomes: list[Outcome] = (
        frame.select("path", "kind", "table_location")
        .rdd.mapPartitions(lambda rows: delete_partition(properties, dry_run, rows, linked))
        .collect()
    )
    return outcomes
