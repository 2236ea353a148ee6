"""Table files through pyiceberg's FileIO: metadata.json writes and reads, locations, purge.

Every table and view location, and every metadata file the server reads or
writes, lies under the catalog's warehouse root ``<warehouse>/<tenant>/<catalog>``:
a client cannot point the server at files outside it (register, create with a
location, set-location), and a purge deletes only files under the table's own
location, whatever its manifests list.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping
from urllib.parse import quote

from pyiceberg.catalog import MetastoreCatalog as PyCatalog
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.serializers import FromInputFile, ToOutputFile
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata

from metastore.errors import BadRequest, ValidationFailed

log = logging.getLogger(__name__)


def _segment(name: str) -> str:
    text = quote(name, safe="")
    return {".": "%2E", "..": "%2E%2E"}.get(text, text)


class Warehouse:
    """File locations of one node's warehouse (``file://...`` by default, or ``s3://...``)."""

    def __init__(self, root: str, io_properties: Mapping[str, str]) -> None:
        self.root = root.rstrip("/")
        self._properties = dict(io_properties)

    def catalog_root(self, tenant: str, catalog: str) -> str:
        return f"{self.root}/{tenant}/{catalog}"

    def default_location(
        self, tenant: str, catalog: str, namespace: tuple[str, ...], name: str
    ) -> str:
        parts = [_segment(p) for p in (*namespace, name)]
        return "/".join([self.catalog_root(tenant, catalog), *parts])

    def check_inside(self, location: str, tenant: str, catalog: str, what: str) -> str:
        """``location`` normalized, or 400 if it is not under the catalog's root."""
        if not isinstance(location, str) or not location:
            raise ValidationFailed(f"{what} must be a non-empty string")
        root = self.catalog_root(tenant, catalog)
        text = location.rstrip("/")
        if text.startswith("/") and root.startswith("file://"):
            text = "file://" + text
        rest = text[len(root) + 1 :].split("/") if text.startswith(root + "/") else None
        if rest is None or any(seg in ("", ".", "..") for seg in rest):
            raise BadRequest(f"{what} {location!r} is outside this catalog's warehouse {root}/")
        return text

    def io(self, location: str) -> FileIO:
        return load_file_io(self._properties, location)

    def new_metadata_location(self, metadata: TableMetadata, previous: str | None) -> str:
        version = PyCatalog._parse_metadata_version(previous) + 1 if previous else 0
        provider = load_location_provider(metadata.location, metadata.properties)
        return provider.new_table_metadata_file_location(version)

    def new_view_metadata_location(self, location: str, previous: str | None) -> str:
        version = PyCatalog._parse_metadata_version(previous) + 1 if previous else 0
        return f"{location.rstrip('/')}/metadata/{version:05d}-{uuid.uuid4()}.metadata.json"

    def write_table_metadata(self, metadata: TableMetadata, location: str) -> None:
        ToOutputFile.table_metadata(metadata, self.io(location).new_output(location))

    def write_json(self, value: object, location: str) -> None:
        self.write_text(json.dumps(value, separators=(",", ":")), location)

    def write_text(self, text: str, location: str) -> None:
        with self.io(location).new_output(location).create(overwrite=False) as out:
            out.write(text.encode())

    def read_table_metadata(self, location: str) -> TableMetadata:
        io = self.io(location)
        try:
            return FromInputFile.table_metadata(io.new_input(location))
        except FileNotFoundError:
            raise BadRequest(f"no metadata file at {location}") from None
        except (ValueError, OSError) as exc:
            raise BadRequest(f"cannot read table metadata at {location}: {exc}") from None

    def read_bytes(self, location: str) -> bytes:
        with self.io(location).new_input(location).open() as stream:
            data: bytes = stream.read()
            return data

    def delete_quietly(self, location: str) -> None:
        try:
            self.io(location).delete(location)
        except (OSError, ValueError):
            log.warning("could not delete %s", location, exc_info=True)

    def purge(self, metadata: TableMetadata, metadata_location: str | None) -> int:
        """Delete the table's files that lie under its location; returns how many were deleted."""
        root = metadata.location.rstrip("/") + "/"
        io = self.io(metadata.location)
        files: set[str] = set()
        for snapshot in metadata.snapshots:
            files.add(snapshot.manifest_list)
            try:
                manifests = snapshot.manifests(io)
            except (OSError, ValueError):
                log.warning("purge: cannot read manifest list %s", snapshot.manifest_list)
                continue
            for manifest in manifests:
                files.add(manifest.manifest_path)
                try:
                    entries = manifest.fetch_manifest_entry(io, discard_deleted=False)
                except (OSError, ValueError):
                    log.warning("purge: cannot read manifest %s", manifest.manifest_path)
                    continue
                files.update(entry.data_file.file_path for entry in entries)
        files.update(entry.metadata_file for entry in metadata.metadata_log)
        if metadata_location:
            files.add(metadata_location)
        deleted = 0
        for path in sorted(files):
            if not path.startswith(root):
                log.warning("purge: %s is outside the table location %s; kept", path, root)
                continue
            self.delete_quietly(path)
            deleted += 1
        return deleted
