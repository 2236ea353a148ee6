"""Phase 4 of the cluster benchmark: replay a log next to a raw consumer of it.

The replay is the function behind ``metastore replay`` (fresh directory, its own
progress bar turned into progress lines); the raw consumer (``raw_broker.py``) reads
the same topics with the same batch and poll slice. Both rates exclude the
idle window that proves the end was reached: the replay's by subtracting it, the
raw consumer's by stopping its clock at the last record.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.load import PROGRESS_EVERY_S, Failures
from bench.report import ratio, table
from bench.scenarios.raw_broker import RawConsumeResult, raw_consume
from metastore.cluster.cluster_config import ClusterConfig
from metastore.cluster.replay import ReplaySummary, replay


@dataclass
class ReplayResult:
    log: str
    records: int
    applied: int
    dropped: int
    waiting: int
    seconds: float  # until the last record (the idle window excluded)
    records_per_s: float
    digest: str
    raw: RawConsumeResult
    ratio: float  # replay records/s / raw consumer records/s


class BarLines(io.TextIOBase):
    """Stands in for stderr while ``replay`` reports its progress: keeps its latest line
    for the benchmark's own progress lines; anything else goes on to the real stderr."""

    def __init__(self, stderr: Any) -> None:
        self.latest = ""
        self._stderr = stderr

    def write(self, text: str) -> int:
        line = text.strip("\r\n ")
        if line.startswith("replay:"):
            self.latest = line
        elif line:
            self._stderr.write(text)
        return len(text)


async def replay_with_progress(
    config: ClusterConfig, data_dir: Path, idle_s: float, label: str
) -> ReplaySummary:
    bar = BarLines(sys.stderr)
    started = time.perf_counter()

    async def tick() -> None:
        while True:
            await asyncio.sleep(PROGRESS_EVERY_S)
            print(f"  [{label}] {time.perf_counter() - started:6.1f}s  {bar.latest}", flush=True)

    ticker = asyncio.get_running_loop().create_task(tick())
    try:
        with contextlib.redirect_stderr(bar):
            summary = await asyncio.to_thread(
                replay, config, data_dir, fresh=True, idle_s=idle_s, progress=True
            )
    finally:
        ticker.cancel()
    print(f"  [{label}] {time.perf_counter() - started:6.1f}s  {bar.latest} done", flush=True)
    return summary


async def replay_log(
    config: ClusterConfig, name: str, data_dir: Path, idle_s: float, failures: Failures
) -> ReplayResult:
    raw = await raw_consume(config, idle_s, f"raw consume / {name}", failures)
    summary = await replay_with_progress(config, data_dir, idle_s, f"replay / {name}")
    seconds = max(1e-9, summary.seconds - idle_s)
    if summary.consumed != raw.records:
        failures.add(
            f"{name}: replay read {summary.consumed} records, the raw consumer {raw.records}"
        )
    rate = summary.consumed / seconds
    return ReplayResult(
        log=name,
        records=summary.consumed,
        applied=summary.applied,
        dropped=summary.dropped,
        waiting=summary.waiting,
        seconds=round(seconds, 3),
        records_per_s=rate,
        digest=summary.digest,
        raw=raw,
        ratio=rate / raw.records_per_s if raw.records_per_s else math.nan,
    )


def section(results: Sequence[ReplayResult]) -> list[str]:
    """The summary's table of the replays (none without results)."""
    if not results:
        return []
    rows = [
        [
            r.log,
            str(r.records),
            f"{r.raw.records_per_s:.0f}",
            f"{r.records_per_s:.0f}",
            ratio(r.records_per_s, r.raw.records_per_s),
            str(r.dropped),
            r.digest[:16],
        ]
        for r in results
    ]
    headers = ["log", "records", "raw consume rec/s", "replay rec/s", "replay / raw",
               "dropped", "digest"]  # fmt: skip
    return [
        "",
        "Replay into a fresh directory vs a raw read_committed consumer of the same topics "
        "(idle window excluded from both)",
        table(headers, rows),
    ]
