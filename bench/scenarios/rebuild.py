"""The pipeline benchmark's scenario: one big log, read four ways, then a restore.

``write_log`` fills the changelog topics fast with a raw transactional, idempotent
producer writing the record format an owner writes (``RecordCodec``): per
partition an owner's barrier, then commits of ``objects_per_commit`` objects and
one ref advance of the catalog's main branch (a chain, epoch = the barrier), the
objects of a transaction flushed before its refs name their offset. On that log,
in one run: a raw read_committed consumer (``raw_broker.raw_consume``), ``metastore
replay`` (one process) and ``metastore rebuild`` (Spark), the two commands as child
processes timed from start to exit (Python, and the JVM for Spark, included); then
a node with an empty data directory started with ``--restore-from`` the rebuilt
view after a tail was written, timed until ``/health`` answers 200 (and, for
comparison, one started without it, which reads the whole log).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Producer

from bench.load import PROGRESS_EVERY_S, Failures
from bench.report import ratio, table
from bench.scenarios.raw_broker import RawConsumeResult
from harness.node import NodeProcess
from metastore.cluster.changelog_records import (
    Barrier,
    Produced,
    RecordCodec,
    RefRecord,
    partition_for,
)
from metastore.cluster.cluster_config import ClusterConfig
from metastore.model.codec import default_codec
from metastore.model.keys import ObjKey, RefKey
from metastore.persistence.base import Ref, StoredObject

TENANT = "bench"
CATALOGS_PER_PARTITION = 4
COMMITS_PER_TRANSACTION = 2_000
OBJECT_BYTES = 200
TIMEOUT_S = 60.0


@dataclass
class LogResult:
    records: int
    commits: int
    seconds: float
    records_per_s: float


@dataclass
class Timed:
    """One command run as a child process: its wall time and its ``--json`` summary."""

    command: str
    wall_s: float
    records: int
    records_per_s: float  # records / wall_s
    digest: str
    summary: dict[str, Any]


@dataclass
class RestoreResult:
    tail_records: int  # written after the rebuild
    restored_s: float  # spawn until /health answers 200, from the rebuilt view + the tail
    consumed: int  # records the restored node's view read (the tail, and its own barriers)
    cold_s: float | None  # the same with an empty view and no --restore-from (None: skipped)
    cold_consumed: int | None


@dataclass
class PipelineResult:
    log: LogResult
    raw: RawConsumeResult
    replay: Timed
    rebuild: Timed
    restore: RestoreResult | None
    spark_master: str


def catalogs(partitions: int, per_partition: int) -> dict[int, list[str]]:
    """``per_partition`` catalog names of TENANT living in each partition."""
    found: dict[int, list[str]] = {p: [] for p in range(partitions)}
    i = 0
    while any(len(names) < per_partition for names in found.values()):
        name = f"c{i}"
        names = found[partition_for(TENANT, name, partitions)]
        if len(names) < per_partition:
            names.append(name)
        i += 1
    return found


class LogWriter:
    """One transactional producer writing owner-format records to every partition."""

    def __init__(self, config: ClusterConfig, objects_per_commit: int) -> None:
        self.config = config
        self.codec = RecordCodec(default_codec(), node="bench-writer")
        self.objects_per_commit = objects_per_commit
        self.producer = Producer(
            config.client(
                **{
                    "transactional.id": f"{config.prefix}.bench-writer",
                    "enable.idempotence": True,
                    "linger.ms": 20,
                    "batch.num.messages": 10_000,
                    "queue.buffering.max.messages": 1_000_000,
                    "queue.buffering.max.kbytes": 1_048_576,
                }
            )
        )
        self.producer.init_transactions(TIMEOUT_S)
        self.catalogs = catalogs(config.partitions, CATALOGS_PER_PARTITION)
        self.heads: dict[str, int] = {}
        self.epochs: dict[int, int] = {}
        self.next_id = 1
        self.records = 0
        self.commits = 0
        self._max: dict[int, int] = {}
        self._errors: list[KafkaError] = []
        self._data = os.urandom(OBJECT_BYTES)

    def _done(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self._errors.append(err)
        elif msg.topic() == self.config.objects_topic:
            p = msg.partition()
            self._max[p] = max(self._max.get(p, -1), msg.offset())

    def _send(self, records: Sequence[tuple[int, Produced]]) -> None:
        for partition, record in records:
            topic = self.config.refs_topic if record.topic == "refs" else self.config.objects_topic
            while True:
                try:
                    self.producer.produce(
                        topic,
                        key=record.key,
                        value=record.value,
                        partition=partition,
                        headers=list[tuple[str, str | bytes | None]](record.headers),
                        on_delivery=self._done,
                    )
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    self.producer.poll(0.05)
        self.records += len(records)
        if self.producer.flush(TIMEOUT_S) != 0 or self._errors:
            raise RuntimeError(f"log writer: {self._errors[:3] or 'flush timed out'}")

    def barriers(self) -> None:
        """An owner's barrier in both topics of every partition: the records' epoch."""
        refs: dict[int, int] = {}

        def note(err: KafkaError | None, msg: Any) -> None:
            if err is None and msg.topic() == self.config.refs_topic:
                refs[msg.partition()] = msg.offset()

        self.producer.begin_transaction()
        for p in range(self.config.partitions):
            barrier = Barrier("bench-writer", "http://bench-writer", f"b{p}", 1)
            for role in ("refs", "objects"):
                record = self.codec.barrier(barrier, role)
                topic = self.config.refs_topic if role == "refs" else self.config.objects_topic
                self.producer.produce(
                    topic, key=record.key, value=record.value, partition=p,
                    headers=list[tuple[str, str | bytes | None]](record.headers), on_delivery=note,
                )  # fmt: skip
                self.records += 1
        self.producer.flush(TIMEOUT_S)
        self.producer.commit_transaction(TIMEOUT_S)
        self.epochs = refs

    def transaction(self, commits: int) -> None:
        """``commits`` commits round-robin over the catalogs: objects first, then refs."""
        names = [(p, c) for p, cs in self.catalogs.items() for c in cs]
        now_us = int(time.time() * 1_000_000)
        objects: list[tuple[int, Produced]] = []
        refs: list[tuple[int, RefRecord]] = []
        for i in range(commits):
            p, catalog = names[(self.commits + i) % len(names)]
            epoch = self.epochs[p]
            ids = range(self.next_id, self.next_id + self.objects_per_commit)
            self.next_id += self.objects_per_commit
            for oid in ids:
                kind = "commit" if oid == ids[0] else "entity"
                obj = StoredObject(ObjKey(TENANT, catalog, kind, oid), self._data, now_us)
                objects.append((p, self.codec.object(obj, epoch)))
            key = RefKey(TENANT, catalog, "main")
            previous = self.heads.get(catalog)
            recent = () if previous is None else (previous,)
            self.heads[catalog] = ids[0]
            refs.append((p, RefRecord(key, previous, Ref(key, ids[0], now_us, recent), epoch, 0)))
        self.producer.begin_transaction()
        self._max.clear()
        self._send(objects)
        self._send(
            [
                (p, self.codec.ref(RefRecord(r.key, r.expected_head, r.new, r.epoch,
                                             self._max.get(p, -1) + 1)))
                for p, r in refs
            ]
        )  # fmt: skip
        self.producer.commit_transaction(TIMEOUT_S)
        self.commits += commits

    def close(self) -> None:
        """Shut the producer down while the broker still runs: one left to be collected
        after the broker stopped would try to reconnect and print librdkafka's refusals
        into the benchmark's output."""
        self.producer.close()


def write_log(
    config: ClusterConfig, records: int, objects_per_commit: int
) -> tuple[LogResult, LogWriter]:
    """At least ``records`` records (barriers, objects, refs) in the topics of ``config``;
    the writer goes on with the same chains (``restore``'s tail)."""
    writer = LogWriter(config, objects_per_commit)
    started = time.perf_counter()
    writer.barriers()
    last_line = started
    per_commit = objects_per_commit + 1
    while writer.records < records:
        left = -(-(records - writer.records) // per_commit)
        writer.transaction(min(COMMITS_PER_TRANSACTION, left))
        if time.perf_counter() - last_line >= PROGRESS_EVERY_S:
            last_line = time.perf_counter()
            print(f"  [log] {last_line - started:6.1f}s  {writer.records:,} records", flush=True)
    seconds = time.perf_counter() - started
    print(f"  [log] {seconds:6.1f}s  {writer.records:,} records done", flush=True)
    result = LogResult(writer.records, writer.commits, round(seconds, 3), writer.records / seconds)
    return result, writer


def timed(label: str, argv: Sequence[str], failures: Failures) -> Timed:
    """``python -m metastore <argv> --json`` as a child process, with progress lines."""
    command = [sys.executable, "-m", "metastore", *argv, "--json"]
    started = time.perf_counter()
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(PROGRESS_EVERY_S * 5):
            print(f"  [{label}] {time.perf_counter() - started:6.1f}s running", flush=True)

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    finally:
        stop.set()
    wall = time.perf_counter() - started
    print(f"  [{label}] {wall:6.1f}s  exit {done.returncode}", flush=True)
    summary: dict[str, Any] = {}
    if done.returncode != 0:
        failures.add(f"{label}: exit {done.returncode}: {done.stderr.strip()[-300:]}")
    else:
        summary = json.loads(done.stdout.strip().splitlines()[-1])
    records = int(summary.get("records", 0))
    return Timed(
        " ".join(["metastore", *argv, "--json"]),
        round(wall, 3),
        records,
        records / wall if wall > 0 else 0.0,
        str(summary.get("digest", "")),
        summary,
    )


def restore(
    writer: LogWriter, rebuilt: Path, root: Path, tail: int, cold: bool, failures: Failures
) -> RestoreResult:
    """A tail after the rebuild (the log's chains continued by the same writer under a
    later barrier), then a node started on the rebuilt view (and one not)."""
    config = writer.config
    before = writer.records
    writer.barriers()
    while writer.records - before < tail:
        writer.transaction(
            min(COMMITS_PER_TRANSACTION, tail // (writer.objects_per_commit + 1) + 1)
        )
    tail_records = writer.records - before
    restored_s, consumed = _start_node(config, root / "restored", rebuilt, failures)
    cold_s = cold_consumed = None
    if cold:
        cold_s, cold_consumed = _start_node(config, root / "cold", None, failures)
    return RestoreResult(tail_records, round(restored_s, 3), consumed, cold_s, cold_consumed)


def _start_node(
    config: ClusterConfig, root: Path, restore_from: Path | None, failures: Failures
) -> tuple[float, int]:
    args: tuple[str, ...] = (
        "--kafka", config.bootstrap, "--topic-prefix", config.prefix,
        "--cluster-id", f"{config.prefix}-{root.name}", "--partitions", str(config.partitions),
    )  # fmt: skip
    if restore_from is not None:
        args += ("--restore-from", str(restore_from))
    node = NodeProcess(
        root / "data",
        extra_args=args,
        env={"METASTORE_WAREHOUSE": (root / "warehouse").resolve().as_uri()},
        log_path=root / "node.log",
    )
    root.mkdir(parents=True, exist_ok=True)
    label = "restore" if restore_from is not None else "cold start"
    started = time.perf_counter()
    try:
        node.start(timeout=600)
    except (RuntimeError, TimeoutError) as exc:
        print(f"  [{label}] failed: {exc}\n{node.log_tail(60)}", flush=True)
        failures.add(f"{label}: {exc}")
        node.kill()
        return float("nan"), 0
    seconds = time.perf_counter() - started
    consumed = _metric(node, "metastore_view_records_total")
    print(f"  [{label}] serving after {seconds:.1f}s, its view read {consumed:,} records")
    node.stop()
    return seconds, consumed


def _metric(node: NodeProcess, name: str) -> int:
    import urllib.request

    with urllib.request.urlopen(node.url + "/metrics", timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(name + " "):
                return int(float(line.split()[1]))
    return -1


def section(result: PipelineResult) -> list[str]:
    """The summary's lines."""
    log, raw, replay, rebuild = result.log, result.raw, result.replay, result.rebuild
    rows = [
        ["raw read_committed consumer", f"{raw.seconds:.1f}", str(raw.records),
         f"{raw.records_per_s:,.0f}", ratio(raw.records_per_s, replay.records_per_s)],
        ["metastore replay (1 process)", f"{replay.wall_s:.1f}", str(replay.records),
         f"{replay.records_per_s:,.0f}", "1.00"],
        [f"metastore rebuild (Spark {result.spark_master})", f"{rebuild.wall_s:.1f}",
         str(rebuild.records), f"{rebuild.records_per_s:,.0f}",
         ratio(rebuild.records_per_s, replay.records_per_s)],
    ]  # fmt: skip
    lines = [
        "",
        f"One log: {log.records:,} records ({log.commits:,} commits) written in "
        f"{log.seconds:.1f} s ({log.records_per_s:,.0f} records/s)",
        table(["reader", "seconds", "records", "records/s", "÷ replay"], rows),
        "  (replay and rebuild: child processes timed start to exit, idle windows and "
        "startup included; raw consumer: to its last record)",
        f"  digests: replay {replay.digest[:16]}  rebuild {rebuild.digest[:16]}  "
        f"{'equal' if replay.digest == rebuild.digest else 'DIFFER'}",
    ]
    if rebuild.summary:
        lines.append(
            f"  rebuild's own clock (Spark job + ingestion + digest): "
            f"{rebuild.summary.get('seconds', 0):.1f} s"
        )
    restored = result.restore
    if restored is not None:
        lines += [
            "",
            f"Restore: {restored.tail_records:,} tail records written after the rebuild; a node "
            f"with an empty data directory started with --restore-from the rebuilt view served "
            f"after {restored.restored_s:.1f} s (its view read {restored.consumed:,} records)",
        ]
        if restored.cold_s is not None:
            lines.append(
                f"  without --restore-from (the whole log): {restored.cold_s:.1f} s, "
                f"{restored.cold_consumed:,} records read"
            )
    return lines
