"""``Idempotency-Key`` on the Iceberg API: the shared record (``metastore.http.idempotency``)
carrying the response itself.

Iceberg responses are known before the commit, so the record stores the body,
or, for bodies that grow with a table's history, only the metadata file's
location (the file is immutable and written before the commit) and the replay
reads it back. Everything else (scope, fingerprint, principal, the record living
in the mutation's commit) is the shared mechanism's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from metastore.catalog.service import Metastore
from metastore.errors import BadRequest
from metastore.http import idempotency
from metastore.iceberg.files import Warehouse
from metastore.iceberg.routes.etags import table_etag, tagged
from metastore.model.changes import Change

HEADER = idempotency.HEADER


@dataclass(frozen=True, slots=True)
class Idempotency:
    key: idempotency.Idempotency
    warehouse: Warehouse

    @classmethod
    def of(
        cls, request: web.Request, metastore: Metastore, warehouse: Warehouse, tenant: str,
        catalog: str,
    ) -> Idempotency:  # fmt: skip
        return cls(idempotency.Idempotency.of(request, metastore, tenant, catalog), warehouse)

    def record(
        self, status: int, body: Any = None, metadata_location: str | None = None
    ) -> Sequence[Change]:
        """The change that stores this outcome (none without a key)."""
        outcome = {"status": str(status)}
        if metadata_location is not None:
            outcome["metadata-location"] = metadata_location
        elif body is not None:
            outcome["body"] = json.dumps(body, separators=(",", ":"))
        return self.key.record(**outcome)

    def replay(self) -> web.Response | None:
        """The first outcome of this key, if a mutation with it succeeded."""
        props = self.key.stored()
        if props is None:
            return None
        if "status" not in props:  # a native API record: another request
            raise BadRequest(f"{HEADER} {self.key.key!r} was used for another request")
        status = int(props["status"])
        if "metadata-location" in props:
            location = props["metadata-location"]
            files = self.warehouse.files(self.key.tenant, self.key.catalog)
            metadata = json.loads(files.read_bytes(location))
            table = {"metadata-location": location, "metadata": metadata, "config": {}}
            return tagged(web.json_response(table, status=status), table_etag(table))
        if "body" not in props:
            return web.Response(status=status)
        return web.json_response(json.loads(props["body"]), status=status)
