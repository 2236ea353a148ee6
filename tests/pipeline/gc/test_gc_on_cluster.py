"""``metastore gc`` on a cluster: the owners write the deletions as tombstones in the
objects changelog, so afterwards every node's view has the same digest, ``replay`` of
the changelog has it too, the audit of the changelog is clean and every table reads
the same on every node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyspark.sql import SparkSession

from harness.cluster import QUIET_LEASES, Cluster, view_state
from tests.pipeline.conftest import run_job
from tests.pipeline.gc.test_gc import SCHEMA, append, gc, setup_catalog
from tests.pipeline.rebuild.test_rebuild import converged
from tests.pipeline.support import Http

pytestmark = pytest.mark.slow
TENANT = "kgc"
CATALOGS = ("a", "b")
PARTITIONS = 3
APPENDS = 25


@pytest.fixture(scope="module")
def cluster(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("gc-cluster")
    nodes = Cluster(
        kafka_bootstrap,
        f"gc{os.urandom(5).hex()}",
        root,
        2,
        PARTITIONS,
        env=QUIET_LEASES,
        shared_warehouse=True,
    ).start()
    try:
        nodes.wait_balanced()
        http = Http(nodes.nodes[0].url)
        for catalog in CATALOGS:
            table = setup_catalog(http, TENANT, catalog).create_table(("ns", "t"), SCHEMA)
            for i in range(APPENDS):
                append(table, i)
        yield nodes
    finally:
        nodes.close()
    nodes.logs_without_tracebacks()


def replay_digest(cluster: Cluster, data_dir: Path) -> str:
    config = cluster.config
    replayed = subprocess.run(
        [sys.executable, "-m", "metastore", "replay", "--kafka", config.bootstrap,
         "--prefix", config.prefix, "--partitions", str(config.partitions),
         "--data-dir", str(data_dir), "--json", "--no-progress"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert replayed.returncode == 0, replayed.stderr
    digest: str = json.loads(replayed.stdout.strip().splitlines()[-1])["digest"]
    return digest


def test_gc_tombstones_reach_every_view_and_replay(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    config = cluster.config
    before = converged(cluster.nodes)
    assert replay_digest(cluster, tmp_path / "replayed-before") == before[0]["digest"]
    ran = gc(spark, "--url", cluster.nodes[0].url, "--tenant", TENANT, "--grace", "0",
             "--retention", "0", "--out", str(tmp_path / "gc"))  # fmt: skip
    assert ran.status == 0, ran.stdout
    assert ran.summary["deleted"] > 0
    # replay reads the whole log: every view reaches the same state once it has too
    replayed = replay_digest(cluster, tmp_path / "replayed")
    assert replayed != before[0]["digest"]
    deadline = time.monotonic() + 60
    while {view_state(n)["digest"] for n in cluster.nodes} != {replayed}:
        assert time.monotonic() < deadline, [view_state(n)["digest"] for n in cluster.nodes]
        time.sleep(0.2)
    kafka = ["--kafka", config.bootstrap, "--topic-prefix", config.prefix,
             "--partitions", str(config.partitions)]  # fmt: skip
    audited = run_job(spark, "audit", *kafka, "--tenant", TENANT, "--out", str(tmp_path / "a"),
                      "--json")  # fmt: skip
    assert audited.status == 0 and audited.summary["dangling"] == 0, audited.stdout
    for node in cluster.nodes:
        for catalog in CATALOGS:
            client = RestCatalog("t", uri=node.url, warehouse=f"{TENANT}/{catalog}")
            assert client.load_table(("ns", "t")).scan().to_arrow().num_rows == APPENDS
