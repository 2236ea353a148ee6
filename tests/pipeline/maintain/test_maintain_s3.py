"""``metastore maintain`` on a catalog whose storage is an S3 bucket (moto): snapshots
expire, the objects of expired snapshots are deleted from the bucket, an unreferenced
object in a table's location is removed as an orphan, and a table of the same bucket
outside the run's tenant keeps every object."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.table import Table
from pyspark.sql import SparkSession

from harness.node import NodeProcess
from harness.s3 import KEYS, S3Process
from metastore.node.cli import _parser
from metastore.pipeline.maintain import maintain_command as maintain
from tests.pipeline.conftest import Ran
from tests.pipeline.support import Http

pytestmark = pytest.mark.slow  # a node, a maintain run on Spark and an S3 server

SECRETS_ENV = "METASTORE_STORAGE_CREDENTIALS_S3"
AGE = "history.expire.max-snapshot-age-ms"


def rows(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64())})


@dataclass
class Ran2:
    ran: Ran
    bucket: str
    before: dict[str, set[str]]  # every object of each table before the run
    live: dict[str, set[str]]  # what each table's snapshots reference after it
    orphans: tuple[str, str]  # a data file and a metadata file nothing references
    tables: dict[str, Table]


def keys(s3: S3Process, bucket: str, table: Table) -> set[str]:
    return set(s3.keys_in(bucket, table.location().removeprefix(f"s3://{bucket}/") + "/"))


def referenced(table: Table, bucket: str) -> set[str]:
    found = {table.metadata_location}
    for snapshot in table.metadata.snapshots:
        found.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            found.add(manifest.manifest_path)
            found.update(e.data_file.file_path for e in manifest.fetch_manifest_entry(table.io))
    return {path.removeprefix(f"s3://{bucket}/") for path in found}


@pytest.fixture(scope="module")
def ran(
    s3_server: S3Process, spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Ran2]:
    root = tmp_path_factory.mktemp("maintain-s3")
    bucket = s3_server.make_bucket(f"maint-{uuid.uuid4().hex[:12]}")
    env = {SECRETS_ENV: json.dumps(KEYS.io_properties())}
    with NodeProcess(root / "data", log_path=root / "node.log", env=env) as node:
        http = Http(node.url)
        clients = {}
        for tenant in ("lake", "other"):
            http.ok("POST", "/api/v1/tenants", {"name": tenant})
            storage = {
                "type": "s3",
                "root": f"s3://{bucket}/{tenant}",
                "io-properties": s3_server.io_properties(),
                "credentials": {"env": SECRETS_ENV},
            }
            http.ok("POST", f"/api/v1/tenants/{tenant}/catalogs", {"name": "c", "storage": storage})
            clients[tenant] = RestCatalog(
                tenant,
                uri=node.url,
                warehouse=f"{tenant}/c",
                **s3_server.io_properties(),
                **KEYS.io_properties(),
            )
        tables: dict[str, Table] = {}
        for tenant, client in clients.items():
            client.create_namespace("ns")
            table = client.create_table("ns.t", rows(0).schema, properties={AGE: "1"})
            table.append(rows(1))
            table.append(rows(2))
            table.overwrite(rows(3, 4))  # the appends' data files are no longer needed
            tables[tenant] = client.load_table("ns.t")
        home = tables["lake"].location().removeprefix(f"s3://{bucket}/")
        orphans = (
            f"{home}/data/orphan.parquet",
            f"{home}/metadata/00099-{uuid.uuid4()}.metadata.json",  # a lost commit's file
        )
        for orphan in orphans:
            s3_server.client().put_object(Bucket=bucket, Key=orphan, Body=b"not referenced")
        before = {tenant: keys(s3_server, bucket, t) for tenant, t in tables.items()}
        args = _parser().parse_args(
            [
                "maintain", "--url", node.url, "--tenant", "lake",
                "--out", str(Path(root) / "out"), "--older-than", "0", "--json", "--no-progress",
            ]
        )  # fmt: skip
        # the job resolves the catalog's credentials reference in its Spark tasks, as a
        # node does: the executors get the variable (spark.executorEnv in production)
        executors = spark.sparkContext.environment
        executors[SECRETS_ENV] = env[SECRETS_ENV]
        try:
            out = io.StringIO()
            result = Ran(maintain.run(args, out, spark), out.getvalue())
        finally:
            del executors[SECRETS_ENV]
        after = {tenant: clients[tenant].load_table("ns.t") for tenant in clients}
        live = {tenant: referenced(t, bucket) for tenant, t in after.items()}
        yield Ran2(result, bucket, before, live, orphans, after)


def test_expired_snapshots_objects_and_orphans_are_gone(ran: Ran2, s3_server: S3Process) -> None:
    assert ran.ran.status == 0, ran.ran.stdout
    summary = ran.ran.summary
    # two appends and an overwrite (a delete and an append): all but the newest expire
    assert summary["snapshots_expired"] == 3 and summary["files_deleted"] > 0, summary
    assert summary["orphans_deleted"] == 2, summary
    table = ran.tables["lake"]
    assert len(table.metadata.snapshots) == 1
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [3, 4]
    now = keys(s3_server, ran.bucket, table)
    assert not set(ran.orphans) & now
    assert ran.live["lake"] <= now  # everything the live snapshot needs is still there
    gone = ran.before["lake"] - now
    unneeded = gone - set(ran.orphans)
    assert any(k.endswith(".parquet") for k in unneeded)  # the appends' data files
    assert all(not k.endswith(".metadata.json") for k in unneeded)  # its history keeps them


def test_another_tenants_table_in_the_bucket_is_untouched(ran: Ran2, s3_server: S3Process) -> None:
    other = ran.tables["other"]
    assert keys(s3_server, ran.bucket, other) == ran.before["other"]
    assert len(other.metadata.snapshots) == 4
