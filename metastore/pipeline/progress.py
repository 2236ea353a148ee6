"""A job's progress: periodic counts and rate while it runs, one summary at the end.

Tasks count what they read (``records``: stored key/value rows or changelog records)
and what they decoded and checked or exported (``objects``) into two Spark
accumulators; Spark adds a task's counts when the task ends, so the driver's
progress line (on standard error: redrawn in place on a terminal, a plain line every
``interval_s`` elsewhere, ``metastore.util.ticker``) also shows finished/total tasks of the
running stages. The summary goes to standard output.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, TextIO

from pyspark import Accumulator, SparkContext

from metastore.util.ticker import Ticker


@dataclass(frozen=True, slots=True)
class Summary:
    job: str
    records: int
    objects: int
    seconds: float

    @property
    def throughput(self) -> float:
        """Objects per second (records per second where nothing is decoded)."""
        done = self.objects or self.records
        return done / self.seconds if self.seconds > 0 else 0.0

    def render(self) -> str:
        return (
            f"{self.job}: {self.records:,} records, {self.objects:,} objects in "
            f"{self.seconds:.1f} s ({self.throughput:,.0f} objects/s)"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "objects": self.objects,
            "seconds": round(self.seconds, 3),
            "objects_per_s": round(self.throughput, 1),
        }


class Progress:
    """Counters for tasks and a reporter thread for the driver (a context manager)."""

    def __init__(
        self,
        context: SparkContext,
        job: str,
        *,
        enabled: bool = True,
        interval_s: float = 2.0,
        out: TextIO | None = None,
    ) -> None:
        self.job = job
        self.records: Accumulator[int] = context.accumulator(0)
        self.objects: Accumulator[int] = context.accumulator(0)
        self._context = context
        self._started = time.monotonic()
        self._ticker = Ticker(self.line, out=out, enabled=enabled, line_s=interval_s)

    def __enter__(self) -> Progress:
        self._started = time.monotonic()
        self._ticker.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._ticker.__exit__(*exc)

    def summary(self) -> Summary:
        return Summary(
            self.job, self.records.value, self.objects.value, time.monotonic() - self._started
        )

    def line(self) -> str:
        seconds = time.monotonic() - self._started
        records = self.records.value
        rate = records / seconds if seconds > 0 else 0.0
        tasks = ""
        tracker = self._context.statusTracker()
        stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
        done = sum(s.numCompletedTasks for s in stages if s is not None)
        total = sum(s.numTasks for s in stages if s is not None)
        if total:
            tasks = f", tasks {done}/{total}"
        return (
            f"{self.job}: {records:,} records, {self.objects.value:,} objects{tasks}, "
            f"{seconds:.0f} s ({rate:,.0f} records/s)"
        )
