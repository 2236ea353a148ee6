"""FileIO instances shared across requests, one per set of properties and scheme.

Building a FileIO is not free: pyiceberg imports and constructs the implementation
and its filesystem (an S3 client with its connection pool, or the local one) on
first use of each instance. A table commit went through three or four new
instances; now every request with the same resolved properties (secrets included)
and location scheme shares one. The properties are the key, so rotated secrets or a
changed storage record make a new instance at once, and an instance is never used
with credentials it was not built with.

A FileIO and the filesystems behind it are safe to share between threads: each call
opens its own streams.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlparse

from pyiceberg.io import FileIO, load_file_io

from metastore.util.lru import Lru

MAX_INSTANCES = 64  # catalogs x storage versions a node keeps FileIO instances for


class FileIOs:
    def __init__(self, limit: int = MAX_INSTANCES) -> None:
        self._instances: Lru[tuple[tuple[tuple[str, str], ...], str], FileIO] = Lru(limit)

    def get(self, properties: Mapping[str, str], location: str) -> FileIO:
        """The FileIO ``load_file_io(properties, location)`` would build."""
        key = (tuple(sorted(properties.items())), urlparse(location).scheme)
        found = self._instances.get(key)
        if found is None:
            found = self._instances.put(key, load_file_io(dict(properties), location))
        return found

    def __len__(self) -> int:
        return len(self._instances)
