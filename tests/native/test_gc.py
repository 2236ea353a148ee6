"""Garbage collection through a real node (embedded, RocksDB) over HTTP, with PyIceberg.

The tests play the mark themselves, from a checkpoint of the node's database (as the
``metastore gc`` job does): reachable = everything the commits from HEAD back to the
ref's oldest recent HEAD reach (retention 0); candidates = every other object of the
catalog. Then they sweep through the node and check the store with the audit's own
checks (``metastore.pipeline.audit.integrity``, no Spark needed) on a fresh checkpoint.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from harness.node import NodeProcess
from metastore.model.codec import default_codec
from metastore.model.keys import ObjKey
from metastore.model.objtypes import COMMIT, INDEX, METADATA_PIECE
from metastore.persistence.rocksdb import RocksDB
from metastore.pipeline.audit.integrity import audit_catalog
from metastore.pipeline.catalog_reader import CatalogRows

T = "default"  # the Iceberg API's tenant
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "name", StringType(), required=False),
)
RECENT_HEADS = 20  # the engine's default: the ref keeps this many previous HEADs


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    root = tmp_path_factory.mktemp("gc")
    process = NodeProcess(root / "data", log_path=root / "node.log")
    with process:
        yield process
    log = process.log_path.read_text(errors="replace")
    assert "Traceback" not in log, f"the node logged an unhandled error:\n{process.log_tail(60)}"


@pytest.fixture
def catalog(node: NodeProcess) -> Iterator[tuple[str, RestCatalog]]:
    name = f"c{uuid.uuid4().hex[:10]}"
    reply = requests.post(
        f"{node.url}/api/v1/tenants/{T}/catalogs", json={"name": name}, timeout=30
    )
    assert reply.status_code == 201, reply.text
    client = RestCatalog("gc", uri=node.url, warehouse=name)
    client.create_namespace("ns")
    yield name, client
    client.close()


# --- reading the node's store the way a job does: through a checkpoint -------------------


def rows(node: NodeProcess) -> dict[bytes, bytes]:
    """Every key and value of the node's database, from a fresh checkpoint."""
    made = requests.post(f"{node.url}/api/v1/admin/checkpoints", timeout=30)
    assert made.status_code == 201, made.text
    body = made.json()
    db = RocksDB(Path(body["path"]), sync=False)
    try:
        return dict(db.scan(b""))
    finally:
        db.close()
        gone = requests.delete(f"{node.url}/api/v1/admin/checkpoints/{body['id']}", timeout=30)
        assert gone.status_code == 204, gone.text


def catalog_rows(node: NodeProcess, catalog: str) -> CatalogRows:
    return CatalogRows(T, catalog, rows(node), default_codec())


def stored(found: CatalogRows) -> set[ObjKey]:
    return {o.key for o in found.persistence.scan_objects(T, found.catalog)}


def mark(found: CatalogRows) -> tuple[int, set[ObjKey]]:
    """(HEAD, candidates): every object the commits from HEAD back to the oldest recent
    HEAD do not reach."""
    ref = found.main()
    assert ref is not None
    oldest = (ref.head, *ref.recent)[-1]
    key = found.objects.key
    reachable: set[ObjKey] = set()
    for commit in found.history(ref.head):
        reachable.add(key(COMMIT.name, commit.id))
        reachable.update(key(INDEX.name, s.id) for s in commit.stripes)
        for entity_key, entity in found.live(commit):
            value = found.objects.index(commit).get(entity_key.encode())  # type: ignore[union-attr]
            assert value is not None
            reachable.add(key(*value))
            reachable.update(key(METADATA_PIECE.name, p) for p in entity.attachments.values())
        if commit.id == oldest:
            break
    return ref.head, stored(found) - reachable


def sweep(node: NodeProcess, catalog: str, head: int, candidates: set[ObjKey]) -> Any:
    body = {
        "mark-head": str(head),
        "candidates": [{"type": k.type, "id": str(k.id)} for k in sorted(candidates, key=str)],
    }
    reply = requests.post(
        f"{node.url}/api/v1/tenants/{T}/catalogs/{catalog}/gc/sweep", json=body, timeout=60
    )
    assert reply.status_code == 200, reply.text
    return reply.json()


def assert_clean(node: NodeProcess, catalog: str) -> None:
    audit = audit_catalog(catalog_rows(node, catalog), lambda path, storage: True)
    assert audit.findings == [], [f.to_json() for f in audit.findings]


def drop_and_age(client: RestCatalog, table: str) -> None:
    """Drop ``table`` for good and push its commits out of the ref's recent HEADs (a
    purge: a drop without one keeps the table, reachable, for the catalog's retention)."""
    client.purge_table(("ns", table))
    for i in range(RECENT_HEADS + 1):
        client.create_namespace(f"filler{i}_{uuid.uuid4().hex[:6]}")


def pieces(keys: set[ObjKey]) -> set[ObjKey]:
    return {k for k in keys if k.type == METADATA_PIECE.name}


# --- the tests --------------------------------------------------------------------------


def test_a_candidate_referenced_again_after_the_mark_is_spared_and_loads(
    node: NodeProcess, catalog: tuple[str, RestCatalog]
) -> None:
    name, client = catalog
    client.create_table(("ns", "a"), SCHEMA)
    drop_and_age(client, "a")
    head, candidates = mark(catalog_rows(node, name))
    dropped_pieces = pieces(candidates)
    assert dropped_pieces, "the dropped table's metadata pieces are candidates"

    # between mark and sweep: a new table whose metadata has the same schema piece
    client.create_table(("ns", "b"), SCHEMA)
    b_pieces = set(catalog_rows_live_pieces(node, name, "b"))
    shared = dropped_pieces & b_pieces
    assert shared, "the new table references a piece the mark found unreachable"

    result = sweep(node, name, head, candidates)

    assert result["spared"] >= len(shared)
    assert result["deleted"] == len(candidates) - result["spared"] > 0
    assert result["missing"] == 0
    after = stored(catalog_rows(node, name))
    assert shared <= after  # still there: the table references it
    assert not (candidates - shared) & after  # everything else the mark found is gone
    loaded = client.load_table(("ns", "b"))
    assert loaded.schema().as_struct() == SCHEMA.as_struct()
    assert loaded.scan().to_arrow().num_rows == 0
    assert_clean(node, name)
    history = requests.get(f"{node.url}/api/v1/tenants/{T}/catalogs/{name}/commits", timeout=30)
    assert history.json()["commits"][0]["operation"] == "gc"
    metrics = requests.get(f"{node.url}/metrics", timeout=30).text
    assert "metastore_gc_deleted_objects_total" in metrics
    assert 'metastore_tasks{job="gc",status="running"}' in metrics


def catalog_rows_live_pieces(node: NodeProcess, catalog: str, table: str) -> list[ObjKey]:
    found = catalog_rows(node, catalog)
    ref = found.main()
    assert ref is not None
    head = found.commit(ref.head)
    assert head is not None
    for key, entity in found.live(head):
        if key.name == table:
            return [found.objects.key(METADATA_PIECE.name, p) for p in entity.attachments.values()]
    raise AssertionError(f"no live table {table}")


def test_a_sweep_deletes_what_nothing_reaches_and_a_second_sweep_finds_nothing(
    node: NodeProcess, catalog: tuple[str, RestCatalog]
) -> None:
    name, client = catalog
    client.create_table(("ns", "gone"), SCHEMA)
    client.create_table(("ns", "kept"), SCHEMA)
    drop_and_age(client, "gone")
    head, candidates = mark(catalog_rows(node, name))
    assert candidates
    before = stored(catalog_rows(node, name))

    dry = requests.post(
        f"{node.url}/api/v1/tenants/{T}/catalogs/{name}/gc/sweep",
        json={
            "mark-head": head,
            "candidates": [{"type": k.type, "id": k.id} for k in candidates],
            "dry-run": True,
        },
        timeout=60,
    )
    assert dry.status_code == 200 and dry.json()["commit-id"] is None
    assert stored(catalog_rows(node, name)) == before  # a dry run deletes nothing

    result = sweep(node, name, head, candidates)
    assert result["deleted"] == dry.json()["deleted"] > 0
    after = stored(catalog_rows(node, name))
    assert len(before - after) == result["deleted"]
    assert after - before == {ObjKey(T, name, COMMIT.name, int(result["commit-id"]))}
    assert_clean(node, name)
    assert client.load_table(("ns", "kept")).schema().as_struct() == SCHEMA.as_struct()
    again = sweep(node, name, head, candidates - after)  # a rerun of the same batch
    assert (again["deleted"], again["missing"]) == (0, len(candidates - after))
    assert stored(catalog_rows(node, name)) - after == {
        ObjKey(T, name, COMMIT.name, int(again["commit-id"]))
    }


def test_history_ends_where_collected_commits_begin(
    node: NodeProcess, catalog: tuple[str, RestCatalog]
) -> None:
    """Commits past the retained history are collected: the history listing ends at the
    first missing parent (no error), whole and page by page; a ``?at=`` read of a
    collected commit is a 404."""
    name, client = catalog
    client.create_table(("ns", "gone"), SCHEMA)
    drop_and_age(client, "gone")
    head, candidates = mark(catalog_rows(node, name))
    collected = {k.id for k in candidates if k.type == COMMIT.name}
    assert collected
    swept = sweep(node, name, head, candidates)
    assert swept["deleted"] == len(candidates)
    url = f"{node.url}/api/v1/tenants/{T}/catalogs/{name}/commits"

    whole = requests.get(url, params={"pageSize": 1000}, timeout=30)
    assert whole.status_code == 200, whole.text
    listed = [int(c["id"]) for c in whole.json()["commits"]]
    assert whole.json().get("next-page-token") is None
    assert not collected & set(listed) and int(swept["commit-id"]) == listed[0]
    assert len(listed) == RECENT_HEADS + 2  # the sweep's commit, HEAD and the recent HEADs

    paged: list[int] = []
    token: str | None = None
    while True:
        params: dict[str, Any] = {"pageSize": 5, **({"pageToken": token} if token else {})}
        page = requests.get(url, params=params, timeout=30)
        assert page.status_code == 200, page.text
        paged += [int(c["id"]) for c in page.json()["commits"]]
        token = page.json().get("next-page-token")
        if not token:
            break
    assert paged == listed

    gone = min(collected)
    at = requests.get(
        f"{node.url}/api/v1/tenants/{T}/catalogs/{name}/namespaces", params={"at": gone}, timeout=30
    )
    assert at.status_code == 404, at.text


def test_commits_racing_sweeps_never_leave_a_dangling_reference(
    node: NodeProcess, catalog: tuple[str, RestCatalog]
) -> None:
    name, client = catalog
    for i in range(3):
        client.create_table(("ns", f"old{i}"), SCHEMA)
        client.purge_table(("ns", f"old{i}"))  # for good: no retention
    for i in range(RECENT_HEADS + 1):
        client.create_namespace(f"age{i}")
    head, candidates = mark(catalog_rows(node, name))
    assert pieces(candidates)

    errors: list[BaseException] = []
    created: list[str] = []

    def commits() -> None:
        try:
            with RestCatalog("racer", uri=node.url, warehouse=name) as racer:
                for i in range(12):
                    racer.create_table(("ns", f"new{i}"), SCHEMA)  # reuses the schema piece
                    created.append(f"new{i}")
        except BaseException as exc:  # reported below
            errors.append(exc)

    racer = threading.Thread(target=commits)
    racer.start()
    try:
        for key in sorted(candidates, key=str):  # one sweep commit per candidate
            sweep(node, name, head, {key})
    finally:
        racer.join(120)
    assert not errors, errors
    assert_clean(node, name)
    for table in created:
        assert client.load_table(("ns", table)).schema().as_struct() == SCHEMA.as_struct()


def test_a_piece_only_a_recent_head_references_after_a_reset_is_spared(
    node: NodeProcess, catalog: tuple[str, RestCatalog]
) -> None:
    """A commit after the mark references the piece, then the ref is reset back to the
    mark's HEAD: the piece is reachable only from a recent HEAD (a reset can return
    to it), so the sweep keeps it."""
    name, client = catalog
    client.create_table(("ns", "a"), SCHEMA)
    drop_and_age(client, "a")
    head, candidates = mark(catalog_rows(node, name))
    client.create_table(("ns", "b"), SCHEMA)
    shared = pieces(candidates) & set(catalog_rows_live_pieces(node, name, "b"))
    assert shared
    base = f"{node.url}/api/v1/tenants/{T}/catalogs/{name}"
    undone = requests.get(f"{base}/ref", timeout=30).json()["head"]
    reset = requests.post(f"{base}/ref/reset", json={"to": str(head)}, timeout=30)
    assert reset.status_code == 200, reset.text

    result = sweep(node, name, head, candidates)

    assert result["spared"] >= len(shared)
    assert shared <= stored(catalog_rows(node, name))
    assert_clean(node, name)  # the audit checks every recent HEAD's objects too
    back = requests.post(f"{base}/ref/reset", json={"to": str(undone)}, timeout=30)
    assert back.status_code == 200, back.text
    assert client.load_table(("ns", "b")).schema().as_struct() == SCHEMA.as_struct()
