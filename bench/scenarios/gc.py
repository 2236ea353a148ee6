"""The garbage collection benchmark's scenario: a big store, marked two ways, swept.

``build_store`` makes a real store fast: a node creates the tenant, its catalogs and
one native table in each (so every record a node needs is its own), then stops; the
store is then extended directly through ``RocksDBPersistence`` (before any node
opens it again): per catalog a chain of commits, each updating the table (one
commit object and one entity object), written in large batches with the catalog's
ref advanced by compare-and-swap, exactly as the commit path stores them. All but
the newest ``fresh`` commits of a catalog are dated before the history retention
window, so most of the store is garbage.

``python_mark`` is the single-process scan of the same store (the same pure mark,
``gc_mark.mark_catalog``, catalog after catalog, no Spark): the comparison for
``metastore gc`` on Spark.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metastore.catalog.service import catalog_ref
from metastore.engine.object_cache import ObjectCache
from metastore.engine.objects import CatalogObjects
from metastore.model.codec import default_codec
from metastore.model.ids import EPOCH_US, MAX_NODE_ID, MAX_SEQUENCE, compose
from metastore.model.keys import EntityKey, Kind, ObjKey, catalog_prefix
from metastore.model.objtypes import COMMIT, ENTITY
from metastore.model.records import Commit, CommitChange
from metastore.persistence.base import RefUpdate, StoredObject
from metastore.persistence.rocksdb import RocksDBPersistence
from metastore.persistence.rocksdb_layout import OBJ, decode_object
from metastore.pipeline.catalog_reader import CatalogRows
from metastore.pipeline.embedded_source import open_read_only, read_catalogs, scan
from metastore.pipeline.gc.gc_mark import MarkTimes, mark_catalog

TENANT = "bench"
TABLE = "t"
BATCH_COMMITS = 5_000
DAY_US = 24 * 3600 * 1_000_000


@dataclass
class Built:
    catalogs: int
    objects: int  # written directly (two per commit)
    seconds: float
    objects_per_s: float


@dataclass
class Scan:
    objects: int
    candidates: int
    seconds: float
    objects_per_s: float


@dataclass
class Timed:
    """A command run as a child process: wall time and its ``--json`` summary."""

    command: str
    seconds: float
    summary: dict[str, Any]


def catalog_names(count: int) -> list[str]:
    return [f"c{i:03d}" for i in range(count)]


def call(url: str, method: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    request = urllib.request.Request(url + path, data, headers, method=method)
    with urllib.request.urlopen(request, timeout=120) as response:
        raw = response.read()
    return json.loads(raw) if raw else None


def create_catalogs(url: str, catalogs: Sequence[str]) -> None:
    call(url, "POST", "/api/v1/tenants", {"name": TENANT})
    for name in catalogs:
        base = f"/api/v1/tenants/{TENANT}/catalogs"
        call(url, "POST", base, {"name": name})
        call(url, "POST", f"{base}/{name}/namespaces", {"namespace": ["ns"]})
        call(url, "POST", f"{base}/{name}/namespaces/ns/tables", {"name": TABLE})


def extend(store: Path, catalogs: Sequence[str], commits_per_catalog: int, fresh: int) -> Built:
    """Each catalog's chain extended by ``commits_per_catalog`` table updates."""
    started = time.monotonic()
    codec = default_codec()
    persistence = RocksDBPersistence(store, sync=False)
    now_us = time.time_ns() // 1000
    old_us = now_us - 30 * DAY_US
    written = 0
    sequence = 0
    try:
        for catalog in catalogs:
            objects = CatalogObjects(persistence, codec, ObjectCache(1 << 20), TENANT, catalog)
            ref_key = catalog_ref(TENANT, catalog)
            ref = persistence.get_ref(ref_key)
            assert ref is not None, catalog
            head = objects.commit(ref.head)
            key = EntityKey(Kind.TABLE, ("ns",), TABLE).encode()
            view = objects.index(head)
            assert view is not None
            found = view.get(key)
            assert found is not None, catalog
            entity = objects.entity(found[1])
            embedded = [e for e in head.index if e[0] != key]
            pending: list[StoredObject] = []
            for i in range(commits_per_catalog):
                created_us = old_us + i if i < commits_per_catalog - fresh else now_us - fresh + i
                ts_ms = (created_us - EPOCH_US) // 1000
                entity_id = compose(ts_ms, MAX_NODE_ID, sequence % (MAX_SEQUENCE + 1))
                commit_id = compose(ts_ms, MAX_NODE_ID - 1, sequence % (MAX_SEQUENCE + 1))
                sequence += 1
                version = dataclasses.replace(
                    entity,
                    properties={"v": str(i)},
                    version=entity.version + i + 1,
                    updated_at_us=created_us,
                )
                index = tuple(sorted([*embedded, (key, (ENTITY.name, entity_id))]))
                commit = Commit(
                    id=commit_id,
                    parent=head.id,
                    seq=head.seq + 1,
                    created_at_us=created_us,
                    principal="bench",
                    operation="update table",
                    changes=(CommitChange(key, "UPDATE"),),
                    index=index,
                    stripes=head.stripes,
                    index_size=head.index_size,
                    counts=head.counts,
                )
                pending.append(
                    StoredObject(
                        ObjKey(TENANT, catalog, ENTITY.name, entity_id),
                        version.encode(codec),
                        created_us,
                    )
                )
                pending.append(
                    StoredObject(
                        ObjKey(TENANT, catalog, COMMIT.name, commit_id),
                        commit.encode(codec),
                        created_us,
                    )
                )
                head = commit
                if len(pending) >= 2 * BATCH_COMMITS or i == commits_per_catalog - 1:
                    new = ref.advanced(head.id, created_us)
                    persistence.write(pending, RefUpdate(ref_key, ref.head, new))
                    written += len(pending)
                    ref, pending = new, []
    finally:
        persistence.close()
    seconds = time.monotonic() - started
    return Built(len(catalogs), written, seconds, written / seconds if seconds else 0.0)


def python_mark(store: Path, catalogs: Sequence[str], times: MarkTimes) -> Scan:
    """The same mark in this one process, catalog after catalog."""
    started = time.monotonic()
    codec = default_codec()
    objects = candidates = 0
    for catalog in catalogs:
        rows = dict(read_catalogs(str(store), [(TENANT, catalog)]))
        mark = mark_catalog(CatalogRows(TENANT, catalog, rows, codec), times)
        objects += mark.objects
        candidates += len(mark.candidates)
    seconds = time.monotonic() - started
    return Scan(objects, candidates, seconds, objects / seconds if seconds else 0.0)


def gc_command(url: str, out: Path, *args: str) -> Timed:
    return job_command("gc", url, out, *args)


def job_command(job: str, url: str, out: Path, *args: str) -> Timed:
    """One pipeline job (``metastore <job>``) over the bench tenant, timed start to exit."""
    command = [sys.executable, "-m", "metastore", job, "--url", url, "--tenant", TENANT,
               "--json", "--no-progress", "--out", str(out), *args]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600, check=False)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: exit {done.returncode}: {done.stderr[-2000:]}")
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    return Timed(" ".join(command[1:]), seconds, summary)


def store_bytes(store: Path) -> int:
    return sum(p.stat().st_size for p in store.rglob("*") if p.is_file())


def count_objects(store: Path, catalogs: Sequence[str], before_us: int | None = None) -> int:
    """Immutable objects of the catalogs (created before ``before_us``) in a store no
    node has open."""
    db = open_read_only(store)
    try:
        count = 0
        for catalog in catalogs:
            for key, raw in scan(db, OBJ + catalog_prefix(TENANT, catalog)):
                if before_us is not None:
                    created = decode_object(ObjKey.decode(key[len(OBJ) :]), raw).created_at_us
                    if created >= before_us:
                        continue
                count += 1
        return count
    finally:
        db.close()
