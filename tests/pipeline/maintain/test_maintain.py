"""``metastore maintain`` against one real node, tables written by PyIceberg to the
node's ``file://`` warehouse: snapshots expire by each retention property (and by
a namespace's or the catalog's default), a concurrent append during expiry
survives, the files of expired snapshots are gone while the table still scans with
its rows, orphan removal keeps everything referenced and removes only old
unreferenced files, ``--dry-run`` changes nothing, and a file outside a table's
location is never touched."""

from __future__ import annotations

import io
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.manifest import read_manifest_list
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField
from pyspark.sql import SparkSession

from harness.node import NodeProcess
from metastore.node.cli import _parser
from metastore.pipeline.maintain import maintain_command as maintain
from metastore.pipeline.maintain.maintain_commit import IcebergClient, Loaded, TableName, expire
from metastore.pipeline.node_client import NodeClient
from tests.pipeline.conftest import Ran
from tests.pipeline.support import Http

TENANT = "lake"
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))
AGE = "history.expire.max-snapshot-age-ms"
KEEP = "history.expire.min-snapshots-to-keep"
REF_AGE = "history.expire.max-ref-age-ms"
LOG_MAX = "write.metadata.previous-versions-max"
OLD_S = 10 * 24 * 3600  # a planted orphan's age
THRESHOLD_S = 3600  # --older-than of the runs


def run_maintain(
    spark: SparkSession, *argv: str, client: Callable[[NodeClient], IcebergClient] = IcebergClient
) -> Ran:
    """``metastore maintain <argv>`` in this process, on the shared session."""
    args = _parser().parse_args(["maintain", *argv])
    out = io.StringIO()
    return Ran(maintain.run(args, out, spark, client), out.getvalue())


def rows(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64())})


def ids(table: Table) -> list[int]:
    return sorted(table.scan().to_arrow()["id"].to_pylist())


def local(path: str) -> Path:
    return Path(path.removeprefix("file://"))


def snapshot_files(table: Table) -> set[Path]:
    """Every manifest list, manifest and live data file of every snapshot of ``table``."""
    found: set[Path] = set()
    for snapshot in table.metadata.snapshots:
        found.add(local(snapshot.manifest_list))
        for manifest in read_manifest_list(table.io.new_input(snapshot.manifest_list)):
            found.add(local(manifest.manifest_path))
            for entry in manifest.fetch_manifest_entry(table.io):
                found.add(local(entry.data_file.file_path))
    return found


def all_files(table: Table) -> set[Path]:
    root = local(table.metadata.location)
    return {p for p in root.rglob("*") if p.is_file()}


def make_old(path: Path) -> None:
    then = time.time() - OLD_S
    os.utime(path, (then, then))


@dataclass
class Lake:
    node: NodeProcess
    http: Http
    clients: dict[str, RestCatalog]

    def catalog(self, name: str, properties: dict[str, str] | None = None) -> RestCatalog:
        self.http.ok(
            "POST",
            f"/api/v1/tenants/{TENANT}/catalogs",
            {"name": name, "properties": properties or {}},
        )
        client = RestCatalog(name, uri=self.node.url, warehouse=f"{TENANT}/{name}")
        self.clients[name] = client
        return client

    def maintain(
        self,
        spark: SparkSession,
        out: Path,
        *args: str,
        client: Callable[[NodeClient], IcebergClient] = IcebergClient,
    ) -> Ran:
        return run_maintain(
            spark, "--url", self.node.url, "--tenant", TENANT, "--out", str(out),
            "--older-than", str(THRESHOLD_S), "--json", "--no-progress", *args, client=client,
        )  # fmt: skip


def appended(client: RestCatalog, name: str, batches: int, **properties: str) -> Table:
    table = client.create_table(name, SCHEMA, properties=properties)
    for i in range(batches):
        table.append(rows(i))
    loaded: Table = client.load_table(name)
    return loaded


@contextmanager
def running_lake(root: Path) -> Iterator[Lake]:
    """A node of its own with the tenant made: maintain reads every table of a store."""
    with NodeProcess(root / "data", log_path=root / "node.log") as node:
        http = Http(node.url)
        http.ok("POST", "/api/v1/tenants", {"name": TENANT})
        yield Lake(node, http, {})


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    with running_lake(tmp_path_factory.mktemp("maintain")) as lake:
        yield lake


@dataclass
class Policies:
    """Catalog ``policy``: one table per rule, and ``strict``: a catalog default."""

    before: dict[str, Table]
    before_files: dict[str, set[Path]]
    before_refs: dict[str, set[Path]]  # what the snapshots referenced before the runs
    dry: Ran
    ran: Ran
    after: dict[str, Table]
    orphans: dict[str, Path]


@pytest.fixture(scope="module")
def policies(lake: Lake, spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Policies:
    policy = lake.catalog("policy")
    policy.create_namespace("ns")
    policy.create_namespace("aging", {AGE: "1"})
    tables: dict[str, Table] = {}
    # max age 1 ms: everything but the current snapshot expires; the overwrite makes
    # the first appends' data files unneeded
    aged = policy.create_table("ns.aged", SCHEMA, properties={AGE: "1"})
    aged.append(rows(1))
    aged.append(rows(2))
    aged.overwrite(rows(3, 4))
    tables["aged"] = policy.load_table("ns.aged")
    tables["kept"] = appended(policy, "ns.kept", 4, **{AGE: "1", KEEP: "3"})
    tagged = appended(policy, "ns.tagged", 2, **{REF_AGE: "1"})
    first = tagged.metadata.snapshots[0].snapshot_id
    tagged.manage_snapshots().create_tag(first, "v1").commit()
    tables["tagged"] = policy.load_table("ns.tagged")
    tables["young"] = appended(policy, "ns.young", 3)  # Iceberg's defaults: nothing expires
    tables["by_namespace"] = appended(policy, "aging.plain", 3)
    # a metadata log of one entry: older metadata files are named only by the table's
    # versions the store keeps (its history), never by the current metadata
    tables["short_log"] = appended(policy, "ns.short_log", 3, **{LOG_MAX: "1"})
    tables["overridden"] = appended(policy, "aging.overridden", 3, **{KEEP: "2"})
    strict = lake.catalog("strict", {AGE: "1", KEEP: "2"})
    strict.create_namespace("ns")
    tables["by_catalog"] = appended(strict, "ns.t", 4)
    # orphans in aged's location: an old one goes, a young one stays; an old file
    # beside the table's location (another directory) is never looked at
    data = local(tables["aged"].metadata.location) / "data"
    orphans = {"old": data / "old-orphan.parquet", "young": data / "young-orphan.parquet"}
    beside = local(tables["aged"].metadata.location).parent / "aged-backup" / "keep.parquet"
    orphans["beside"] = beside
    beside.parent.mkdir()
    for path in orphans.values():
        pq.write_table(rows(99), path)
    make_old(orphans["old"])
    make_old(orphans["beside"])
    for path in local(tables["short_log"].metadata.location).glob("metadata/*.metadata.json"):
        make_old(path)
    before_files = {name: all_files(table) for name, table in tables.items()}
    before_refs = {name: snapshot_files(table) for name, table in tables.items()}
    out = tmp_path_factory.mktemp("maintain-out")
    dry = lake.maintain(spark, out / "dry", "--dry-run")
    unchanged = {name: all_files(table) for name, table in tables.items()}
    assert unchanged == before_files, "a dry run deleted files"
    ran = lake.maintain(spark, out / "run")
    after = {
        name: (strict if name == "by_catalog" else policy).load_table(table.name())
        for name, table in tables.items()
    }
    return Policies(tables, before_files, before_refs, dry, ran, after, orphans)


def snapshot_count(table: Table) -> int:
    return len(table.metadata.snapshots)


def test_dry_run_lists_and_changes_nothing(policies: Policies) -> None:
    summary = policies.dry.summary
    assert policies.dry.status == 0, policies.dry.stdout
    assert summary["dry_run"] is True
    assert summary["snapshots_expired"] == policies.ran.summary["snapshots_expired"] > 0
    assert summary["files_deleted"] == policies.ran.summary["files_deleted"] > 0
    assert summary["orphans_deleted"] == 1
    log = Path(summary["log"]).read_text()
    assert "would-delete" in log and '"deleted"' not in log


def test_the_summary_and_the_finished_task(lake: Lake, policies: Policies) -> None:
    assert policies.ran.status == 0, policies.ran.stdout
    summary = policies.ran.summary
    tasks = lake.http.ok("GET", "/api/v1/admin/tasks")["tasks"]
    (task,) = [t for t in tasks if t["job"] == "maintain" and t["scope"] == TENANT]
    assert task["status"] == "done"
    assert task["summary"]["snapshots_expired"] == summary["snapshots_expired"]
    expired = sum(
        snapshot_count(policies.before[n]) - snapshot_count(policies.after[n])
        for n in policies.before
    )
    assert summary["snapshots_expired"] == expired
    assert summary["orphans_deleted"] == 1
    assert summary["outside_skipped"] == 0 and summary["failed"] == 0
    assert summary["files_per_s"] > 0


def test_max_snapshot_age_expires_all_but_the_current_snapshot(policies: Policies) -> None:
    before, after = policies.before["aged"], policies.after["aged"]
    assert [s.snapshot_id for s in after.metadata.snapshots] == [
        before.metadata.current_snapshot_id
    ]
    assert ids(after) == [3, 4]


def test_min_snapshots_to_keep(policies: Policies) -> None:
    before, after = policies.before["kept"], policies.after["kept"]
    assert [s.snapshot_id for s in after.metadata.snapshots] == [
        s.snapshot_id for s in before.metadata.snapshots[-3:]
    ]
    assert ids(after) == [0, 1, 2, 3]


def test_max_ref_age_removes_an_old_tag_and_not_main(policies: Policies) -> None:
    before, after = policies.before["tagged"], policies.after["tagged"]
    assert set(before.metadata.refs) == {"main", "v1"}
    assert set(after.metadata.refs) == {"main"}
    # snapshots are younger than the default age: none expires with the tag
    assert snapshot_count(after) == snapshot_count(before)
    assert policies.after["young"].metadata.snapshots == policies.before["young"].metadata.snapshots


def test_namespace_and_catalog_defaults_below_the_table(policies: Policies) -> None:
    assert snapshot_count(policies.before["by_namespace"]) == 3
    assert snapshot_count(policies.after["by_namespace"]) == 1  # the namespace's age
    assert snapshot_count(policies.after["overridden"]) == 2  # the table's own minimum
    assert snapshot_count(policies.after["by_catalog"]) == 2  # the catalog's minimum
    assert ids(policies.after["by_catalog"]) == [0, 1, 2, 3]


def test_files_of_expired_snapshots_are_gone_and_the_rest_remains(policies: Policies) -> None:
    for name, before in policies.before.items():
        after = policies.after[name]
        needed = snapshot_files(after)
        assert all(p.exists() for p in needed), name
        unneeded = policies.before_refs[name] - needed
        assert not any(p.exists() for p in unneeded), name
        for entry in after.metadata.metadata_log:
            assert local(entry.metadata_file).exists(), name
        assert ids(after) == ids(before), name
    gone = policies.before_refs["aged"] - snapshot_files(policies.after["aged"])
    assert any(p.suffix == ".parquet" for p in gone)  # the overwritten data files


def test_orphans_old_go_young_stay_outside_untouched(policies: Policies) -> None:
    assert not policies.orphans["old"].exists()
    assert policies.orphans["young"].exists()
    assert policies.orphans["beside"].exists()


def test_metadata_files_of_stored_table_versions_stay(policies: Policies) -> None:
    """Old, and beyond the metadata log, but the catalog's history still names them."""
    table = policies.after["short_log"]
    assert len(table.metadata.metadata_log) == 1
    kept = {p for p in policies.before_files["short_log"] if p.name.endswith(".metadata.json")}
    assert len(kept) >= 4  # create + 3 appends
    assert all(p.exists() for p in kept)


# --- a concurrent append ------------------------------------------------------------


class AppendingClient(IcebergClient):
    """The node's client, with a real writer appending right after the first load:
    the expiry planned on that load must lose its commit and plan again."""

    def __init__(self, node: NodeClient, table: Table) -> None:
        super().__init__(node)
        self.table = table
        self.loads = 0

    def load(self, table: TableName) -> Loaded | None:
        loaded = super().load(table)
        self.loads += 1
        if self.loads == 1:
            self.table.append(rows(100))
        return loaded


def test_a_concurrent_append_during_expiry_survives(
    lake: Lake, spark: SparkSession, tmp_path: Path
) -> None:
    client = lake.catalog("busy")
    client.create_namespace("ns")
    table = appended(client, "ns.t", 3, **{AGE: "1"})
    writer = AppendingClient(NodeClient(lake.node.url), table)
    result = expire(writer, TableName(TENANT, "busy", ("ns",), "t"), ())
    assert result.attempts == 2  # the first commit lost to the append
    after = client.load_table("ns.t")
    current = after.metadata.current_snapshot_id
    assert [s.snapshot_id for s in after.metadata.snapshots] == [current]
    assert current == result.before["current-snapshot-id"]  # the append's snapshot
    assert ids(after) == [0, 1, 2, 100]
    table.append(rows(101))  # appends go on after expiry
    ran = lake.maintain(spark, tmp_path, "--catalog", "busy")
    assert ran.status == 0, ran.stdout
    after = client.load_table("ns.t")
    assert ids(after) == [0, 1, 2, 100, 101]
    assert all(p.exists() for p in snapshot_files(after))


class ReplacingClient(IcebergClient):
    """The node's client, with a real client dropping table ``name`` (kept, restorable)
    and creating it again, at its location, before the job's first load: after the job
    read the store, before it expires and loads each table."""

    def __init__(self, node: NodeClient, catalog: RestCatalog, name: str) -> None:
        super().__init__(node)
        self.catalog, self.name = catalog, name
        self.replaced: Table | None = None

    def load(self, table: TableName) -> Loaded | None:
        if self.replaced is None:
            self.catalog.drop_table(self.name)
            self.replaced = self.catalog.create_table(self.name, SCHEMA)
            self.replaced.append(rows(9))
        return super().load(table)


def test_a_kept_table_dropped_and_made_again_during_a_run_keeps_its_files(
    lake: Lake, spark: SparkSession, tmp_path: Path
) -> None:
    """The job loads each table by name after it read the store; a table made again under
    a dropped one's name (at its location) is another table: the dropped one, kept for
    undrop, lost every file to the orphan sweep as no snapshot of the new one's."""
    client = lake.catalog("remade")
    client.create_namespace("ns")
    old = appended(client, "ns.t", 2)
    for path in all_files(old):
        make_old(path)
    before = all_files(old)
    replacing = ReplacingClient(NodeClient(lake.node.url), client, "ns.t")
    ran = lake.maintain(spark, tmp_path, "--catalog", "remade", client=lambda _: replacing)
    assert ran.status == 0, ran.stdout
    new = replacing.replaced
    assert new is not None and new.metadata.location == old.metadata.location  # the test's premise
    assert ran.summary["orphans_deleted"] == 0, ran.stdout
    assert before <= all_files(old)
    assert ids(old) == [0, 1]  # the kept table reads, as an undrop would find it
    assert ids(client.load_table("ns.t")) == [9]


# --- containment --------------------------------------------------------------------


def test_a_file_outside_the_table_location_is_never_touched(
    lake: Lake, spark: SparkSession, tmp_path: Path
) -> None:
    """Table ``b`` adds a file that lies in table ``a``'s location; once ``b``'s
    snapshot expires the file is unneeded by ``b``, but outside ``b``'s location:
    skipped and counted (exit 1), never deleted."""
    client = lake.catalog("shared")
    client.create_namespace("ns")
    a = appended(client, "ns.a", 1)
    foreign = local(a.metadata.location) / "data" / "foreign.parquet"
    pq.write_table(rows(7), foreign)
    b = client.create_table("ns.b", SCHEMA, properties={AGE: "1"})
    b.add_files([f"file://{foreign}"])
    b.overwrite(rows(8))
    ran = lake.maintain(spark, tmp_path, "--catalog", "shared")
    assert ran.status == 1, ran.stdout
    assert ran.summary["outside_skipped"] == 1
    assert foreign.exists()
    assert ids(client.load_table("ns.b")) == [8]
    assert ids(client.load_table("ns.a")) == [0]


def test_a_table_folder_swapped_for_a_link_has_nothing_deleted_below_it(
    lake: Lake, spark: SparkSession, tmp_path: Path
) -> None:
    """A client that writes in its table's folder can swap it for a link to another
    catalog's table (its metadata copied there, so the table still reads). By real
    paths, everything of the other table was inside this one's location and named by
    none of its snapshots: the orphan sweep deleted all of it."""
    other = lake.catalog("linked-victim")
    other.create_namespace("ns")
    victim = appended(other, "ns.v", 2)
    victim_dir = local(victim.metadata.location)
    pending = victim_dir / "data" / "pending.parquet"  # a writer's file, not committed yet
    pq.write_table(rows(5), pending)
    client = lake.catalog("linked")
    client.create_namespace("ns")
    mine = client.create_table("ns.mine", SCHEMA)
    mine_dir = local(mine.metadata.location)
    for path in (mine_dir / "metadata").iterdir():
        shutil.copy(path, victim_dir / "metadata" / path.name)
    shutil.rmtree(mine_dir)
    os.symlink(victim_dir, mine_dir)
    for path in all_files(victim):
        make_old(path)
    before = all_files(victim)
    ran = lake.maintain(spark, tmp_path, "--catalog", "linked")
    assert ran.summary["orphans_deleted"] == 0, ran.stdout
    assert all_files(victim) == before and pending.exists()
    assert ids(other.load_table("ns.v")) == [0, 1]


# --- the task lease -----------------------------------------------------------------


def test_a_run_is_refused_while_another_holds_the_lease(
    lake: Lake, spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lake.catalog("held")
    task = {"job": "maintain", "scope": f"{TENANT}/held", "run": "other", "lease-seconds": 600}
    lake.http.ok("POST", "/api/v1/admin/tasks", task)
    ran = lake.maintain(spark, tmp_path / "refused", "--catalog", "held")
    assert ran.status == 2
    assert "holds the lease" in capsys.readouterr().err
    lake.http.ok("DELETE", f"/api/v1/admin/tasks/maintain/{TENANT}/held?run=other")
    ran = lake.maintain(spark, tmp_path / "after", "--catalog", "held")
    assert ran.status == 0, ran.stdout
