"""The bare-aiohttp ceiling: the embedded write load against an app that only answers.

The same closed loop as ``embedded_writes`` (``concurrency`` clients of one session,
a POST with a small JSON body each, 201 with a small JSON body back) against
``bench.bare_app`` in its own process. The node's commit rate is read against this
rate, measured in the same run on the same (possibly busy) machine.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.load import Client, Failures, Latency, Progress, closed_loop, new_session
from bench.report import ms, pct, ratio, table
from bench.scenarios.embedded_writes import ThroughputResult
from bench.summary import Figure, Row, at_least, at_most
from harness.node import NodeProcess, stop_checked
from harness.process import cpu_seconds

SCENARIO = "bare aiohttp"


class BareApp(NodeProcess):
    """``bench.bare_app`` as a child process, started and stopped like a node."""

    def spawn(self) -> BareApp:
        args = [sys.executable, "-m", "bench.bare_app", "--port", str(self.port)]
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        log.close()
        return self


async def run_posts(
    url: str, pid: int, args: argparse.Namespace, failures: Failures
) -> ThroughputResult:
    async with new_session(args.concurrency) as session:
        client = Client(session, url, failures)
        target = client.catalog("default") + "/namespaces/bench/tables"
        next_index = [0] * args.concurrency
        errors_before = failures.count

        async def send(w: int, i: int) -> float | None:
            reply = await client.call("POST", target, body={"name": f"t{w}_{i}"}, expect=201)
            return reply.seconds if reply.ok else None

        await closed_loop(send, args.concurrency, args.warmup, next_index, None)
        cpu_before = cpu_seconds(pid), cpu_seconds()
        with Progress(SCENARIO) as progress:
            latencies, elapsed = await closed_loop(
                send, args.concurrency, args.seconds, next_index, progress
            )
        return ThroughputResult(
            scenario=SCENARIO,
            fsync=False,
            catalogs=0,
            concurrency=args.concurrency,
            seconds=round(elapsed, 3),
            commits=len(latencies),
            commits_per_s=len(latencies) / elapsed,
            latency=Latency.of(latencies),
            server_commits=0,
            server_batches=0,
            commits_per_write=None,
            commits_per_fsync=None,
            cas_retries=0,
            node_cpu=(cpu_seconds(pid) - cpu_before[0]) / elapsed,
            client_cpu=(cpu_seconds() - cpu_before[1]) / elapsed,
            errors=failures.count - errors_before,
        )


def measure(
    tmp: Path, args: argparse.Namespace, failures: Failures
) -> tuple[ThroughputResult | None, bool]:
    """The ceiling's result and whether its process then stopped cleanly."""
    print("== ceiling: bare aiohttp app, same load ==", flush=True)
    directory = tmp / "bare-app"
    directory.mkdir(parents=True)
    app = BareApp(directory / "data").start()
    result: ThroughputResult | None = None
    try:
        result = asyncio.run(run_posts(app.url, app.pid, args, failures))
    finally:
        stopped = stop_checked(app)
    return result, stopped


def section(ceiling: ThroughputResult | None, nodes: Sequence[ThroughputResult]) -> list[str]:
    """The summary's lines: the ceiling and each write scenario's share of it."""
    if ceiling is None:
        return []
    rows = [
        [
            r.scenario if r is ceiling else r.label,
            "-" if r is ceiling else ("on" if r.fsync else "off"),
            f"{r.commits_per_s:.0f}",
            ratio(r.commits_per_s, ceiling.commits_per_s),
            ms(r.latency.p50),
            ms(r.latency.p99),
            pct(r.node_cpu),
            ms(_cpu_ms(r)),
        ]
        for r in (ceiling, *nodes)
    ]
    headers = [
        "scenario", "fsync", "req/s", "of ceiling", "p50 ms", "p99 ms", "server cpu",
        "cpu ms/req",
    ]  # fmt: skip
    return [
        "",
        f"Against the bare-aiohttp ceiling ({ceiling.concurrency} clients, same POST, "
        "same run; target: >= 0.33 of it, p99 <= 50 ms; cpu ms/req = server CPU per "
        "answer, the figure that holds on a busy machine)",
        table(headers, rows),
    ]


def summary_rows(ceiling: ThroughputResult | None, nodes: Sequence[ThroughputResult]) -> list[Row]:
    """The summary's rows: the ceiling itself, each write scenario's rate against it
    (with fsync on, the target: at least a third), its p99 (at most 50 ms) and the
    server's CPU per answer against the bare app's (reported: on a busy machine the
    rates follow the scheduler, this does not)."""
    if ceiling is None:
        return []
    rows = [
        Row(
            "embedded",
            "bare-aiohttp ceiling req/s",
            Figure("bare aiohttp", ceiling.commits_per_s, "/s"),
        )
    ]
    base_rate = Figure("bare aiohttp", ceiling.commits_per_s, "/s")
    base_cpu = Figure("bare aiohttp", _cpu_ms(ceiling), "ms")
    for r in nodes:
        mode = "fsync" if r.fsync else "no fsync"
        rate = Figure("node", r.commits_per_s, "/s")
        rows.append(
            Row(
                "embedded",
                f"{r.label} ({mode}) commits/s vs ceiling",
                rate,
                base_rate,
                at_least(1 / 3) if r.fsync else None,
            )
        )
        if r.fsync:
            rows.append(
                Row(
                    "embedded",
                    f"{r.label} ({mode}) p99",
                    Figure("node", r.latency.p99, "ms"),
                    None,
                    at_most(50),
                )
            )
        rows.append(
            Row(
                "embedded",
                f"{r.label} ({mode}) server cpu per answer",
                Figure("node", _cpu_ms(r), "ms"),
                base_cpu,
            )
        )
    return rows


def _cpu_ms(r: ThroughputResult) -> float:
    return r.node_cpu / r.commits_per_s * 1000 if r.commits_per_s else math.nan
