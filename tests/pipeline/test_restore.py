"""Snapshot + tail restore: ``metastore serve --kafka ... --restore-from <checkpoint>``.

A wiped node of a real two-node cluster restarts from a checkpoint the other node
took of its view (``POST /api/v1/admin/checkpoints``), reads only the tail, and
serves what the other serves. What would give a node a wrong view is refused with
one line and exit status 2 before the node touches the broker: another cluster's
view, a store that is not a view, a data directory that already holds a view.
(A node started on ``metastore rebuild``'s output: test_rebuild.py.)
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from harness.cluster import Cluster
from harness.node import NodeProcess
from metastore.cluster.cluster_config import ClusterConfig
from metastore.cluster.restore import check_checkpoint
from metastore.cluster.view import ViewStore
from metastore.persistence.rocksdb import RocksDBPersistence
from metastore.persistence.rocksdb_layout import view_marker
from tests.config.test_config import assert_refused, serve
from tests.pipeline.rebuild.test_rebuild import (
    CATALOGS,
    add_tables,
    consumed,
    converged,
    load,
    tables,
)
from tests.pipeline.support import Http

PARTITIONS = 2


def cluster_args(config: ClusterConfig) -> tuple[str, ...]:
    return ("--kafka", config.bootstrap, "--topic-prefix", config.prefix,
            "--cluster-id", config.cluster, "--partitions", str(config.partitions))  # fmt: skip


def test_refuses_another_clusters_view_a_store_and_a_data_dir_holding_a_view(
    tmp_path: Path,
) -> None:
    other = ClusterConfig("127.0.0.1:1", prefix="theirs", partitions=PARTITIONS)
    ViewStore(tmp_path / "theirs", other).close()  # a view of other topics
    RocksDBPersistence(tmp_path / "embedded").close()  # an embedded node's store
    mine = ClusterConfig("127.0.0.1:1", prefix="mine", partitions=PARTITIONS)
    ViewStore(tmp_path / "held" / "view", mine).close()  # a data directory with a view
    env = {"METASTORE_WAREHOUSE": (tmp_path / "warehouse").as_uri()}

    done = serve(tmp_path, *cluster_args(mine), "--restore-from", str(tmp_path / "theirs"), env=env)
    assert_refused(
        done, "--restore-from: ", "is a view of", '"prefix": "theirs"', "another cluster"
    )
    same_prefix = ClusterConfig("127.0.0.1:1", prefix="theirs", partitions=PARTITIONS + 1)
    done = serve(
        tmp_path, *cluster_args(same_prefix), "--restore-from", str(tmp_path / "theirs"), env=env
    )
    assert_refused(done, "--restore-from: ", '"partitions": 2')
    done = serve(
        tmp_path, *cluster_args(mine), "--restore-from", str(tmp_path / "embedded"), env=env
    )
    assert_refused(done, "--restore-from: ", "is not a view")
    assert not (tmp_path / "data").exists()  # nothing copied, and no directory left behind
    done = serve(
        tmp_path, *cluster_args(other), "--data-dir", str(tmp_path / "held"),
        "--restore-from", str(tmp_path / "theirs"), env=env,
    )  # fmt: skip
    assert_refused(done, "--restore-from: ", "already holds a view")
    assert sorted(p.name for p in (tmp_path / "held").iterdir()) == ["view"]


@pytest.mark.slow
def test_a_wiped_node_restored_from_another_nodes_checkpoint_rejoins(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    cluster = Cluster(
        kafka_bootstrap, f"rs{os.urandom(5).hex()}", tmp_path / "cluster", 2, PARTITIONS
    ).start()
    try:
        cluster.wait_balanced()
        first, second = cluster.nodes
        http = Http(first.url)
        load(http, CATALOGS[:2], range(3))
        converged(cluster.nodes)
        taken = http.ok("POST", "/api/v1/admin/checkpoints")
        checkpoint = Path(taken["path"])
        assert taken["changelog"]["topic-prefix"] == cluster.config.prefix
        assert taken["changelog"]["partitions"] == PARTITIONS
        marker = view_marker(cluster.config.prefix, PARTITIONS)
        restored_records = check_checkpoint(checkpoint, marker)
        reported = sum(sum(offsets) for offsets in taken["changelog"]["offsets"].values())
        assert restored_records >= reported > 0  # the checkpoint holds what it reported

        # the second node stops and loses its view; writes go on meanwhile (the tail)
        assert second.stop() == 0
        shutil.rmtree(second.data_dir / "view")
        add_tables(http, CATALOGS[0], range(3, 6))
        restored = NodeProcess(
            second.data_dir,
            port=second.port,
            extra_args=(*cluster_args(cluster.config), "--restore-from", str(checkpoint)),
            env={"METASTORE_WAREHOUSE": cluster.warehouse(1).as_uri()},
            log_path=tmp_path / "restored.log",
        )
        cluster.nodes[1] = restored
        restored.start(120)
        cluster.wait_balanced()
        states = converged(cluster.nodes)
        assert len({s["digest"] for s in states}) == 1
        log_end = sum(states[0]["offsets"].values())
        assert 0 < consumed(restored) <= log_end - restored_records
        for catalog in CATALOGS[:2]:
            assert tables(restored, catalog) == tables(first, catalog)
        assert tables(restored, CATALOGS[0]) == [f"t{i}" for i in range(6)]
        # the new view is a copy: the checkpoint is the first node's to delete
        http.ok("DELETE", f"/api/v1/admin/checkpoints/{taken['id']}")
        assert http.ok("GET", "/api/v1/admin/checkpoints")["checkpoints"] == []
        assert tables(restored, CATALOGS[1]) == [f"t{i}" for i in range(3)]
    finally:
        cluster.close()
    cluster.logs_without_tracebacks()
