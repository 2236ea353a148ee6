"""``metastore rebuild``: a node's view built from the changelog on Spark, in parallel.

Each partition p is read by ``cluster.apply_partition`` (objects[p] and refs[p]
with its own read_committed consumer, the view's own apply rules into a dict that
starts empty, to an end it can prove) and written, its whole key set sorted, to one
SST file: data, deleted-ref markers, offsets, barriers and epoch floors. A catalog
lives in one partition, so no two files share a key. The partitions are dealt into
one Spark task per core (``spread``) and read on threads inside it. The driver writes the
keys every partition shares (the view marker naming the topics, the summed drop
count; RocksDB's format key comes with the new database) and ingests the files
into a fresh database, which it moves to ``--out`` only when complete. A node
started on it (``metastore serve --kafka ... --restore-from <out>``) resumes from
the stored offsets and consumes only the tail.

Where the tasks stop: with ``--kafka``, replay's catch-up rule per partition (idle
for ``--idle`` seconds and at a high watermark known from a fetch response); with
``--url`` of a cluster node, exactly the offsets that node's view had applied
(the node reports them with a checkpoint, which the job deletes at once), so the
result is that node's view as of the request.

The digest (``view.digest``) is read back from the finished database, the same
format as ``metastore replay``'s and a node's ``/internal/v1/view``. Working files
(the SST files, Spark's log) live next to ``--out`` in ``.<name>.rebuild`` and are
removed on success; on a Spark cluster that directory must be on storage every
executor and the driver share.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, TextIO

from pyspark import SparkContext
from pyspark.sql import SparkSession

from metastore.cluster.changelog_records import ROLES, Role
from metastore.cluster.cluster_config import ClusterConfig, profile_from_env, properties_from_env
from metastore.cluster.replay import MAX_IDLE_S, MAX_TIMEOUT_S, MIN_WAIT_S
from metastore.cluster.view.digest import digest
from metastore.cluster.view.view_store import ViewStore
from metastore.persistence.rocksdb import RocksDB
from metastore.persistence.rocksdb_layout import (
    DROPPED,
    OBJ,
    VIEW_MARKER,
    encode_count,
    view_marker,
)
from metastore.pipeline import exits
from metastore.pipeline.cluster_source import PartitionRead, apply_partition, check_topics
from metastore.pipeline.exits import JobError
from metastore.pipeline.node_client import NodeClient
from metastore.pipeline.options import JobOptions, check_seconds
from metastore.pipeline.progress import Progress
from metastore.pipeline.rebuild.sst import ingest, write_sst
from metastore.pipeline.spark_session import start_context

JOB = "rebuild"


@dataclass(frozen=True, slots=True)
class Changelog:
    """The topics to read and, from a node, the offsets to read them to."""

    config: ClusterConfig
    ends: Mapping[int, Mapping[Role, int]] | None  # per partition; None: the catch-up rule

    def describe(self) -> str:
        return f"{self.config.refs_topic}/{self.config.objects_topic} on {self.config.bootstrap}"


@dataclass(frozen=True, slots=True)
class Built:
    """What one task built: its SST file (None when the partition holds nothing)."""

    partition: int
    file: str | None
    keys: int
    objects: int
    consumed: int
    applied: int
    dropped: int


def build_partition(config: ClusterConfig, sst_dir: str, read: PartitionRead) -> Built:
    """Inside a task: partition ``read.partition`` applied from empty, as one SST file."""
    result = apply_partition(config, read)
    rows = sorted((k, v) for k, v in result.rows.items() if k != DROPPED)  # DROPPED: global
    path = Path(sst_dir) / f"p{read.partition:05d}.sst"
    keys = write_sst(path, rows)
    objects = sum(1 for key, _ in rows if key[:1] == OBJ)
    return Built(
        read.partition,
        str(path) if keys else None,
        keys,
        objects,
        result.consumed,
        result.applied,
        result.dropped,
    )


def run(
    args: argparse.Namespace, out: TextIO = sys.stdout, spark: SparkSession | None = None
) -> int:
    """``metastore rebuild``; ``spark`` is a session to use (else one is started here)."""
    try:
        summary = _run(args, spark)
    except JobError as exc:
        print(f"metastore {JOB}: {exc.message}", file=sys.stderr)
        return exits.USAGE
    print(summary["summary"], file=out)
    if args.json:
        print(json.dumps({k: v for k, v in summary.items() if k != "summary"}), file=out)
    return exits.OK


def _run(args: argparse.Namespace, spark: SparkSession | None) -> dict[str, Any]:
    options = JobOptions.from_args(args, JOB)
    if options.scope.tenant is not None:
        raise JobError("a rebuild builds a whole view: --tenant and --catalog do not apply")
    check_seconds("--idle", args.idle, MIN_WAIT_S, MAX_IDLE_S)
    check_seconds("--timeout", args.timeout, MIN_WAIT_S, MAX_TIMEOUT_S)
    out = options.out.resolve()
    check_fresh(out)
    changelog = open_changelog(options)
    work = out.parent / f".{out.name}.rebuild"
    if work.exists():
        shutil.rmtree(work)  # a failed run's leftovers: ours by name
    sst_dir, view_dir = work / "sst", work / "view"
    sst_dir.mkdir(parents=True)
    context = (
        spark.sparkContext
        if spark is not None
        else start_context(options.master, f"metastore {JOB}", work / "spark.log")
    )
    try:
        progress = Progress(context, JOB, enabled=options.progress)
        with progress:
            built = _build(context, changelog, sst_dir, args, progress)
            assemble(view_dir, changelog.config, built)
            found = digest_of(view_dir, changelog.config)
            summary = replace(
                progress.summary(),
                records=sum(b.consumed for b in built),
                objects=sum(b.objects for b in built),
            )
    finally:
        if spark is None:
            context.stop()
    if out.exists():
        out.rmdir()  # empty: checked above
    view_dir.rename(out)
    shutil.rmtree(work)
    applied, dropped = sum(b.applied for b in built), sum(b.dropped for b in built)
    keys = sum(b.keys for b in built)
    files = sum(1 for b in built if b.file is not None)
    text = (
        f"{summary.render()}\n"
        f"applied {applied:,}, dropped {dropped:,}; {keys:,} keys from {files} SST files "
        f"ingested into {out}\n"
        f"digest: {found}"
    )
    return {
        "summary": text,
        **summary.to_json(),
        "records_per_s": round(summary.records / summary.seconds, 1) if summary.seconds else 0.0,
        "consumed": summary.records,
        "applied": applied,
        "dropped": dropped,
        "keys": keys,
        "partitions": changelog.config.partitions,
        "source": changelog.describe(),
        "digest": found,
        "out": str(out),
    }


def _build(
    context: SparkContext,
    changelog: Changelog,
    sst_dir: Path,
    args: argparse.Namespace,
    progress: Progress,
) -> list[Built]:
    config, ends = changelog.config, changelog.ends
    reads = [
        PartitionRead(p, None if ends is None else ends[p], args.idle, args.timeout)
        for p in range(config.partitions)
    ]
    groups = spread(reads, context.defaultParallelism)
    records, objects = progress.records, progress.objects
    build = partial(build_partition, config, str(sst_dir))

    def task(group: list[PartitionRead]) -> list[Built]:
        # the partitions of a group on threads: their consumers' start and idle windows
        # overlap (the applying itself takes turns, it holds the interpreter)
        with ThreadPoolExecutor(len(group), thread_name_prefix="partition") as pool:
            built = list(pool.map(build, group))
        records.add(sum(b.consumed for b in built))  # Spark reports them as the task ends
        objects.add(sum(b.objects for b in built))
        return built

    try:
        found = context.parallelize(groups, len(groups)).flatMap(task).collect()
    except Exception as exc:  # a task's JobError reaches the driver inside Spark's error
        problem = task_problem(exc)
        if problem is None:
            raise
        raise JobError(problem) from None
    return sorted(found, key=lambda b: b.partition)


def spread(reads: Sequence[PartitionRead], tasks: int) -> list[list[PartitionRead]]:
    """The partitions dealt round-robin into at most ``tasks`` groups, one Spark task
    each: a task per core, not per partition, so each core pays for starting consumers
    and for the idle window that proves the end once, not once per partition."""
    count = max(1, min(tasks, len(reads)))
    return [list(reads[i::count]) for i in range(count)]


def task_problem(exc: Exception) -> str | None:
    """The message of a ``JobError`` a task raised (bad input found inside a task:
    the brokers went away, a partition did not catch up), else None."""
    marker = f"{JobError.__module__}.{JobError.__qualname__}: "
    lines = [line for line in str(exc).splitlines() if line.startswith(marker)]
    return lines[-1][len(marker) :] if lines else None


def assemble(view_dir: Path, config: ClusterConfig, built: list[Built]) -> None:
    """A new database at ``view_dir``: the shared keys, then every task's file."""
    db = RocksDB(view_dir, sync=True)  # writes the format key
    try:
        shared = {VIEW_MARKER: view_marker(config.prefix, config.partitions)}
        dropped = sum(b.dropped for b in built)
        if dropped:
            shared[DROPPED] = encode_count(dropped)
        db.write(shared)
    finally:
        db.close()
    ingest(view_dir, [Path(b.file) for b in built if b.file is not None])


def digest_of(view_dir: Path, config: ClusterConfig) -> str:
    """The digest of the finished view, opened as a node opens it (which also checks
    its marker and reads its offsets and barriers back)."""
    store = ViewStore(view_dir, config)
    try:
        return digest(store)
    finally:
        store.close()


def check_fresh(out: Path) -> None:
    """``out`` does not exist or is an empty directory: a rebuild never overwrites."""
    if not out.exists():
        return
    if not out.is_dir():
        raise JobError(f"--out {out} is not a directory")
    if any(out.iterdir()):
        what = "a RocksDB database" if (out / "CURRENT").exists() else "files"
        raise JobError(
            f"--out {out} is not empty (it holds {what}): a rebuild writes a fresh view "
            "directory; name a new one"
        )


def open_changelog(options: JobOptions) -> Changelog:
    """The topics (checked: brokers reachable, partitions as named) and, for ``--url``,
    the offsets the node's view had applied."""
    if options.source == "data-dir":
        raise JobError(
            "a rebuild reads the changelog: name --kafka (with --topic-prefix and "
            "--partitions) or --url of a cluster node"
        )
    if options.source == "kafka":
        config = _config(options.where, options.topic_prefix, options.partitions)
        check_topics(config)
        return Changelog(config, None)
    node = NodeClient(options.where, token=options.token, credential=options.credential)
    checkpoint = node.create_checkpoint()
    node.delete_checkpoint(checkpoint["id"])  # only the offsets are needed
    changelog = checkpoint.get("changelog")
    if changelog is None:
        raise JobError(
            f"{node.url} is an embedded node: a rebuild builds a cluster node's view "
            "(name a cluster node's --url, or --kafka)"
        )
    config = _config(changelog["kafka"], changelog["topic-prefix"], changelog["partitions"])
    check_topics(config)
    offsets = changelog["offsets"]
    ends = {p: {role: int(offsets[role][p]) for role in ROLES} for p in range(config.partitions)}
    return Changelog(config, ends)


def _config(bootstrap: str, prefix: str, partitions: int) -> ClusterConfig:
    try:
        return ClusterConfig(
            bootstrap,
            prefix=prefix,
            partitions=partitions,
            kafka_properties=properties_from_env(os.environ),
            broker_profile=profile_from_env(os.environ),
        )
    except ValueError as exc:
        raise JobError(str(exc)) from None
