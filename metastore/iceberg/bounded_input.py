"""Files in a catalog's storage, read whole by the node but never past a bound.

Clients write to their tables' storage themselves (data files, manifests, manifest
lists, metadata files), and the node reads some of what they wrote: the metadata file
a register names, the manifest lists an append's rebase builds on, the metadata file
an idempotent retry is answered from, the manifest lists and manifests of a table it
purges. A file there can be anything its writer made it: a register of a 3 GiB file
under the table's own location grew the node to 23 GB until the kernel killed it,
every tenant's node with it; a FIFO named ``*.metadata.json`` would hold a worker
thread forever. Each such read here stops one byte past ``limit``
(``METASTORE_MAX_METADATA_FILE_BYTES``), a local file must be a regular file (opened
without waiting, ``metastore.util.small_files``), and an object store's object is refused
by its size before it is fetched. The refusal is a 400 naming the file and the
setting: the file is the client's (a purge logs and counts it, and goes on).
"""

from __future__ import annotations

import io

from pyiceberg.io import FileIO, InputFile, InputStream, OutputFile

from metastore.errors import BadRequest
from metastore.model.locations import local_file_path
from metastore.util.small_files import NotSmallFile, TooLarge, read_small_file

SETTING = "METASTORE_MAX_METADATA_FILE_BYTES"
# a metadata file of some 50,000 snapshots (METASTORE_MAX_METADATA_FILE_BYTES's default)
DEFAULT_READ_LIMIT = 64 * 1024**2


def read_bounded(file_io: FileIO, location: str, limit: int, what: str) -> bytes:
    """The bytes of the file at ``location``; 400 past ``limit`` bytes or, on the local
    file system, for anything but a regular file. FileNotFoundError and other OSErrors
    of the storage are left to the caller."""
    path = local_file_path(location)
    if path is not None:
        try:
            return read_small_file(path, limit)
        except TooLarge as exc:
            raise BadRequest(f"{what} {location} {exc} ({SETTING})") from None
        except NotSmallFile as exc:
            raise BadRequest(f"{what} {location} {exc}") from None
    source = file_io.new_input(location)
    size = len(source)  # an object store answers this without sending the object
    if size > limit:
        raise BadRequest(f"{what} {location} is larger than {limit:,} bytes ({SETTING})")
    with source.open(seekable=False) as stream:
        data = stream.read(limit + 1)  # the object may have been replaced since
    if len(data) > limit:
        raise BadRequest(f"{what} {location} is larger than {limit:,} bytes ({SETTING})")
    return data


class BytesInputFile(InputFile):
    """A file already read (``read_bounded``), for pyiceberg's readers that take an
    ``InputFile`` (a manifest list's)."""

    def __init__(self, location: str, data: bytes) -> None:
        super().__init__(location)
        self._data = data

    def __len__(self) -> int:
        return len(self._data)

    def exists(self) -> bool:
        return True

    def open(self, seekable: bool = True) -> InputStream:
        return io.BytesIO(self._data)


class BoundedReads(FileIO):
    """``inner`` with every read through ``read_bounded``, for pyiceberg's readers that
    open the files they read themselves (a manifest's entries, a snapshot's list)."""

    def __init__(self, inner: FileIO, limit: int, what: str) -> None:
        super().__init__(inner.properties)
        self._inner = inner
        self._limit = limit
        self._what = what

    def new_input(self, location: str) -> InputFile:
        return BytesInputFile(
            location, read_bounded(self._inner, location, self._limit, self._what)
        )

    def new_output(self, location: str) -> OutputFile:
        return self._inner.new_output(location)

    def delete(self, location: str | InputFile | OutputFile) -> None:
        self._inner.delete(location)
