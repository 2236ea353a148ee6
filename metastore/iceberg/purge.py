"""Purge: delete a dropped table's files, only those inside its own location.

Why this deletes no file another live table references: every path is
normalized and must lie below the table's own location (symlinks resolved, see
``metastore.model.locations``) or it is kept, never read and never deleted; the
catalog's locations are unique and not nested (``metastore.engine.location_index``), so
no other live table or view holds a location overlapping this one; and a table
or view that took this location (or one inside it) after the drop, e.g. by
registering this table's metadata file, keeps every file under its location too
(``held``). What another table references outside its own location (a manifest
written by hand, files left behind by a ``set-location``) is not its own, and
it is not protected.

A purge deletes a file only after every file it references: data and statistics
files first, then manifests, then manifest lists, then metadata files, the current one
last. So a purge cut short (a crash: its purging record stays, ``metastore.engine.dropped``)
and run again still reads every file left, through the ones not deleted yet; the files
it finds gone are skipped, not failures.

The drop has committed before the purge starts, so a purge never fails the
request: what cannot be read or deleted is logged and counted
(``metastore_purge_failures_total``), like every path kept for lying outside
(``metastore_purge_kept_total``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pyiceberg.io import FileIO
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

from metastore.iceberg.bounded_input import DEFAULT_READ_LIMIT, BoundedReads
from metastore.model.locations import Location, is_inside, normalize
from metastore.util.local_unlink import LinkOnTheWay, LocalRoot

log = logging.getLogger(__name__)

# the order files are deleted in, by kind: one referencing others goes after them
_ORDER = {
    "data file": 0,
    "statistics file": 0,
    "manifest": 1,
    "manifest list": 2,
    "metadata file": 3,
}


@dataclass
class PurgeReport:
    deleted: int = 0
    kept: int = 0  # outside the table's own location (or held by another table)
    failed: int = 0  # could not be read or deleted


class PurgeCounters:
    """Totals over every purge of this process, for ``/metrics`` (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.deleted = 0
        self.kept = 0
        self.failures = 0

    def add(self, report: PurgeReport) -> None:
        with self._lock:
            self.deleted += report.deleted
            self.kept += report.kept
            self.failures += report.failed

    def stats(self) -> dict[str, tuple[str, str, int]]:
        return {
            "metastore_purge_deleted_total": ("counter", "files deleted by purges", self.deleted),
            "metastore_purge_kept_total": (
                "counter",
                "paths a purge kept for lying outside the table's own location",
                self.kept,
            ),
            "metastore_purge_failures_total": (
                "counter",
                "files or purges that failed after the drop committed",
                self.failures,
            ),
        }


class Purge:
    """One table's purge: collect its files (reading only its own), then delete them."""

    def __init__(
        self,
        metadata: TableMetadata,
        metadata_location: str | None,
        held: Sequence[str],
        io: Callable[[str], FileIO],
        read_limit: int = DEFAULT_READ_LIMIT,
        local: Callable[[str], LocalRoot] = LocalRoot,
    ) -> None:
        """``io``: the FileIO of a path, which reads every file and deletes those not on
        a local file system; ``local``: the table's folder opened for deleting below it,
        on a local file system (``local_unlink``)."""
        self._local = local
        self._read_limit = read_limit  # the bytes of one list or manifest read
        self._metadata = metadata
        self._metadata_location = metadata_location
        self._own = normalize(metadata.location, "table location", file=True)
        self._held = [normalize(key, file=True) for key in held]
        self._io = io
        self._seen: set[str] = set()
        self._files: list[tuple[int, str]] = []  # (``_ORDER`` of its kind, path)
        self.report = PurgeReport()

    def run(self) -> PurgeReport:
        # on a local file system every file is deleted relative to the table's folder,
        # opened now by its real path (its caller refused a location that is a link):
        # the reading below may take seconds, and a folder swapped for a link meanwhile
        # leads nowhere outside it (``local_unlink``)
        local = self._local(self._own.local_path()) if self._own.scheme == "file" else None
        try:
            for snapshot in self._metadata.snapshots:
                self._manifests(snapshot)
            for entry in self._metadata.metadata_log:
                self._take(entry.metadata_file, "metadata file")
            for stats in (*self._metadata.statistics, *self._metadata.partition_statistics):
                self._take(stats.statistics_path, "statistics file")
            if self._metadata_location:
                self._take(self._metadata_location, "metadata file")
            for _, path in sorted(self._files, key=lambda ranked: ranked[0]):  # stable
                self._delete(path, local)
        finally:
            if local is not None:
                local.close()
        return self.report

    def _manifests(self, snapshot: Snapshot) -> None:
        manifest_list = snapshot.manifest_list
        if not self._take(manifest_list, "manifest list"):
            return
        try:
            manifests = snapshot.manifests(self._reads(manifest_list, "manifest list"))
        except FileNotFoundError:
            return  # deleted by a run of this purge cut short, with every file it named
        except Exception as exc:  # a broken file must not stop the rest of the purge
            self._failed("read manifest list", manifest_list, exc)
            return
        for manifest in manifests:
            if not self._take(manifest.manifest_path, "manifest"):
                continue
            try:
                entries = manifest.fetch_manifest_entry(
                    self._reads(manifest.manifest_path, "manifest"), discard_deleted=False
                )
            except FileNotFoundError:
                continue  # as a manifest list: gone after its files
            except Exception as exc:
                self._failed("read manifest", manifest.manifest_path, exc)
                continue
            for entry in entries:
                self._take(entry.data_file.file_path, "data file")

    def _reads(self, path: str, what: str) -> FileIO:
        """The FileIO of ``path``, reading no file past the bound (``bounded_input``)."""
        return BoundedReads(self._io(path), self._read_limit, what)

    def _take(self, path: str, what: str) -> bool:
        """Queue ``path`` for deletion if it is this table's own; True if it is (once)."""
        if path in self._seen:
            return False
        self._seen.add(path)
        if not self._is_own(path):
            log.warning(
                "purge: %s %s is outside the location %s of the purged table; kept",
                what,
                path,
                self._own,
            )
            self.report.kept += 1
            return False
        self._files.append((_ORDER[what], path))
        return True

    def _is_own(self, path: str) -> bool:
        if not isinstance(path, str) or not is_inside(path, self._own, resolve=True):
            return False
        location: Location = normalize(path, file=True)
        return not any(location.within(held) for held in self._held)

    def _delete(self, path: str, local: LocalRoot | None) -> None:
        """Delete ``path`` (its own, as ``_take`` found it): on a local file system below
        the table's folder without following a link, since a purge reads every manifest
        between queueing a file and deleting it, and a folder swapped for a link to
        another table's folder meanwhile would otherwise send the deletion there."""
        try:
            if local is None:
                self._io(path).delete(path)
            elif not local.unlink(normalize(path, file=True).local_path()):
                return  # gone already
        except FileNotFoundError:
            return  # gone already (expired, or a purge before this one)
        except (LinkOnTheWay, ValueError):
            log.warning("purge: %s is reached through a link below %s; kept", path, self._own)
            self.report.kept += 1
            return
        except Exception as exc:
            self._failed("delete", path, exc)
            return
        self.report.deleted += 1

    def _failed(self, action: str, path: str, exc: Exception) -> None:
        log.warning("purge: cannot %s %s: %s: %s", action, path, type(exc).__name__, exc)
        self.report.failed += 1
