"""Whether a file exists in a catalog's warehouse, looked at through PyIceberg's FileIO.

The catalog's storage record gives the FileIO properties; its credentials reference
(an environment variable or a file) is resolved in the job's own process, as a node
resolves it. Where the job cannot resolve it, or the storage cannot be asked, the
answer is "cannot tell" (None), never "missing".
"""

from __future__ import annotations

import os

from pyiceberg.io import load_file_io

from metastore.errors import MetastoreError
from metastore.storage.credentials import CredentialSources
from metastore.storage.settings import Storage


def file_exists(location: str, storage: Storage | None) -> bool | None:
    properties: dict[str, str] = {}
    if storage is not None:
        properties.update(storage.io_properties)
        if storage.credentials is not None:
            directory = os.environ.get("METASTORE_CREDENTIALS_DIR", "/run/secrets")
            try:
                properties.update(
                    storage.credentials.resolve(CredentialSources.of_process(directory))
                )
            except MetastoreError:
                return None
    try:
        return bool(load_file_io(properties, location).new_input(location).exists())
    except (OSError, ValueError):
        return None
