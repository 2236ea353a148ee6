"""Load generation and measurement shared by the benchmarks.

A closed loop: ``concurrency`` workers each send one request, wait for the answer,
and send the next until the time is up; latencies of the successful requests are
kept for nearest-rank percentiles. Unexpected answers are counted in ``Failures``
(never raised), and ``Progress`` shows a count line while a phase runs (redrawn
on a terminal, a plain line every ``PROGRESS_EVERY_S`` seconds elsewhere; the
PyIceberg workload, single client and sequential, uses ``Progress`` and ``Latency``
too).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from metastore.util.ticker import Ticker

PROGRESS_EVERY_S = 2.0


@dataclass
class Failures:
    """Unexpected responses (non-2xx) and transport errors, with a few samples."""

    count: int = 0
    samples: list[str] = field(default_factory=list)

    def add(self, what: str) -> None:
        self.count += 1
        if len(self.samples) < 10:
            self.samples.append(what[:300])


@dataclass(frozen=True)
class Latency:
    """Latency summary in milliseconds (nearest-rank percentiles)."""

    n: int
    p50: float
    p99: float
    p999: float
    mean: float
    max: float

    @staticmethod
    def of(seconds: Sequence[float]) -> Latency:
        if not seconds:
            nan = float("nan")
            return Latency(0, nan, nan, nan, nan, nan)
        ordered = sorted(seconds)

        def rank(p: float) -> float:
            return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)] * 1000

        return Latency(
            n=len(ordered),
            p50=rank(50),
            p99=rank(99),
            p999=rank(99.9),
            mean=sum(ordered) / len(ordered) * 1000,
            max=ordered[-1] * 1000,
        )


class Progress:
    """A phase's count line while it runs (``metastore.util.ticker``: redrawn in place on a
    terminal, a plain line every ``PROGRESS_EVERY_S`` seconds elsewhere), and a last one
    marked ``done``.

    The ticker is a daemon thread, so a phase reports the same way whether it runs on
    the event loop (the HTTP loads) or blocks in plain calls (the PyIceberg workload).
    Work reports through ``done`` (bumped by the phase) or ``count`` (read at each
    line, for work counted on other threads).
    """

    def __init__(
        self, label: str, total: int | None = None, count: Callable[[], int] | None = None
    ) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self.errors = 0
        self._count = count
        self._start = time.perf_counter()
        self._finished = False
        self._ticker = Ticker(self._line, line_s=PROGRESS_EVERY_S)

    @property
    def value(self) -> int:
        return self._count() if self._count is not None else self.done

    def __enter__(self) -> Progress:
        self._start = time.perf_counter()
        self._ticker = Ticker(self._line, out=sys.stdout, line_s=PROGRESS_EVERY_S)
        self._ticker.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._finished = True
        self._ticker.__exit__(*exc)

    def _line(self) -> str:
        elapsed = time.perf_counter() - self._start
        done = self.value
        count = f"{done}" if self.total is None else f"{done}/{self.total}"
        rate = done / elapsed if elapsed > 0 else 0.0
        tail = " done" if self._finished else ""
        return (
            f"  [{self.label}] {elapsed:6.1f}s  {count:>13}  {rate:9.1f}/s"
            f"  errors {self.errors}{tail}"
        )


# --- HTTP ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """One answer: ``ok`` iff it had the expected status (then ``body`` is parsed)."""

    ok: bool
    seconds: float
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)


class Client:
    """One node's HTTP API for one tenant; failures are counted, never raised."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        base: str,
        failures: Failures,
        tenant: str = "default",
    ) -> None:
        self.session = session
        self.base = base
        self.api = f"{base}/api/v1/tenants/{tenant}"
        self.failures = failures

    async def call(
        self,
        method: str,
        url: str,
        *,
        body: Any = None,
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        expect: int = 200,
    ) -> Reply:
        start = time.perf_counter()
        try:
            async with self.session.request(
                method, url, json=body, params=params, headers=headers
            ) as response:
                raw = await response.read()
                elapsed = time.perf_counter() - start
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.failures.add(f"{method} {url}: {type(exc).__name__}: {exc}")
            return Reply(False, time.perf_counter() - start)
        if status != expect:
            self.failures.add(f"{method} {url}: HTTP {status} (want {expect}): {raw[:200]!r}")
            return Reply(False, elapsed)
        if not raw or response.content_type != "application/json":
            return Reply(True, elapsed, raw.decode(errors="replace"), response.headers)
        return Reply(True, elapsed, json.loads(raw), response.headers)

    async def request(
        self,
        method: str,
        url: str,
        *,
        body: Any = None,
        params: dict[str, str] | None = None,
        expect: int = 200,
    ) -> tuple[float, Any]:
        """(latency seconds, parsed JSON body or None); failures are counted, not raised."""
        reply = await self.call(method, url, body=body, params=params, expect=expect)
        return reply.seconds, reply.body

    async def metrics(self) -> dict[str, float]:
        _, text = await self.request("GET", self.base + "/metrics")
        return metric_values(str(text or ""))

    def catalog(self, name: str) -> str:
        return f"{self.api}/catalogs/{name}"


def metric_values(text: str) -> dict[str, float]:
    """Each series of a Prometheus text exposition (its name and labels as written) and
    its value."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, _, value = line.rpartition(" ")
            values[series] = float(value)
    return values


def new_session(concurrency: int) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120))


# --- the closed loop -----------------------------------------------------------------

# One request of worker ``w``, its ``i``-th: latency in seconds, or None if it failed.
Send = Callable[[int, int], Awaitable[float | None]]


async def closed_loop(
    send: Send,
    concurrency: int,
    seconds: float,
    next_index: list[int],
    progress: Progress | None,
) -> tuple[list[float], float]:
    """``concurrency`` workers call ``send`` back to back until ``seconds`` pass.

    ``next_index[w]`` is worker ``w``'s next request number (kept across calls, so
    a warm-up and the measured run never reuse a name). Returns the latencies of
    the successful requests and the wall time until the last in-flight one ended.
    """
    latencies: list[float] = []
    start = time.perf_counter()
    deadline = start + seconds

    async def worker(w: int) -> None:
        while time.perf_counter() < deadline:
            i = next_index[w]
            next_index[w] += 1
            elapsed = await send(w, i)
            if elapsed is not None:
                latencies.append(elapsed)
                if progress is not None:
                    progress.done += 1
            elif progress is not None:
                progress.errors += 1

    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return latencies, time.perf_counter() - start


def children_cpu() -> float:
    """CPU seconds (user + system) used so far by this process's child processes that
    are still running (the node the ``metastore`` backend starts), read from /proc."""
    me, total = os.getpid(), 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[1]) == me:  # ppid; utime and stime are the 14th and 15th fields
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def last_cpu() -> int | None:
    """The CPU a benchmark pins a node to (``METASTORE_PIN_CPU``): the last this process
    may use, so the node and the first CPU's interrupts keep apart; None where threads
    cannot be pinned (not Linux)."""
    return max(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


def pin_env(pin: int | None) -> dict[str, str]:
    """A benchmark node's ``METASTORE_PIN_CPU``: ``pin``, or empty (not pinned) whatever
    this process's own environment says."""
    return {"METASTORE_PIN_CPU": "" if pin is None else str(pin)}


def add_pin_cpu_option(parser: argparse.ArgumentParser, what: str) -> None:
    """``--pin-cpu N`` (``last_cpu()`` by default, ``''`` for none): ``args.pin_cpu`` is
    the CPU a benchmark's extra, pinned node takes, or None."""
    parser.add_argument(
        "--pin-cpu",
        type=_cpu_or_none,
        default=last_cpu(),
        metavar="N",
        help=f"also {what} pinned to CPU N (METASTORE_PIN_CPU; default: the last CPU, '' = not)",
    )


def _cpu_or_none(text: str) -> int | None:
    if text == "":
        return None
    if not text.isascii() or not text.isdigit():
        raise argparse.ArgumentTypeError(f"must be a CPU number or '', got {text!r}")
    return int(text)
