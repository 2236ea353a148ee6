"""How long the cyclic garbage collector stopped the node, by generation.

CPython's collector runs inside whichever thread allocated past a threshold and
holds the interpreter lock throughout, so every thread of the node (the event loop,
the commit threads) waits for it: a collection's pause is added to whichever
requests are in flight. ``metastore.node.heap`` keeps full collections short by
freezing what lives long; this histogram shows whether that holds on a running node
and what share of its CPU the collector takes (``make bench`` reads it the same
way, from ``/metrics``).

The callback runs inside the collector. Allocating a container there could start
another collection, and taking a lock that another thread (or this one, interrupted
inside ``prometheus_client``) holds could stall the node. So it only stores floats
and ints (never tracked by the collector) into lists made up front, without a lock:
collections never overlap (one holds the interpreter lock to its end), and a scrape
copies the lists before it reads them. The collector is one per process: two nodes
in one process (the tests) each count every collection of that process.
"""

from __future__ import annotations

import gc
from bisect import bisect_left
from collections.abc import Iterator
from time import perf_counter
from typing import Any

from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

NAME = "metastore_gc_pause_seconds"
GENERATIONS = 3  # CPython's: young, middle, full
# seconds: a young collection (tens of microseconds) to a full one of a big heap
PAUSE_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
)  # fmt: skip


class CollectorPauses(Collector):
    """Every collection's pause while installed, as a histogram per generation."""

    def __init__(self, buckets: tuple[float, ...] = PAUSE_BUCKETS) -> None:
        self._bounds = buckets
        # per generation: observations per bucket (the last one: above every bound)
        self._counts = [[0] * (len(buckets) + 1) for _ in range(GENERATIONS)]
        self._sums = [0.0] * GENERATIONS
        self._started = [0.0]

    def install(self) -> None:
        if self._observe not in gc.callbacks:
            gc.callbacks.append(self._observe)

    def uninstall(self) -> None:
        if self._observe in gc.callbacks:
            gc.callbacks.remove(self._observe)

    def _observe(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started[0] = perf_counter()
            return
        pause = perf_counter() - self._started[0]
        generation = info["generation"]
        self._sums[generation] += pause
        self._counts[generation][bisect_left(self._bounds, pause)] += 1

    def totals(self) -> list[tuple[int, float]]:
        """``(collections, seconds paused)`` of each generation so far."""
        return [(sum(list(c)), s) for c, s in zip(self._counts, list(self._sums), strict=True)]

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(
            NAME,
            "the cyclic garbage collector's pauses by generation (0 young, 2 full); every "
            "thread of the process waits for each",
            labels=("generation",),
        )
        for generation in range(GENERATIONS):
            counts = list(self._counts[generation])  # a copy: the collector may add meanwhile
            total = self._sums[generation]
            buckets: list[tuple[str, float]] = []
            seen = 0
            for bound, count in zip(self._bounds, counts, strict=False):
                seen += count
                buckets.append((repr(bound), seen))
            buckets.append(("+Inf", seen + counts[-1]))
            family.add_metric([str(generation)], buckets, total)
        yield family
