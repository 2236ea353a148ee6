"""Table files through pyiceberg's FileIO, each catalog through its own storage.

Every table and view location, and every file the server reads or writes for
one, lies inside one of the catalog's allowed locations (its storage,
``metastore.storage.settings``; the root by default) and inside the table's or view's own
location, by the one rule of ``metastore.model.locations`` (normalized, compared by
segments, symlinks resolved): a client cannot point the server at files outside
(register, create with a location, ``set-location``, ``write.metadata.path``).
Files are read and written with the catalog's FileIO properties and the secrets
its credentials name (``TableFiles``). Deleting files is ``purge.py``'s.

pyiceberg picks a FileIO by scheme and imports it on first use: for ``file://`` and
``s3://`` its pyarrow one, whose import (pyarrow and its dataset and compute modules)
takes about a second, several on a busy machine. Imported here, it loads with the node
(and is frozen with the rest of startup, ``node/heap.py``) instead of stalling the first
create or commit that writes a metadata file.
"""

from __future__ import annotations

import json
import logging
import os
import re
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from urllib.parse import quote

import pyiceberg.io.pyarrow  # noqa: F401 - imported with the node, not by its first write
from pyiceberg.exceptions import ValidationError as IcebergValidationError
from pyiceberg.io import PY_IO_IMPL, FileIO, load_file_io
from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil

from metastore.errors import BadRequest, NotFound, StorageUnavailable
from metastore.iceberg.bounded_input import DEFAULT_READ_LIMIT, SETTING, read_bounded
from metastore.iceberg.file_ios import FileIOs
from metastore.model.locations import (
    check_inside,
    is_inside,
    linked_below,
    local_file_path,
    normalize,
)
from metastore.storage.catalog_storage import CatalogStorage
from metastore.util.durable_writes import (
    Syncing,
    begin_file,
    create_file,
    make_folders,
    name_durably,
    sync_file,
)
from metastore.util.memory_only import check as may_wait

log = logging.getLogger(__name__)

METADATA_PATH = "write.metadata.path"
DATA_PATH = "write.data.path"


def _segment(name: str) -> str:
    text = quote(name, safe="")
    return {".": "%2E", "..": "%2E%2E"}.get(text, text)


class Warehouse:
    """Where each catalog's tables and views may lie, and its files (``files``).

    ``sync`` (the node's ``--fsync``): the local folders and metadata files the server
    makes are durable before a commit names them (``metastore.util.durable_writes``)."""

    def __init__(
        self, storage: CatalogStorage, *, sync: bool = True, read_limit: int = DEFAULT_READ_LIMIT
    ) -> None:
        self.storage = storage
        self.sync = sync
        self.read_limit = read_limit  # the bytes of one file the node reads whole
        self._file_ios = FileIOs()  # shared by every request's ``files``

    def catalog_roots(self, tenant: str, catalog: str) -> tuple[str, ...]:
        """Where a catalog's tables and views may lie: its storage's allowed locations."""
        return self.storage.of(tenant, catalog).allowed

    def default_location(
        self, tenant: str, catalog: str, namespace: tuple[str, ...], name: str
    ) -> str:
        parts = [_segment(p) for p in (*namespace, name)]
        return "/".join([self.storage.of(tenant, catalog).root, *parts])

    def check_location(
        self, location: object, tenant: str, catalog: str, what: str, *, file: bool = False
    ) -> str:
        """``location`` normalized, if it lies below one of the catalog's allowed
        locations (else 400); ``file``: a file's path rather than a table's or view's
        location.

        Touches the filesystem for ``file://`` (symlinks): call it off the event loop.
        """
        roots = self.catalog_roots(tenant, catalog)
        checked = check_inside(location, roots, what, file=file, resolve=True)
        if not file:
            self.check_unlinked(checked, roots, what)
        return checked

    @staticmethod
    def check_unlinked(location: str, roots: Sequence[str], what: str) -> None:
        """400 if the ``file://`` location is reached through a symbolic link below the
        catalog's storage root (``locations.linked_below``): a table there would have
        another folder, perhaps another table's, as its own. Blocking."""
        if linked_below(location, roots):
            raise BadRequest(
                f"{what} {location!r} is reached through a symbolic link below the "
                "catalog's storage root; a table's or view's location may not be"
            )

    def check_kept_location(self, location: str, tenant: str, catalog: str, what: str) -> str:
        """A table's or view's location that a commit leaves as it was: checked like a new
        one while the catalog's allowed locations cover it, kept as is once they no
        longer do (a storage update changes where new tables go; existing tables keep
        their locations). Blocking, like ``check_location``."""
        roots = self.catalog_roots(tenant, catalog)
        if any(is_inside(location, root) for root in roots):
            checked = check_inside(location, roots, what, resolve=True)
            self.check_unlinked(checked, roots, what)
            return checked
        return location

    def prepare_folders(self, tenant: str, catalog: str, metadata: TableMetadata) -> None:
        """Create a new table's metadata and data folders when they are local (``file://``).

        An engine that stages a create writes its data and manifests before the
        commit, and one writing through the plain local file system (which, unlike
        object stores, needs the parent folder) fails without them. Each folder is
        checked, before and after it is made, to lie inside the catalog's allowed
        locations (symlinks resolved); other storage has no folders to make.
        Blocking: call it off the event loop.
        """
        roots = self.catalog_roots(tenant, catalog)
        made: list[str] = []
        for what, folder in _table_folders(metadata):
            if normalize(folder, what).scheme != "file":
                continue
            path = normalize(check_inside(folder, roots, what, resolve=True)).local_path()
            try:
                made += make_folders(path, sync=False)
            except OSError as exc:
                raise StorageUnavailable(f"cannot create {folder}: {_first_line(exc)}") from None
            check_inside(folder, roots, what, resolve=True)
        if self.sync and made:
            try:
                name_durably(made)  # once for both: they share the table's folder
            except OSError as exc:
                where = os.path.dirname(made[0])
                raise StorageUnavailable(f"cannot sync {where}: {_first_line(exc)}") from None

    def files(self, tenant: str, catalog: str) -> TableFiles:
        """The catalog's files, through its storage's FileIO properties and secrets."""
        storage = self.storage.of(tenant, catalog)
        properties = partial(self.storage.io_properties, storage)
        return TableFiles(properties, self._file_ios, sync=self.sync, read_limit=self.read_limit)

    def new_metadata_location(self, metadata: TableMetadata, previous: str | None) -> str:
        """Where the next metadata.json of a table goes: under ``write.metadata.path`` or
        ``<location>/metadata``, both inside the table's location (400 otherwise).

        Computed here, never by a location provider named in the table's properties:
        that would make the server import and run a class a client chose.
        """
        version = metadata_version(previous) + 1 if previous else 0
        directory = metadata.properties.get(METADATA_PATH) or f"{metadata.location}/metadata"
        what = f"property {METADATA_PATH}"
        directory = check_inside(
            directory, [metadata.location], what, allow_equal=True, resolve=True
        )
        return f"{directory}/{version:05d}-{uuid.uuid4()}.metadata.json"

    def new_view_metadata_location(self, location: str, previous: str | None) -> str:
        version = metadata_version(previous) + 1 if previous else 0
        return f"{location.rstrip('/')}/metadata/{version:05d}-{uuid.uuid4()}.metadata.json"


def _first_line(exc: BaseException) -> str:
    """An error's first line for an answer (at most 500 characters; its type if empty)."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:500]


def _table_folders(metadata: TableMetadata) -> list[tuple[str, str]]:
    """Where a table's metadata and data files go: ``write.metadata.path`` and
    ``write.data.path`` (inside the table's location, ``table_paths``), or the
    ``metadata`` and ``data`` folders of its location."""
    location = metadata.location.rstrip("/")
    properties = metadata.properties
    return [
        ("metadata folder", properties.get(METADATA_PATH) or f"{location}/metadata"),
        ("data folder", properties.get(DATA_PATH) or f"{location}/data"),
    ]


METADATA_FILE = re.compile(r"(\d+)-([0-9a-fA-F-]+)(?:\.\w+)?\.metadata\.json")


def metadata_version(location: str) -> int:
    """The version number a metadata file's name starts with (``00001-<uuid>.metadata.json``
    is 1), or -1 for a name in another form, so the next file is version 0: every
    Iceberg client numbers the files this way, and a table registered with a file
    named otherwise still gets well-formed successors."""
    found = METADATA_FILE.fullmatch(location.rsplit("/", 1)[-1])
    if found is None:
        return -1
    try:
        uuid.UUID(found.group(2))
    except ValueError:
        return -1
    return int(found.group(1))


class TableFiles:
    """One catalog's files: FileIO with its properties, secrets resolved per use (so a
    node whose credentials are missing answers 503 naming them, and rotated secrets
    take effect without a restart)."""

    def __init__(
        self,
        properties: Callable[[], Mapping[str, str]],
        shared: FileIOs | None = None,
        *,
        sync: bool = True,
        read_limit: int = DEFAULT_READ_LIMIT,
    ) -> None:
        self._properties = properties
        self._shared = shared
        self._sync = sync  # local files: durable before the write returns
        self.read_limit = read_limit  # the bytes of one file the node reads whole

    def io(self, location: str) -> FileIO:
        may_wait()  # a file or an object store
        if self._shared is None:
            return load_file_io(dict(self._properties()), location)
        return self._shared.get(self._properties(), location)

    def write_json(self, value: object, location: str) -> None:
        self.write_text(json.dumps(value, separators=(",", ":")), location)

    def write_text(
        self, text: str, location: str, *, durable: list[Callable[[], None]] | None = None
    ) -> None:
        """Write a new file (never over an existing one). Callers serialize first, so
        a metadata the server refuses writes nothing; a write that fails partway
        deletes what it wrote, so a failed create or commit leaves no file behind.

        ``durable``: a local file's syncs are started, not waited for, and a wait for
        them is appended; the commit that names the file calls it before its durable
        write (``CommitRequest.durable_first``). A failed sync deletes the file and the
        wait raises 503. Without it the file is durable when this returns. A file past
        ``read_limit`` is a 400: a retry, a load or a register would refuse to read it."""
        may_wait()
        data = text.encode()
        if len(data) > self.read_limit:  # the node would not read it back
            raise BadRequest(
                f"the metadata file would be {len(data):,} bytes, more than the"
                f" {self.read_limit:,} this node reads ({SETTING}); nothing was written"
            )
        local = local_file_path(location)
        if local is not None and PY_IO_IMPL not in self._properties():
            if durable is not None and self._sync:
                with _unavailable_on_error("write", location):
                    syncing = begin_file(local, data)
                durable.append(partial(_wait_synced, syncing, location))
                return
            _write_new_local(local, data, location, self._sync)
            return
        with _unavailable_on_error("write", location):
            stream = self.io(location).new_output(location).create(overwrite=False)
        try:
            with _unavailable_on_error("write", location), stream as out:
                out.write(data)
        except BaseException:
            self.delete_quietly(location)
            raise

    def make_durable(self, location: str) -> None:
        """A file this node wrote through FileIO (a rebased manifest list): with sync and
        when it is local, its bytes and its name synced before a commit names it (an
        object store's completed write is durable already)."""
        local = local_file_path(location)
        if self._sync and local is not None:
            with _unavailable_on_error("write", location):
                sync_file(local)

    def read_table_metadata(self, location: str) -> TableMetadata:
        """The table metadata in the file at ``location``; 400 for anything else there,
        or for a file past the node's bound (``bounded_input``)."""
        try:
            data = read_bounded(self.io(location), location, self.read_limit, "metadata file")
            return TableMetadataUtil.parse_raw(data.decode())
        except FileNotFoundError:
            raise BadRequest(f"no metadata file at {location}") from None
        except (ValueError, LookupError, TypeError, OSError, IcebergValidationError) as exc:
            # pyiceberg's parser raises all of these on JSON that is not table metadata
            # (a view's metadata file fails with a KeyError on "schema")
            first = _first_line(exc)
            raise BadRequest(f"{location} is not a table metadata file: {first}") from None

    def read_bytes(self, location: str) -> bytes:
        """A metadata file the server wrote; 404 if it is gone (its table was purged),
        400 if something past the node's bound replaced it (``bounded_input``)."""
        try:
            with _unavailable_on_error("read", location):
                return read_bounded(self.io(location), location, self.read_limit, "metadata file")
        except FileNotFoundError:
            raise NotFound(
                f"metadata file {location} no longer exists: its table or view was purged"
            ) from None

    def exists(self, location: str) -> bool:
        """Whether a file is at ``location`` now (503 when the storage cannot tell)."""
        with _unavailable_on_error("read", location):
            return bool(self.io(location).new_input(location).exists())

    def delete_quietly(self, location: str) -> None:
        """Delete a file, logging (not raising) a failure; one already gone is no failure
        (a write whose sync failed deletes its file itself, ``durable_writes.Syncing``)."""
        try:
            self.io(location).delete(location)
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.warning("could not delete %s: %s", location, exc)


def _write_new_local(path: str, data: bytes, location: str, sync: bool) -> None:
    """What pyiceberg's local FileIO does for a new file (parent folders made, the file
    created), as one exclusive create (``durable_writes.create_file``): the file cannot
    already exist, and it costs a tenth of the FileIO's time; with ``sync`` it is
    durable before a commit names it."""
    with _unavailable_on_error("write", location):
        create_file(path, data, sync=sync)


def _wait_synced(syncing: Syncing, location: str) -> None:
    with _unavailable_on_error("write", location):
        syncing.wait()


@contextmanager
def _unavailable_on_error(action: str, location: str) -> Iterator[None]:
    """The storage refusing or failing a read or write (wrong credentials, a bucket or
    directory that is not there, a path blocked by a file) is a 503 naming the file and
    the storage's first line of error, with nothing committed; never a 500 with a
    traceback. A missing file to read stays ``FileNotFoundError`` for the caller."""
    try:
        yield
    except FileNotFoundError:
        if action == "read":
            raise
        raise StorageUnavailable(f"cannot {action} {location}: no such directory") from None
    except OSError as exc:
        first = _first_line(exc)
        raise StorageUnavailable(
            f"cannot {action} {location}: {type(exc).__name__}: {first}"
        ) from None
