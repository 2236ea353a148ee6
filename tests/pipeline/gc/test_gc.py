"""``metastore gc`` on one embedded node: the mark keeps everything a HEAD, a recent
HEAD or a retained commit needs; a run while clients keep committing deletes what it
reports and nothing live; a piece reused between mark and sweep is spared; a job
killed mid-sweep is finished by a rerun; a second run on a held scope refuses."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField
from pyspark.sql import SparkSession

from harness.node import NodeProcess
from metastore.model.codec import default_codec
from metastore.model.keys import ObjKey, tenant_prefix
from metastore.node.cli import _parser
from metastore.persistence.base import DEFAULT_RECENT_HEADS
from metastore.persistence.rocksdb_layout import OBJ, decode_object
from metastore.pipeline.catalog_reader import CatalogRows
from metastore.pipeline.embedded_source import open_read_only, read_catalogs, scan
from metastore.pipeline.gc import gc_job
from metastore.pipeline.gc.gc_mark import MarkTimes, mark_catalog
from metastore.pipeline.gc.gc_mark_job import mark
from metastore.pipeline.node_client import NodeClient
from metastore.pipeline.options import Scope
from metastore.pipeline.progress import Progress
from metastore.pipeline.source_opening import from_node
from tests.pipeline.conftest import run_job
from tests.pipeline.support import Http

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))
APPENDS = 40  # more than the recent HEADs kept (20) and than a frozen log page (32)


@dataclass
class Ran:
    status: int
    stdout: str

    @property
    def summary(self) -> dict[str, Any]:
        found: dict[str, Any] = json.loads(self.stdout.strip().splitlines()[-1])
        return found


def gc(spark: SparkSession, *argv: str) -> Ran:
    """``metastore gc <argv> --json`` in this process, on the shared session."""
    args = _parser().parse_args(["gc", *argv, "--json", "--no-progress"])
    out = io.StringIO()
    status = gc_job.main(args, out, spark)
    return Ran(status, out.getvalue())


def setup_catalog(http: Http, tenant: str, catalog: str) -> RestCatalog:
    status, _ = http.call("POST", "/api/v1/tenants", {"name": tenant})
    assert status in (200, 201, 409)
    http.ok("POST", f"/api/v1/tenants/{tenant}/catalogs", {"name": catalog})
    http.ok(
        "POST", f"/api/v1/tenants/{tenant}/catalogs/{catalog}/namespaces", {"namespace": ["ns"]}
    )
    return RestCatalog("t", uri=http.url, warehouse=f"{tenant}/{catalog}")


def append(table: Any, start: int, count: int = 1) -> None:
    table.append(pa.table({"id": pa.array(range(start, start + count), pa.int64())}))


def checkpoint_rows(http: Http, tenant: str, catalog: str) -> dict[bytes, bytes]:
    """The catalog's rows in a fresh checkpoint of the node's store."""
    made = http.ok("POST", "/api/v1/admin/checkpoints")
    try:
        rows = dict(read_catalogs(made["path"], [(tenant, catalog)]))
    finally:
        http.ok("DELETE", f"/api/v1/admin/checkpoints/{made['id']}")
    return rows


def stored_objects(http: Http, tenant: str) -> list[tuple[ObjKey, int]]:
    """Every immutable object of ``tenant``'s catalogs: key and creation time."""
    made = http.ok("POST", "/api/v1/admin/checkpoints")
    db = open_read_only(Path(made["path"]))
    try:
        found = []
        for key, raw in scan(db, OBJ + tenant_prefix(tenant)):
            obj_key = ObjKey.decode(key[len(OBJ) :])
            if obj_key.tenant == tenant and obj_key.catalog:
                found.append((obj_key, decode_object(obj_key, raw).created_at_us))
        return found
    finally:
        db.close()
        http.ok("DELETE", f"/api/v1/admin/checkpoints/{made['id']}")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    root = tmp_path_factory.mktemp("gc")
    with NodeProcess(root / "data", log_path=root / "node.log") as running:
        yield running


def test_the_mark_keeps_everything_heads_recent_heads_and_retained_commits_need(
    node: NodeProcess,
) -> None:
    http = Http(node.url)
    client = setup_catalog(http, "marks", "c")
    table = client.create_table(("ns", "t"), SCHEMA)
    for i in range(APPENDS):
        append(table, i)
    rows = checkpoint_rows(http, "marks", "c")
    codec = default_codec()
    times = MarkTimes(time.time_ns() // 1000 + 1_000_000, 0, 0)  # everything is old enough
    mark = mark_catalog(CatalogRows("marks", "c", rows, codec), times)
    assert mark.candidates, "superseded commits and pieces are candidates"
    assert {c[0] for c in mark.candidates} >= {"commit", "entity", "metadata-piece"}
    assert mark.objects == mark.reachable + len(mark.candidates)
    # what is left once the candidates are gone still serves every HEAD and recent HEAD
    gone = {ObjKey("marks", "c", t, i).encode() for t, i, _, _ in mark.candidates}
    left = {k: v for k, v in rows.items() if k[len(OBJ) :] not in gone or k[:1] != OBJ}
    pruned = CatalogRows("marks", "c", left, codec)
    main = pruned.main()
    assert main is not None and mark.mark_head == main.head
    assert len(main.recent) == 20
    for head in (main.head, *main.recent):
        commit = pruned.commit(head)
        assert commit is not None
        for key, entity in pruned.live(commit):
            if key.name == "t":
                metadata, location = pruned.iceberg(entity) or ({}, None)
                assert location in mark.metadata_files
                assert len(metadata["snapshots"]) >= APPENDS - 20
    # with a long retention nothing is a candidate: every commit is still promised
    keep = MarkTimes(times.mark_us, 0, 3600 * 1_000_000)
    assert mark_catalog(CatalogRows("marks", "c", rows, codec), keep).candidates == []
    # and with a long grace neither: nothing is old enough
    young = MarkTimes(times.mark_us, 3600 * 1_000_000, 0)
    assert mark_catalog(CatalogRows("marks", "c", rows, codec), young).candidates == []


def task(http: Http, scope: str) -> dict[str, Any] | None:
    """The gc task record of ``scope`` on the node, if any."""
    listed = http.ok("GET", "/api/v1/admin/tasks")
    records = listed["tasks"] if isinstance(listed, dict) else listed
    return next((t for t in records if t["job"] == "gc" and t["scope"] == scope), None)


def audit_clean(spark: SparkSession, url: str, tenant: str, out: Path) -> None:
    ran = run_job(spark, "audit", "--url", url, "--tenant", tenant, "--out", str(out), "--json")
    assert ran.status == 0, ran.stdout
    assert ran.summary["dangling"] == 0


@dataclass
class Writers:
    """Clients committing for the whole run: PyIceberg appends (one table each) and
    native table creations, each recording what the node acknowledged."""

    url: str
    tenant: str
    catalog: str
    appenders: int = 2
    creators: int = 2
    stop: threading.Event = field(default_factory=threading.Event)
    rows: dict[str, list[int]] = field(default_factory=dict)  # table -> acknowledged ids
    created: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)

    def append_loop(self, i: int) -> None:
        client = RestCatalog("t", uri=self.url, warehouse=f"{self.tenant}/{self.catalog}")
        table = client.load_table(("ns", f"ice{i}"))
        acked = self.rows.setdefault(f"ice{i}", [])
        n = 0
        while not self.stop.is_set():
            try:
                append(table, 1000 * i + n)
            except Exception as exc:  # a failed append: the test reports it
                self.failures.append(f"append {i}/{n}: {exc!r}")
                return
            acked.append(1000 * i + n)
            n += 1

    def create_loop(self, i: int) -> None:
        http = Http(self.url)
        path = f"/api/v1/tenants/{self.tenant}/catalogs/{self.catalog}/namespaces/ns/tables"
        n = 0
        while not self.stop.is_set():
            name = f"native{i}_{n}"
            status, body = http.call("POST", path, {"name": name})
            if status not in (200, 201):
                self.failures.append(f"create {name}: {status} {body}")
                return
            self.created.append(name)
            n += 1

    def __enter__(self) -> Writers:
        client = RestCatalog("t", uri=self.url, warehouse=f"{self.tenant}/{self.catalog}")
        for i in range(self.appenders):
            if not client.table_exists(("ns", f"ice{i}")):
                client.create_table(("ns", f"ice{i}"), SCHEMA)
        self.threads = [
            *(threading.Thread(target=self.append_loop, args=(i,)) for i in range(self.appenders)),
            *(threading.Thread(target=self.create_loop, args=(i,)) for i in range(self.creators)),
        ]
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=120)

    def check(self) -> None:
        """Every acknowledged entity and every acknowledged row is readable."""
        assert self.failures == []
        http = Http(self.url)
        path = f"/api/v1/tenants/{self.tenant}/catalogs/{self.catalog}/namespaces/ns/tables"
        listed = {t["name"] for t in http.pages(path, "tables")}
        assert set(self.created) <= listed
        client = RestCatalog("t", uri=self.url, warehouse=f"{self.tenant}/{self.catalog}")
        for name, ids in self.rows.items():
            scanned = client.load_table(("ns", name)).scan().to_arrow()["id"].to_pylist()
            assert sorted(scanned) == sorted(ids), name


def test_gc_while_clients_keep_committing_deletes_what_it_reports_and_nothing_live(
    spark: SparkSession, node: NodeProcess, tmp_path: Path
) -> None:
    http = Http(node.url)
    client = setup_catalog(http, "busy", "w")
    seed = client.create_table(("ns", "seed"), SCHEMA)
    for i in range(30):  # garbage to collect: history past the recent HEADs
        append(seed, i)
    with Writers(node.url, "busy", "w") as writers:
        while len(writers.created) < 2 or sum(map(len, writers.rows.values())) < 2:
            time.sleep(0.05)  # every client is committing
        during = len(writers.created)
        ran = gc(spark, "--url", node.url, "--tenant", "busy", "--grace", "0",
                 "--retention", "0", "--out", str(tmp_path / "gc1"))  # fmt: skip
        assert len(writers.created) > during  # they kept committing through the run
    assert ran.status == 0, ran.stdout
    first = ran.summary
    assert first["deleted"] > 0 and first["candidates"] >= first["deleted"]
    assert first["marked"] > first["candidates"]
    writers.check()
    audit_clean(spark, node.url, "busy", tmp_path / "audit1")
    assert seed.refresh().scan().to_arrow().num_rows == 30

    # nobody writes now: the store shrinks by exactly what the job reports
    before = dict(stored_objects(http, "busy"))
    started_us = time.time_ns() // 1000
    ran = gc(spark, "--url", node.url, "--tenant", "busy", "--grace", "0",
             "--retention", "0", "--out", str(tmp_path / "gc2"))  # fmt: skip
    assert ran.status == 0, ran.stdout
    after = dict(stored_objects(http, "busy"))
    gone = set(before) - set(after)
    assert len(gone) == ran.summary["deleted"] > 0
    assert all(created >= started_us for key, created in after.items() if key not in before)
    writers.check()
    audit_clean(spark, node.url, "busy", tmp_path / "audit2")
    record = task(http, "busy")
    assert record is not None and record["status"] == "done"


def piece_of(http: Http, tenant: str, catalog: str, table: str, name: str) -> int:
    """The id of attachment ``name`` of ``table`` at the catalog's HEAD."""
    rows = CatalogRows(tenant, catalog, checkpoint_rows(http, tenant, catalog), default_codec())
    main = rows.main()
    assert main is not None
    head = rows.commit(main.head)
    assert head is not None
    entity = next(e for key, e in rows.live(head) if key.name == table)
    return entity.attachments[name]


def test_a_candidate_piece_referenced_again_between_mark_and_sweep_is_spared(
    spark: SparkSession, node: NodeProcess, tmp_path: Path
) -> None:
    http = Http(node.url)
    client = setup_catalog(http, "reuse", "c")
    client.create_table(("ns", "a"), SCHEMA)
    piece = piece_of(http, "reuse", "c", "a", "schema/0")
    forget(http, "reuse", "c", "ns", "a")
    for i in range(22):  # the drop's HEAD leaves the recent HEADs
        http.ok("POST", "/api/v1/tenants/reuse/catalogs/c/namespaces", {"namespace": [f"n{i}"]})
    out = tmp_path / "gc"
    ran = gc(spark, "--url", node.url, "--tenant", "reuse", "--catalog", "c", "--grace", "0",
             "--retention", "0", "--phase", "mark", "--out", str(out))  # fmt: skip
    assert ran.status == 0, ran.stdout
    candidates = pq.read_table(ran.summary["candidates_file"]).to_pylist()
    assert {"type": "metadata-piece", "id": str(piece)} in [
        {"type": c["type"], "id": c["id"]} for c in candidates
    ]
    # between mark and sweep a new table with the same schema names the same piece
    client.create_table(("ns", "b"), SCHEMA)
    assert piece_of(http, "reuse", "c", "b", "schema/0") == piece
    ran = gc(spark, "--url", node.url, "--tenant", "reuse", "--catalog", "c", "--grace", "0",
             "--retention", "0", "--phase", "sweep", "--out", str(out))  # fmt: skip
    assert ran.status == 0, ran.stdout
    assert ran.summary["spared"] >= 1 and ran.summary["deleted"] > 0
    reloaded = client.load_table(("ns", "b"))  # the spared piece serves the new table
    assert [f.name for f in reloaded.schema().fields] == ["id"]
    assert piece_of(http, "reuse", "c", "b", "schema/0") == piece
    audit_clean(spark, node.url, "reuse", tmp_path / "audit")


def forget(http: Http, tenant: str, catalog: str, *path: str) -> None:
    """Drop a table for good and leave its files (the native commit's delete keeps no
    dropped record), so its pieces become garbage at once: a plain Iceberg drop now keeps
    the table, and its pieces, until the catalog's drop retention passes."""
    body = {"changes": [{"action": "delete", "entity": {"kind": "table", "path": list(path)}}]}
    http.ok("POST", f"/api/v1/tenants/{tenant}/catalogs/{catalog}/commit", body)


def gc_process(url: str, tenant: str, out: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "metastore", "gc", "--url", url, "--tenant", tenant,
         "--retention", "0", "--lease-seconds", "2", "--master", "local[1]", "--json",
         "--out", str(out), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def wait_for_mark(http: Http, scope: str, process: subprocess.Popen[str]) -> dict[str, Any]:
    """The task record once the run has recorded its mark."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        record = task(http, scope)
        if record is not None and (record.get("progress") or {}).get("mark"):
            return record
        assert process.poll() is None, process.communicate()
        time.sleep(0.02)
    raise TimeoutError("the gc run recorded no mark")


def busy_or_done(spark: SparkSession, *argv: str) -> Ran:
    """A run retried while the killed run's lease has not expired yet."""
    deadline = time.monotonic() + 60
    while True:
        ran = gc(spark, *argv)
        if ran.status != 2 or time.monotonic() > deadline:
            return ran
        time.sleep(0.5)


def test_a_run_killed_mid_sweep_is_finished_by_a_rerun(
    spark: SparkSession, node: NodeProcess, tmp_path: Path
) -> None:
    http = Http(node.url)
    tables = []
    for catalog in ("k0", "k1", "k2", "k3"):
        client = setup_catalog(http, "killed", catalog)
        table = client.create_table(("ns", "t"), SCHEMA)
        for i in range(25):
            append(table, i)
        tables.append((client, catalog))
    process = gc_process(node.url, "killed", tmp_path / "gc", "--grace", "0")
    try:
        wait_for_mark(http, "killed", process)
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.communicate()
    ran = busy_or_done(spark, "--url", node.url, "--tenant", "killed", "--grace", "0",
                       "--retention", "0", "--out", str(tmp_path / "gc"))  # fmt: skip
    assert ran.status == 0, ran.stdout
    assert ran.summary["resumed"] is True
    for client, _ in tables:
        assert client.load_table(("ns", "t")).scan().to_arrow().num_rows == 25
    audit_clean(spark, node.url, "killed", tmp_path / "audit")


def test_a_second_run_on_a_held_scope_refuses_by_the_lease(
    spark: SparkSession, node: NodeProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    http = Http(node.url)
    setup_catalog(http, "twice", "c")
    first = gc_process(node.url, "twice", tmp_path / "first", "--grace", "600")
    try:
        wait_for_mark(http, "twice", first)  # marked; now waiting out its grace period
        capsys.readouterr()
        ran = gc(spark, "--url", node.url, "--tenant", "twice", "--grace", "0",
                 "--out", str(tmp_path / "second"))  # fmt: skip
        assert ran.status == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "holds the lease on scope 'twice'" in err[0], err
        assert first.poll() is None  # the first run is untouched
    finally:
        first.kill()
        first.communicate()


def test_the_spark_mark_equals_the_mark_of_each_catalog_in_one_process(
    spark: SparkSession, node: NodeProcess, tmp_path: Path
) -> None:
    http = Http(node.url)
    for catalog in ("s0", "s1"):
        table = setup_catalog(http, "sparked", catalog).create_table(("ns", "t"), SCHEMA)
        for i in range(25):
            append(table, i)
    times = MarkTimes(time.time_ns() // 1000 + 1_000_000, 0, 0)
    scope = Scope("sparked")
    source = from_node(NodeClient(node.url))
    try:
        path = tmp_path / "candidates.parquet"
        progress = Progress(spark.sparkContext, "gc mark", enabled=False)
        marked = {
            (m.tenant, m.catalog): m for m in mark(spark, source, scope, times, path, progress)
        }
        assert set(marked) == {("sparked", "s0"), ("sparked", "s1")}  # no tenant records
        written = pq.read_table(path).to_pylist()
        for (tenant, catalog), kept in marked.items():
            rows = dict(read_catalogs(str(source.path), [(tenant, catalog)]))
            alone = mark_catalog(CatalogRows(tenant, catalog, rows, default_codec()), times)
            assert kept.mark_head == alone.mark_head and kept.objects == alone.objects
            assert kept.candidates == len(alone.candidates) > 0
            assert sorted(
                (c["type"], int(c["id"])) for c in written if c["catalog"] == catalog
            ) == (sorted((t, i) for t, i, _, _ in alone.candidates))
        assert progress.objects.value == sum(m.objects for m in marked.values())
    finally:
        source.close()


def test_a_dry_run_says_what_it_would_delete_and_deletes_nothing(
    spark: SparkSession, node: NodeProcess, tmp_path: Path
) -> None:
    http = Http(node.url)
    table = setup_catalog(http, "dry", "c").create_table(("ns", "t"), SCHEMA)
    for i in range(25):
        append(table, i)
    before = stored_objects(http, "dry")
    ran = gc(spark, "--url", node.url, "--tenant", "dry", "--grace", "0", "--retention", "0",
             "--dry-run", "--out", str(tmp_path / "gc"))  # fmt: skip
    assert ran.status == 0, ran.stdout
    summary = ran.summary
    assert summary["deleted"] == 0 and summary["files_deleted"] == 0
    assert 0 < summary["would_delete"] <= summary["candidates"]
    assert "dry run: would delete" in ran.stdout
    assert len(pq.read_table(summary["candidates_file"])) == summary["candidates"]
    assert stored_objects(http, "dry") == before
    record = task(http, "dry")  # it held the lease, and let it go
    assert record is not None and record["status"] == "done" and record["summary"]["dry_run"]
    again = gc(spark, "--url", node.url, "--tenant", "dry", "--grace", "0", "--retention", "0",
               "--out", str(tmp_path / "gc2"))  # fmt: skip
    assert again.status == 0, again.stdout
    assert again.summary["deleted"] == summary["would_delete"]


def test_bad_input_exits_2_with_one_line(
    spark: SparkSession, node: NodeProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = ("--out", str(tmp_path / "gc"))
    cases = [
        (("--kafka", "127.0.0.1:1", *out), "pass --url, or --node"),
        (("--url", node.url, "--tenant", "nobody", *out), "unknown tenant 'nobody'"),
        (("--url", node.url, "--tenant", "empty", "--phase", "sweep", *out), "no mark to sweep"),
        (("--url", node.url, "--grace", "-1", *out), "--grace: must be between 0 and"),
    ]
    setup_catalog(Http(node.url), "empty", "c")
    for argv, message in cases:
        capsys.readouterr()
        ran = gc(spark, *argv)
        assert ran.status == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], (argv, err)


def test_frozen_log_pages_of_a_table_registered_again_between_mark_and_sweep_are_spared(
    spark: SparkSession, node: NodeProcess, tmp_path: Path
) -> None:
    http = Http(node.url)
    client = setup_catalog(http, "pages", "c")
    table = client.create_table(("ns", "a"), SCHEMA)
    for i in range(34):  # one frozen page of snapshots (32 items) and a head page
        append(table, i)
    location = table.refresh().metadata_location
    rows = CatalogRows("pages", "c", checkpoint_rows(http, "pages", "c"), default_codec())
    head_page = piece_of(http, "pages", "c", "a", "snapshots")
    frozen = rows.piece(head_page)["prev"]
    assert frozen
    forget(http, "pages", "c", "ns", "a")
    for i in range(22):  # the drop's HEAD leaves the recent HEADs
        http.ok("POST", "/api/v1/tenants/pages/catalogs/c/namespaces", {"namespace": [f"n{i}"]})
    out = tmp_path / "gc"
    ran = gc(spark, "--url", node.url, "--tenant", "pages", "--catalog", "c", "--grace", "0",
             "--retention", "0", "--phase", "mark", "--out", str(out))  # fmt: skip
    assert ran.status == 0, ran.stdout
    candidates = {
        (c["type"], int(c["id"])) for c in pq.read_table(ran.summary["candidates_file"]).to_pylist()
    }
    assert {("metadata-piece", head_page), ("metadata-piece", frozen)} <= candidates
    # between mark and sweep the table comes back from its metadata file: same pages
    client.register_table(("ns", "b"), location)
    assert piece_of(http, "pages", "c", "b", "snapshots") == head_page
    ran = gc(spark, "--url", node.url, "--tenant", "pages", "--catalog", "c", "--grace", "0",
             "--retention", "0", "--phase", "sweep", "--out", str(out))  # fmt: skip
    assert ran.status == 0, ran.stdout
    assert len(client.load_table(("ns", "b")).metadata.snapshots) == 34
    audit_clean(spark, node.url, "pages", tmp_path / "audit")


@pytest.mark.slow  # two gc runs and a maintain run on Spark
def test_a_table_dropped_without_purge_keeps_its_files_until_its_retention_passes(
    spark: SparkSession, node: NodeProcess, tmp_path: Path
) -> None:
    """Within the catalog's ``drop.retention-ms`` a dropped table is live for garbage
    collection and maintenance (its objects are reachable, its files referenced): a gc run
    and a maintain run delete none of them and it undrops with its rows; past the
    retention the gc run collects it and its files."""
    from tests.pipeline.maintain.test_maintain import run_maintain

    http = Http(node.url)
    client = setup_catalog(http, "kept", "c")
    table = client.create_table(("ns", "t"), SCHEMA)
    for i in range(3):
        append(table, i)
    root = Path(client.load_table(("ns", "t")).metadata.location.removeprefix("file://"))
    files = {p for p in root.rglob("*") if p.is_file()}
    client.drop_table(("ns", "t"))
    for i in range(DEFAULT_RECENT_HEADS + 1):  # the drop's commit leaves the recent HEADs
        client.create_namespace(f"filler{i}")
    base = "/api/v1/tenants/kept/catalogs/c"

    maintained = run_maintain(spark, "--url", node.url, "--tenant", "kept", "--out",
                              str(tmp_path / "maintain"), "--older-than", "0", "--json",
                              "--no-progress")  # fmt: skip
    assert maintained.status == 0, maintained.stdout
    ran = gc(spark, "--url", node.url, "--tenant", "kept", "--grace", "0", "--retention", "0",
             "--out", str(tmp_path / "gc1"))  # fmt: skip
    assert ran.status == 0, ran.stdout
    assert ran.summary["deleted"] > 0 and ran.summary["collected"] == 0  # history went
    assert {p for p in root.rglob("*") if p.is_file()} == files
    http.ok("POST", f"{base}/namespaces/ns/tables/t/undrop")
    assert sorted(client.load_table(("ns", "t")).scan().to_arrow()["id"].to_pylist()) == [0, 1, 2]

    client.drop_table(("ns", "t"))
    http.ok("POST", f"{base}/properties", {"updates": {"drop.retention-ms": "0"}})
    ran = gc(spark, "--url", node.url, "--tenant", "kept", "--grace", "0", "--retention", "0",
             "--out", str(tmp_path / "gc2"))  # fmt: skip
    assert ran.status == 0 and ran.summary["collected"] == 1, ran.stdout
    assert not [p for p in root.rglob("*.parquet")]  # purged with it
    assert http.call("POST", f"{base}/namespaces/ns/tables/t/undrop")[0] == 404


def test_a_recorded_mark_the_job_did_not_write_is_not_swept(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A sweep resumes from the mark its task record names. The record is the node's
    (any service admin may write it): one naming a file elsewhere made the sweep delete
    whatever that file listed, here a file outside every table and warehouse."""
    with NodeProcess(tmp_path / "data", log_path=tmp_path / "node.log") as node:
        http = Http(node.url)
        precious = tmp_path / "operator-home" / "precious.txt"
        precious.parent.mkdir()
        precious.write_text("must survive gc\n")
        planted = tmp_path / "elsewhere" / "mark-1" / "mark.json"  # a mark's name, not --out
        planted.parent.mkdir(parents=True)
        orphan = {"location": precious.parent.as_uri(), "path": precious.as_uri()}
        catalog = {"tenant": "default", "catalog": "default", "mark_head": "0", "heads": {}}
        counts = {"objects": 0, "reachable": 0, "candidates": 0, "candidate_bytes": 0}
        files = {"unlisted_locations": 0, "files": [{**orphan, "modified_us": 0, "size": 0}]}
        planted.write_text(json.dumps({"catalogs": [{**catalog, **counts, **files}]}))
        mark_state = {
            "file": str(planted),
            "path": str(planted.with_name("candidates.parquet")),
            "marked": 0,
            "candidates": 0,
            "mark_us": 0,
            "objects_per_s": 0,
            "grace_s": 0,
            "retention_s": 0,
        }
        task = {"job": "gc", "scope": "all", "run": "planted", "lease-seconds": 1}
        http.ok("POST", "/api/v1/admin/tasks", task)
        progress = {"mark": mark_state, "swept": 0, "counts": {}}
        renewal = {"run": "planted", "lease-seconds": 1, "progress": progress}
        record = http.ok("PUT", "/api/v1/admin/tasks/gc/all", renewal)
        while time.time() * 1000 <= record["lease-expires-at-ms"]:  # a crashed run's lease
            time.sleep(0.1)
        ran = gc(spark, "--url", node.url, "--phase", "sweep", "--out", str(tmp_path / "out"))
        assert ran.status == 2, ran.stdout
        assert precious.read_text() == "must survive gc\n"


def test_a_view_standing_at_a_tables_past_location_keeps_its_metadata_files(
    spark: SparkSession, node: NodeProcess, tmp_path: Path
) -> None:
    """A table moved away and back leaves its past location in its retained versions,
    and a view may be made there meanwhile (a table moved away frees its location): the
    view's metadata files are named by no table, and a routine run deleted the view's
    current one. The folder of any location a view holds is now never listed."""
    http = Http(node.url)
    client = setup_catalog(http, "views", "c")
    table = client.create_table(("ns", "t"), SCHEMA)
    home = table.metadata.location
    there = home.rsplit("/", 1)[0] + "/reports"
    prefix = http.ok("GET", "/v1/config?warehouse=views/c")["overrides"]["prefix"]
    for location in (there, home):  # a metadata file of the table's is left at ``there``
        move = {"updates": [{"action": "set-location", "location": location}]}
        http.ok("POST", f"/v1/{prefix}/namespaces/ns/tables/t", move)
    view = {
        "name": "reports",
        "location": there,
        "schema": {"type": "struct", "schema-id": 0, "fields": [
            {"id": 1, "name": "id", "type": "long", "required": False}]},
        "view-version": {
            "version-id": 1, "timestamp-ms": 1_700_000_000_000, "schema-id": 0,
            "summary": {"engine-name": "spark"}, "default-namespace": ["ns"],
            "representations": [{"type": "sql", "sql": "SELECT 1", "dialect": "spark"}],
        },
        "properties": {},
    }  # fmt: skip
    made = http.ok("POST", f"/v1/{prefix}/namespaces/ns/views", view)
    metadata = Path(made["metadata-location"].removeprefix("file://"))
    assert metadata.is_file() and str(metadata).startswith(there.removeprefix("file://"))
    ran = gc(spark, "--url", node.url, "--tenant", "views", "--grace", "0",
             "--out", str(tmp_path / "gc"))  # fmt: skip
    assert ran.status == 0, ran.stdout
    assert metadata.is_file(), ran.stdout
    loaded = http.ok("GET", f"/v1/{prefix}/namespaces/ns/views/reports")
    assert loaded["metadata-location"] == made["metadata-location"]
