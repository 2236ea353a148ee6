"""The jobs on a Spark cluster, not only on ``local[*]``: a standalone master and worker
(``harness.spark_standalone``) run ``metastore audit``, ``export``, ``maintain`` and
``gc`` against one node, each as the command line runs it (``--master spark://...``, a
process of its own).

On a cluster every task runs in an executor JVM the worker started, with Python
workers of its own, in a working folder of its own and with only the environment the
worker gives it; nothing of the driver's process reaches a task but what the job
sends. Audit and export must find exactly what they find on the tests' local
session; maintain must expire a table's old snapshots and delete their files and an
old orphan while the live snapshot's files stay (what ``test_maintain`` checks on the
local session); gc must delete what a dry run on the local session names and nothing
a live table needs; the master must have run each job as an application with
executors of its own; and what an operator sets for the executors (Spark's
``spark-defaults.conf``, ``PYSPARK_PYTHON``) must reach them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyiceberg.table import Table
from pyspark.sql import SparkSession

from harness.spark_standalone import SparkStandalone
from tests.pipeline.conftest import run_job
from tests.pipeline.gc.test_gc import gc
from tests.pipeline.maintain.test_maintain import (
    AGE,
    SCHEMA,
    TENANT,
    THRESHOLD_S,
    Lake,
    ids,
    local,
    make_old,
    rows,
    running_lake,
    snapshot_files,
)

pytestmark = pytest.mark.slow

JOB_TIMEOUT_S = 300
APPS_TIMEOUT_S = 30.0
COMMITS_FOR_GC = 30
EXECUTOR_MB = 768  # maintain's executors, from its spark-defaults.conf (Spark's default: 1024)
# what differs between two runs of one job on the same state: timings and where it wrote
VARYING = {"seconds", "objects_per_s", "report", "out", "files_per_s", "log"}


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    with running_lake(tmp_path_factory.mktemp("spark-cluster-lake")) as lake:
        yield lake


@dataclass
class Done:
    status: int
    summary: dict[str, Any]
    stderr: str


def on_cluster(
    cluster: SparkStandalone,
    lake: Lake,
    job: str,
    out: Path,
    *args: str,
    env: dict[str, str] | None = None,
) -> Done:
    """``metastore <job>`` in a process of its own, its Spark master the cluster's, with
    ``env`` added to its environment (what an operator sets for the jobs)."""
    done = subprocess.run(
        [sys.executable, "-m", "metastore", job, "--url", lake.node.url, "--tenant", TENANT,
         "--out", str(out), "--master", cluster.url, "--json", "--no-progress", *args],
        capture_output=True, text=True, timeout=JOB_TIMEOUT_S, check=False,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    lines = done.stdout.strip().splitlines()
    assert lines, f"{job} wrote no summary (exit {done.returncode}): {done.stderr[-2000:]}"
    return Done(done.returncode, json.loads(lines[-1]), done.stderr)


def on_local(spark: SparkSession, lake: Lake, job: str, out: Path) -> dict[str, Any]:
    """The same job in this process, on the tests' ``local[2]`` session."""
    ran = run_job(
        spark, job, "--url", lake.node.url, "--tenant", TENANT, "--out", str(out),
        "--json", "--no-progress",
    )  # fmt: skip
    assert ran.status == 0, ran.stdout
    return ran.summary


def steady(summary: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in summary.items() if key not in VARYING}


@dataclass
class Runs:
    table: Table  # before maintain
    before: set[Path]  # every file its snapshots referenced before maintain
    orphan: Path
    audit: tuple[Done, dict[str, Any]]  # on the cluster, on the local session
    export: tuple[Done, dict[str, Any]]
    export_out: Path
    executor_python_marks: Path
    maintain: Done
    after: Table
    gc_dry: dict[str, Any]  # on the local session, after maintain
    gc: Done  # on the cluster, after that
    after_gc: Table


@pytest.fixture(scope="module")
def runs(
    spark_cluster: SparkStandalone,
    lake: Lake,
    spark: SparkSession,
    tmp_path_factory: pytest.TempPathFactory,
) -> Runs:
    client = lake.catalog("c")
    client.create_namespace("ns")
    # max age 1 ms: every snapshot but the current one expires, and the overwrite
    # leaves the first appends' data files to no live snapshot
    table = client.create_table("ns.aged", SCHEMA, properties={AGE: "1"})
    table.append(rows(1))
    table.append(rows(2))
    table.overwrite(rows(3, 4))
    table = client.load_table("ns.aged")
    orphan = local(table.metadata.location) / "data" / "old-orphan.parquet"
    pq.write_table(rows(99), orphan)
    make_old(orphan)
    before = snapshot_files(table)
    out = tmp_path_factory.mktemp("spark-cluster-out")
    audit = on_cluster(spark_cluster, lake, "audit", out / "audit")
    audit_local = on_local(spark, lake, "audit", out / "audit-local")
    # the executors' interpreter is the operator's (a cluster's hosts keep the package
    # at a path of their own): one that notes each start, then runs this one
    marks = out / "executor-python.marks"
    wrapper = out / "executor-python"
    wrapper.write_text(f'#!/bin/sh\necho "$$" >> {marks}\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    export = on_cluster(
        spark_cluster, lake, "export", out / "export", env={"PYSPARK_PYTHON": str(wrapper)}
    )
    export_local = on_local(spark, lake, "export", out / "export-local")
    conf_dir = out / "spark-conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(f"spark.executor.memory {EXECUTOR_MB}m\n")
    maintain = on_cluster(
        spark_cluster,
        lake,
        "maintain",
        out / "maintain",
        "--older-than",
        str(THRESHOLD_S),
        env={"SPARK_CONF_DIR": str(conf_dir)},
    )
    after = client.load_table("ns.aged")
    # more commits than a catalog's ref keeps as recent HEADs: the older ones are gc's
    busy = client.load_table("ns.aged")
    for i in range(COMMITS_FOR_GC):
        busy.transaction().set_properties(step=str(i)).commit_transaction()
    # gc: what a dry run on the local session would delete, then a run on the cluster
    collect = ("--tenant", TENANT, "--grace", "0", "--retention", "0")
    gc_dry = gc(spark, "--url", lake.node.url, *collect, "--dry-run", "--out", str(out / "gc-dry"))
    assert gc_dry.status == 0, gc_dry.stdout
    collected = on_cluster(
        spark_cluster, lake, "gc", out / "gc", "--grace", "0", "--retention", "0"
    )
    after_gc = client.load_table("ns.aged")
    return Runs(
        table,
        before,
        orphan,
        (audit, audit_local),
        (export, export_local),
        out / "export",
        marks,
        maintain,
        after,
        gc_dry.summary,
        collected,
        after_gc,
    )


def test_audit_on_the_cluster_finds_what_it_finds_locally(runs: Runs) -> None:
    done, local_summary = runs.audit
    assert done.status == 0, done.stderr[-2000:]
    assert done.summary["dangling"] == 0
    assert done.summary["objects"] > 0
    assert steady(done.summary) == steady(local_summary)


def test_export_on_the_cluster_writes_what_it_writes_locally(runs: Runs) -> None:
    done, local_summary = runs.export
    assert done.status == 0, done.stderr[-2000:]
    assert done.summary["tables"]["tables"] == 1
    assert steady(done.summary) == steady(local_summary)
    exported = pq.read_table(runs.export_out / "tables").to_pylist()
    assert [row["name"] for row in exported] == ["aged"]


def test_the_executors_run_the_python_the_operator_names(runs: Runs) -> None:
    assert runs.export[0].status == 0
    assert runs.executor_python_marks.exists(), "no executor started PYSPARK_PYTHON"
    assert runs.executor_python_marks.read_text().split()


def test_maintain_on_the_cluster_expires_deletes_and_keeps_what_it_must(runs: Runs) -> None:
    done = runs.maintain
    assert done.status == 0, done.stderr[-2000:]
    summary = done.summary
    assert summary["snapshots_expired"] == len(runs.table.metadata.snapshots) - 1
    assert summary["files_deleted"] > 0
    assert summary["orphans_deleted"] == 1
    assert (summary["failed"], summary["unreadable"], summary["outside_skipped"]) == (0, 0, 0)
    current = runs.after.metadata.current_snapshot_id
    assert [s.snapshot_id for s in runs.after.metadata.snapshots] == [current]
    kept = snapshot_files(runs.after)
    assert all(path.exists() for path in kept)  # what the live snapshot reads stays
    gone = runs.before - kept
    assert gone, "the expired snapshots referenced no file of their own"
    assert not [path for path in gone if path.exists()]
    assert not runs.orphan.exists()
    assert ids(runs.after) == [3, 4]


def test_gc_on_the_cluster_deletes_what_a_dry_run_names_and_nothing_live(runs: Runs) -> None:
    done = runs.gc
    assert done.status == 0, done.stderr[-2000:]
    assert runs.gc_dry["would_delete"] > 0
    assert done.summary["deleted"] == runs.gc_dry["would_delete"]
    assert done.summary["candidates"] == runs.gc_dry["candidates"]
    assert ids(runs.after_gc) == [3, 4]
    assert runs.after_gc.metadata.current_snapshot_id == runs.after.metadata.current_snapshot_id


def finished_apps(cluster: SparkStandalone, names: set[str]) -> dict[str, dict[str, Any]]:
    """The master's finished applications once all of ``names`` are among them (a
    driver's stop reaches the master as its process ends)."""
    deadline = time.monotonic() + APPS_TIMEOUT_S
    while True:
        apps = {app["name"]: app for app in cluster.status()["completedapps"]}
        if names <= apps.keys() or time.monotonic() > deadline:
            return apps
        time.sleep(0.2)


def test_each_job_ran_on_the_cluster_with_executors_of_its_own(
    spark_cluster: SparkStandalone, runs: Runs
) -> None:
    names = {f"metastore {job}" for job in ("audit", "export", "maintain", "gc")}
    apps = finished_apps(spark_cluster, names)
    for name in names:
        assert apps[name]["state"] == "FINISHED"
        assert apps[name]["cores"] > 0  # executors of the worker ran its tasks
    executors = [d for d in spark_cluster.work_dir.glob("app-*/*") if d.is_dir()]
    assert len(executors) >= len(names)  # a working folder per application's executor


def test_spark_defaults_of_the_operator_reach_the_executors(
    spark_cluster: SparkStandalone, runs: Runs
) -> None:
    apps = finished_apps(spark_cluster, {"metastore maintain", "metastore audit"})
    assert apps["metastore maintain"]["memoryperexecutor"] == EXECUTOR_MB
    assert apps["metastore audit"]["memoryperexecutor"] != EXECUTOR_MB
