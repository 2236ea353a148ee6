"""Native admin API: consistent checkpoints of this node's RocksDB, for the data pipeline.

A job (``metastore audit``, ``metastore export``) must read a running node's state
without stopping it and without ever opening its live database. It asks the node for
a checkpoint: RocksDB's own consistent copy (hard links to the immutable SST files
plus the flushed memtable), which the job then opens read-only, split into key
ranges over Spark tasks. The node picks the directory, under its data directory
(``<data dir>/checkpoints/<id>``); a client never names a path the server writes.

A cluster node checkpoints its view (the same key layout) and also reports its
changelog (brokers, topic prefix, partitions) and the offsets its view has applied,
so a job can read the changelog itself up to an end it can prove.

Checkpoints cost disk space as the live database moves on (the SST files they link
are kept), so the job deletes its own when done, and the node deletes any older than
``EXPIRE_AFTER_S`` whenever one is created or listed. Service admins only.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from metastore.errors import BadRequest, NotFound, ServiceUnavailable
from metastore.http.typedefs import CLUSTER, CONFIG, METASTORE
from metastore.persistence.rocksdb import RocksDB, RocksDBReader

routes = web.RouteTableDef()

CHECKPOINTS = "/api/v1/admin/checkpoints"
CHECKPOINT = CHECKPOINTS + "/{checkpoint}"
EXPIRE_AFTER_S = 3600.0  # a job that died left its checkpoint: gone after an hour
_ID = re.compile(r"^ck-(?P<ms>[0-9]{13})-[0-9a-f]{8}$")


@dataclass(frozen=True, slots=True)
class Checkpoint:
    id: str
    path: Path
    created_at_ms: int

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "path": str(self.path), "created-at-ms": self.created_at_ms}


class CheckpointDir:
    """The checkpoints of one node: created, listed, deleted and expired by id only."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def create(self, db: RocksDB) -> Checkpoint:
        """Blocking (a memtable flush and hard links): call it in a worker thread."""
        self.root.mkdir(parents=True, exist_ok=True)
        now_ms = int(time.time() * 1000)
        name = f"ck-{now_ms:013d}-{secrets.token_hex(4)}"
        db.checkpoint(self.root / name)
        return Checkpoint(name, self.root / name, now_ms)

    def listed(self) -> list[Checkpoint]:
        if not self.root.is_dir():
            return []
        found = []
        for path in sorted(self.root.iterdir()):
            match = _ID.match(path.name)
            if match is not None and path.is_dir():
                found.append(Checkpoint(path.name, path, int(match["ms"])))
        return found

    def delete(self, name: str) -> None:
        if _ID.match(name) is None:
            raise BadRequest(f"not a checkpoint id: {name!r}")
        path = self.root / name
        if not path.is_dir():
            raise NotFound(f"no checkpoint {name!r}")
        shutil.rmtree(path)

    def expire(self, older_than_s: float = EXPIRE_AFTER_S) -> list[str]:
        horizon_ms = (time.time() - older_than_s) * 1000
        gone = []
        for checkpoint in self.listed():
            if checkpoint.created_at_ms < horizon_ms:
                shutil.rmtree(checkpoint.path, ignore_errors=True)
                gone.append(checkpoint.id)
        return gone


def _dir(request: web.Request) -> CheckpointDir:
    return CheckpointDir(request.app[CONFIG].data_dir / "checkpoints")


def _database(request: web.Request) -> RocksDB:
    node = request.app.get(CLUSTER)
    if node is not None:
        return node.store.db
    persistence = request.app[METASTORE].persistence
    if not isinstance(persistence, RocksDBReader):
        raise ServiceUnavailable("this node keeps no RocksDB database to checkpoint")
    return persistence.db


def _changelog(request: web.Request) -> dict[str, Any] | None:
    """A cluster node's changelog and the offsets its view has applied (next to read)."""
    node = request.app.get(CLUSTER)
    if node is None:
        return None
    config = node.config
    offsets = node.store.offsets()
    return {
        "kafka": config.bootstrap,
        "topic-prefix": config.prefix,
        "partitions": config.partitions,
        "offsets": {
            role: [offsets.get((role, p), 0) for p in range(config.partitions)]
            for role in ("refs", "objects")
        },
    }


@routes.post(CHECKPOINTS)
async def create_checkpoint(request: web.Request) -> web.Response:
    directory, db = _dir(request), _database(request)
    changelog = _changelog(request)  # read first: the checkpoint holds at least this much
    await asyncio.to_thread(directory.expire)
    checkpoint = await asyncio.to_thread(directory.create, db)
    body = checkpoint.to_json()
    if changelog is not None:
        body["changelog"] = changelog
    return web.json_response(body, status=201)


@routes.get(CHECKPOINTS)
async def list_checkpoints(request: web.Request) -> web.Response:
    directory = _dir(request)
    await asyncio.to_thread(directory.expire)
    found = await asyncio.to_thread(directory.listed)
    return web.json_response({"checkpoints": [c.to_json() for c in found]})


@routes.delete(CHECKPOINT)
async def delete_checkpoint(request: web.Request) -> web.Response:
    await asyncio.to_thread(_dir(request).delete, request.match_info["checkpoint"])
    return web.Response(status=204)
