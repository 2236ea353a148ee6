"""``metastore rebuild`` on one real cluster: the rebuilt view's digest equals
``metastore replay``'s and every live node's, on a log holding an aborted
transaction and a fenced zombie's records; a node started on the rebuilt view
reads only the tail and serves what the others serve; bad input exits 2.

The cluster is two ``metastore serve --kafka`` processes on the test broker. The
aborted and zombie records are written the way test_view writes them: a
transactional producer that aborts, and one whose records carry an epoch older
than the partition's barrier (what an owner fenced by a newer one leaves behind).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from harness.cluster import QUIET_LEASES, Cluster, get_reply, view_state
from harness.node import NodeProcess
from harness.spark_standalone import SparkStandalone
from metastore.cluster.restore import check_checkpoint
from metastore.node.cli import _parser
from metastore.persistence.rocksdb_layout import view_marker
from metastore.pipeline.rebuild import rebuild_job as rebuild
from tests.cluster.test_view import PARTITIONS, Writer, catalog_in, obj, ref
from tests.pipeline.support import Http

pytestmark = pytest.mark.slow
# the cluster runs on Apache Kafka (``kafka_bootstrap``): an aborted record never reaches a
# read_committed reader, so only the zombie's record is planted to be dropped
ABORTED_VISIBLE = False
TENANT = "shop"
CATALOGS = ("c0", "c1", "c2", "c3", "c4")


def run_rebuild(spark: SparkSession, *argv: str) -> tuple[int, str]:
    """``metastore rebuild <argv>`` in this process, on the shared session."""
    args = _parser().parse_args(["rebuild", *argv])
    out = io.StringIO()
    status = rebuild.run(args, out, spark)
    return status, out.getvalue()


def last_json(text: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(text.strip().splitlines()[-1])
    return found


def load(http: Http, catalogs: tuple[str, ...], tables: range) -> None:
    http.ok("POST", "/api/v1/tenants", {"name": TENANT})
    for catalog in catalogs:
        base = f"/api/v1/tenants/{TENANT}/catalogs"
        http.ok("POST", base, {"name": catalog})
        http.ok("POST", f"{base}/{catalog}/namespaces", {"namespace": ["ns"]})
        add_tables(http, catalog, tables)


def add_tables(http: Http, catalog: str, tables: range) -> None:
    path = f"/api/v1/tenants/{TENANT}/catalogs/{catalog}/namespaces/ns/tables"
    for i in tables:
        http.ok("POST", path, {"name": f"t{i}"})


def plant_aborted_and_zombie(cluster: Cluster) -> dict[str, int]:
    """An aborted commit, then a zombie's committed records (epoch before the barrier).

    Returns the view offsets ("role/partition" -> next offset) that every view must
    reach to have read the records planted (the aborted ones only where a read_committed
    reader is handed them): nodes that agree on their offsets may still agree before
    these records, which a rebuild then reads and they did not.
    """
    writer = Writer(cluster.config, "zombie")
    ends: dict[str, int] = {}
    try:
        a, b = catalog_in(0), catalog_in(1)  # in partitions 0 and 1
        aborted = writer.commit(a, None, ref(a, 1), [obj(a, 1)], abort=True)
        # every partition has an owner, so the zombie's epoch is before its barrier
        zombie = writer.commit(b, None, ref(b, 7), [obj(b, 7)], epoch=-1)
    finally:
        writer.producer.flush(5)
    planted = {1: zombie} | ({0: aborted} if ABORTED_VISIBLE else {})
    for partition, (objects, ref_offset) in planted.items():
        ends[f"refs/{partition}"] = ref_offset + 1
        ends[f"objects/{partition}"] = max(objects) + 1
    return ends


def converged(
    nodes: list[NodeProcess], timeout: float = 60.0, at_least: Mapping[str, int] | None = None
) -> list[dict[str, Any]]:
    """Every node's view state once all report the same offsets (writes have stopped),
    each at or past ``at_least`` (records written without any node acknowledging them)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = [view_state(n) for n in nodes]
        offsets = states[0]["offsets"]
        reached = all(offsets.get(key, 0) >= end for key, end in (at_least or {}).items())
        if reached and all(s["offsets"] == offsets for s in states):
            return states
        time.sleep(0.2)
    raise TimeoutError(f"the nodes' views did not converge (at least {at_least})")


def consumed(node: NodeProcess) -> int:
    """Changelog records this node's view consumed since it started (its metrics)."""
    with urllib.request.urlopen(node.url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    for line in text.splitlines():
        if line.startswith("metastore_view_records_total "):
            return int(line.split()[1])
    raise AssertionError("metastore_view_records_total missing")


def tables(node: NodeProcess, catalog: str) -> list[str]:
    path = f"/api/v1/tenants/{TENANT}/catalogs/{catalog}/namespaces/ns/tables"
    status, body = get_reply(node.url + path)
    assert status == 200, body
    return sorted(t["name"] for t in body["tables"])


@pytest.fixture(scope="module")
def cluster(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("rebuild-cluster")
    nodes = Cluster(
        kafka_bootstrap, f"rb{os.urandom(5).hex()}", root, 2, PARTITIONS, env=QUIET_LEASES
    ).start()
    try:
        nodes.wait_balanced()
        load(Http(nodes.nodes[0].url), CATALOGS, range(4))
        converged(nodes.nodes, at_least=plant_aborted_and_zombie(nodes))
        yield nodes
    finally:
        nodes.close()
    nodes.logs_without_tracebacks()


def test_rebuild_equals_replay_and_live_nodes_and_a_node_started_on_it_reads_the_tail(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    config = cluster.config
    kafka = ("--kafka", config.bootstrap, "--topic-prefix", config.prefix,
             "--partitions", str(config.partitions))  # fmt: skip
    states = converged(cluster.nodes)
    live = {s["digest"] for s in states}
    assert len(live) == 1
    out = tmp_path / "rebuilt"
    status, text = run_rebuild(spark, *kafka, "--out", str(out), "--json", "--idle", "0.5")
    assert status == 0, text
    built = last_json(text)
    # on a mismatch, say which side read less: the rebuild's counts or the views' offsets
    seen = (built["consumed"], built["dropped"], states[0]["offsets"], states[0]["dropped"])
    assert {built["digest"]} == live, seen
    assert built["dropped"] == states[0]["dropped"] >= (2 if ABORTED_VISIBLE else 1)
    assert built["records"] == built["consumed"] > 0 and built["objects"] > 0
    assert built["out"] == str(out) and f"digest: {built['digest']}" in text
    assert "objects/s" in text  # the final summary
    assert not (tmp_path / ".rebuilt.rebuild").exists()  # the working files are gone

    replayed = subprocess.run(
        [sys.executable, "-m", "metastore", "replay", "--kafka", config.bootstrap,
         "--prefix", config.prefix, "--partitions", str(config.partitions),
         "--data-dir", str(tmp_path / "replayed"), "--json", "--no-progress"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert replayed.returncode == 0, replayed.stderr
    replay_summary = last_json(replayed.stdout)
    assert replay_summary["digest"] == built["digest"]
    assert replay_summary["dropped"] == built["dropped"]
    assert replay_summary["records"] == built["records"]

    # from a node: exactly the offsets its view had applied (its checkpoint is deleted)
    status, text = run_rebuild(
        spark, "--url", cluster.nodes[1].url, "--out", str(tmp_path / "from-node"), "--json"
    )
    assert status == 0, text
    assert last_json(text)["digest"] == built["digest"]
    assert Http(cluster.nodes[1].url).ok("GET", "/api/v1/admin/checkpoints")["checkpoints"] == []

    # a fresh directory only: the same --out again is refused before any work
    status, _ = run_rebuild(spark, *kafka, "--out", str(out))
    assert status == 2

    # the tail: writes after the rebuild, then a third node started on the rebuilt view
    restored_records = check_checkpoint(out, view_marker(config.prefix, config.partitions))
    add_tables(Http(cluster.nodes[0].url), "c0", range(4, 8))
    third = NodeProcess(
        tmp_path / "node2" / "data",
        extra_args=(*kafka[:2], "--topic-prefix", config.prefix, "--cluster-id", config.cluster,
                    "--partitions", str(config.partitions), "--restore-from", str(out)),
        env={"METASTORE_WAREHOUSE": cluster.warehouse(2).as_uri(), **QUIET_LEASES},
        log_path=tmp_path / "node2.log",
    )  # fmt: skip
    cluster.nodes.append(third)  # stopped with the others
    third.start(120)
    states = converged(cluster.nodes)
    assert len({s["digest"] for s in states}) == 1
    log_end = sum(states[0]["offsets"].values())
    tail = consumed(third)
    assert 0 < tail <= log_end - restored_records < restored_records, (tail, log_end)
    for catalog in CATALOGS:
        assert tables(third, catalog) == tables(cluster.nodes[0], catalog)
    assert tables(third, "c0") == [f"t{i}" for i in range(8)]
    assert "view restored from" in third.log_path.read_text()


def test_rebuild_on_a_spark_cluster_equals_the_live_views(
    cluster: Cluster, spark_cluster: SparkStandalone, tmp_path: Path
) -> None:
    """The same rebuild as the command line runs it on a standalone Spark cluster: each
    partition read by a consumer in an executor's Python worker, its SST file written
    there, and the files ingested by the driver."""
    config = cluster.config
    live = {s["digest"] for s in converged(cluster.nodes)}
    assert len(live) == 1
    done = subprocess.run(
        [sys.executable, "-m", "metastore", "rebuild", "--kafka", config.bootstrap,
         "--topic-prefix", config.prefix, "--partitions", str(config.partitions),
         "--out", str(tmp_path / "rebuilt"), "--idle", "0.5", "--json", "--no-progress",
         "--master", spark_cluster.url],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    built = last_json(done.stdout)
    assert {built["digest"]} == live
    assert built["records"] == built["consumed"] > 0
    apps = {app["name"] for app in spark_cluster.status()["completedapps"]}
    apps |= {app["name"] for app in spark_cluster.status()["activeapps"]}
    assert "metastore rebuild" in apps


def test_bad_input_exits_2_with_one_line(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _ = run_rebuild(spark, "--kafka", "127.0.0.1:1", "--out", str(tmp_path / "a"))
    assert status == 2
    assert "cannot reach the brokers" in capsys.readouterr().err
    status, _ = run_rebuild(spark, "--data-dir", str(tmp_path), "--out", str(tmp_path / "b"))
    assert status == 2
    assert "reads the changelog" in capsys.readouterr().err
    scoped = ("--kafka", "127.0.0.1:1", "--tenant", "t", "--out", str(tmp_path / "c"))
    status, _ = run_rebuild(spark, *scoped)
    assert status == 2
    assert "whole view" in capsys.readouterr().err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    status, _ = run_rebuild(spark, "--kafka", "127.0.0.1:1", "--out", str(tmp_path / "full"))
    assert status == 2
    assert "not empty" in capsys.readouterr().err
    assert (tmp_path / "full" / "notes.txt").read_text() == "mine"
