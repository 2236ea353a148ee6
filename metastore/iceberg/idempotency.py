"""``Idempotency-Key``: a retried mutation returns the first outcome, stored through the commit.

The record of a successful mutation is an entity (a system record of the
catalog) created **in the same commit** as the mutation, so it exists iff the
mutation happened, on every node. A retry finds it and replays the outcome; a
retry racing the first attempt loses on the record's creation and replays too.
Bodies that grow with a table's history are not copied: a table or view result
replays from its metadata file (immutable, written before the commit).
Failed requests write nothing, so they leave no record and may be retried.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from metastore.changes import Change, CreateEntity
from metastore.errors import BadRequest, NotFound
from metastore.iceberg.files import Warehouse
from metastore.keys import EntityKey, Kind
from metastore.service import Metastore

HEADER = "Idempotency-Key"
_KEY = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


@dataclass(frozen=True, slots=True)
class Idempotency:
    metastore: Metastore
    warehouse: Warehouse
    tenant: str
    catalog: str
    key: str | None
    operation: str  # method and path: a key reused for another request is refused

    @classmethod
    def of(
        cls, request: web.Request, metastore: Metastore, warehouse: Warehouse, tenant: str,
        catalog: str,
    ) -> Idempotency:  # fmt: skip
        key = request.headers.get(HEADER)
        if key is not None and not _KEY.fullmatch(key):
            raise BadRequest(f"{HEADER} must be 1-128 characters of A-Z a-z 0-9 . _ : -")
        return cls(metastore, warehouse, tenant, catalog, key, f"{request.method} {request.path}")

    @property
    def _entity_key(self) -> EntityKey:
        return EntityKey(Kind.SYSTEM, (), f"idempotency:{self.key}")

    def record(
        self, status: int, body: Any = None, metadata_location: str | None = None
    ) -> Sequence[Change]:
        """The change that stores this outcome (none without a key)."""
        if self.key is None:
            return ()
        properties = {"operation": self.operation, "status": str(status)}
        if metadata_location is not None:
            properties["metadata-location"] = metadata_location
        elif body is not None:
            properties["body"] = json.dumps(body, separators=(",", ":"))
        return (CreateEntity(self._entity_key, properties),)

    def replay(self) -> web.Response | None:
        """The first outcome of this key, if a mutation with it succeeded."""
        if self.key is None:
            return None
        try:
            entity = self.metastore.get_entity(self.tenant, self.catalog, self._entity_key)
        except NotFound:
            return None
        props = entity.properties
        if props.get("operation") != self.operation:
            raise BadRequest(f"{HEADER} {self.key!r} was used for another request")
        status = int(props["status"])
        if "metadata-location" in props:
            location = props["metadata-location"]
            metadata = json.loads(self.warehouse.read_bytes(location))
            body: Any = {"metadata-location": location, "metadata": metadata, "config": {}}
        elif "body" in props:
            body = json.loads(props["body"])
        else:
            return web.Response(status=status)
        return web.json_response(body, status=status)
