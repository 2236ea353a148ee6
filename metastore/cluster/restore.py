"""Snapshot + tail: a cluster node's empty view started from a checkpoint of a view.

A view stores the offsets it has applied in the same database as the data, so any
consistent copy of a view is a valid starting point: a node started on it reads
the changelog from those offsets on, only the tail. Two kinds of copy qualify: a
checkpoint another node of the same cluster took of its view
(``POST /api/v1/admin/checkpoints``) and the output of ``metastore rebuild``.

``restore`` runs before the node starts (``metastore serve --restore-from DIR``)
and refuses, with one line, what would give the node a wrong view: a directory
that is not a RocksDB database, a store that is not a view (an embedded node's),
a view of other topics (another topic prefix or partition count), and a data
directory that already holds a view (the node resumes its own; restoring over it
is a decision for the operator, who removes it first). The copy is made next to
the view's directory and renamed into place when complete, so a crash mid-copy
never leaves a partial view the node would start on. SST files are immutable, so
they are hard-linked when the checkpoint is on the same file system (a checkpoint
of a large view restores in about the time of a directory listing).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from rocksdict import AccessType, Options, Rdict

from metastore.errors import MetastoreError
from metastore.persistence.rocksdb_layout import (
    FORMAT,
    FORMAT_KEY,
    OFFSETS,
    VIEW_MARKER,
    view_marker,
)

VIEW_DIR = "view"  # a cluster node keeps its view at <data dir>/view
_SKIPPED = ("LOCK", "LOG")  # the database's lock and RocksDB's own info logs


class RestoreError(MetastoreError):
    """The checkpoint cannot start this node's view (one line for the operator)."""


@dataclass(frozen=True, slots=True)
class Restored:
    path: Path  # the view's directory
    records: int  # the sum of the restored offsets: records the node will not re-read
    files: int


def restore(checkpoint: Path, data_dir: Path, prefix: str, partitions: int) -> Restored:
    """Copy the view checkpoint ``checkpoint`` to ``data_dir``'s (empty) view directory."""
    view = data_dir / VIEW_DIR
    check_empty(view)
    records = check_checkpoint(checkpoint, view_marker(prefix, partitions))
    staging = view.with_name(f".{view.name}.restoring")
    if staging.exists():
        shutil.rmtree(staging)  # a crashed restore's leftovers: ours by name
    staging.mkdir(parents=True)
    files = 0
    for source in sorted(checkpoint.iterdir()):
        if source.is_file() and not source.name.startswith(_SKIPPED):
            _copy(source, staging / source.name)
            files += 1
    if view.exists():
        view.rmdir()  # empty: checked above
    staging.rename(view)
    return Restored(view, records, files)


def check_empty(view: Path) -> None:
    if not view.exists() or not any(view.iterdir()):
        return
    if (view / "CURRENT").exists():
        raise RestoreError(
            f"the data directory already holds a view ({view}): --restore-from only starts "
            "an empty one; drop the flag to resume this view, or remove it to restore"
        )
    raise RestoreError(f"{view} is not empty and not a view: refusing to restore over it")


def check_checkpoint(checkpoint: Path, wanted: bytes) -> int:
    """The sum of the checkpoint's offsets, if it is a view of the topics ``wanted`` names."""
    if not checkpoint.is_dir() or not (checkpoint / "CURRENT").is_file():
        raise RestoreError(f"{checkpoint} is not a checkpoint (no RocksDB database in it)")
    try:
        db = Rdict(str(checkpoint), Options(raw_mode=True), access_type=AccessType.read_only())
    except Exception as exc:  # rocksdict raises plain exceptions for RocksDB errors
        raise RestoreError(f"{checkpoint}: cannot open the RocksDB database ({exc})") from None
    try:
        if db.get(FORMAT_KEY) != FORMAT:
            raise RestoreError(f"{checkpoint} is not a metastore database this release reads")
        marker: bytes | None = db.get(VIEW_MARKER)
        if marker is None:
            raise RestoreError(f"{checkpoint} is not a view (an embedded node's store?)")
        if marker != wanted:
            raise RestoreError(
                f"{checkpoint} is a view of {marker.decode()}, not of this node's topics "
                f"{wanted.decode()} (another cluster's checkpoint?)"
            )
        return _offsets_sum(db)
    finally:
        db.close()


def _offsets_sum(db: Rdict) -> int:
    it = db.iter()
    total = 0
    try:
        it.seek(OFFSETS)
        while it.valid():
            key: bytes = it.key()
            if not key.startswith(OFFSETS):
                break
            total += int.from_bytes(it.value(), "big")
            it.next()
    finally:
        del it
    return total


def _copy(source: Path, target: Path) -> None:
    """A hard link for an immutable SST file on the same file system, else a copy."""
    if source.suffix == ".sst":
        try:
            os.link(source, target)
            return
        except OSError:
            pass  # another file system (or no hard links): copy
    shutil.copy2(source, target)
