"""Both API descriptions of one app, built from its route table once and kept.

Built on the first request (``metastore.node.describe``), in a thread: it reads every
handler's source and parses a large YAML document. The route table cannot change
once the app has started, so neither can the documents.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

from aiohttp import web

from metastore.http import iceberg_spec
from metastore.http.openapi import native_document, operations


@dataclass
class ApiDocuments:
    native: bytes = b""  # the native API's OpenAPI document, JSON
    iceberg: bytes = b""  # the Iceberg REST specification this node implements, YAML
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def ready(self, app: web.Application) -> ApiDocuments:
        async with self._lock:
            if not self.native:
                self.native, self.iceberg = await asyncio.to_thread(build, app)
        return self


def build(app: web.Application) -> tuple[bytes, bytes]:
    """(the native document as JSON, the Iceberg document as YAML)."""
    registered = list(operations(app))
    iceberg = iceberg_spec.implemented(registered)
    native = native_document(app, iceberg_spec.described(iceberg))
    return json.dumps(native, indent=1).encode(), iceberg_spec.render(iceberg).encode()
