"""The least a single PyIceberg client's create, commit step and load can take over REST.

``RestCatalog`` spends CPU of its own on every operation (the request built and sent
through ``requests``, the table metadata of the answer parsed) where ``SqlCatalog``
runs the same pyiceberg code in process. How much, and so how much of ``SqlCatalog``'s
time is left for a server, is measured here rather than argued: ``bench.floor_app``
answers the client with the node's own answers, recorded from the node of this run
(``record``), from memory and without any work. Its figures are the floor of every REST
catalog for this client on this machine; a target against ``SqlCatalog`` that the floor
itself misses cannot be met by any server.

The floor, ``SqlCatalog`` on SQLite and the node run the same three phases (``--tables``
creates, ``--commits`` commit steps of one set-properties, ``--loads`` loads of a table
with five snapshots), each cut into ``--rounds`` rounds, the three taking turns round by
round (the order reversed every other round) as in ``iceberg_workload``, so the ratios
compare figures measured side by side.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.table import Table
from pyiceberg.table.update import SetPropertiesUpdate

from bench.floor_app import kind_of
from bench.load import Latency, Progress
from bench.report import by_column, table
from bench.scenarios.iceberg_workload import SCHEMA, add_snapshots, in_rounds
from bench.summary import Figure, Row
from harness.node import NodeProcess

FLOOR = "rest floor"
NAMESPACE = ("floor",)  # each catalog's tables for the phases
RECORDED = ("floor_recorded",)  # the node's table whose answers are recorded
LOAD_SNAPSHOTS = 5  # as the workload's load_table phase
PHASES = ("create", "step", "load")


class FloorApp(NodeProcess):
    """``bench.floor_app`` as a child process, started and stopped like a node."""

    def __init__(self, answers: Path, log_path: Path) -> None:
        super().__init__(answers.parent, log_path=log_path)
        self.answers = answers

    def spawn(self) -> FloorApp:
        args = [sys.executable, "-m", "bench.floor_app", "--port", str(self.port)]
        args += ["--answers", str(self.answers)]
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        log.close()
        return self


def _answer(status: int, headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
    return {
        "status": status,
        "content-type": headers.get("Content-Type", "application/json"),
        "etag": headers.get("ETag"),
        "body": body.decode(),
    }


def record(url: str) -> dict[str, dict[str, Any]]:
    """The node's answers to one client's config, create, commit step and load (of a
    table with ``LOAD_SNAPSHOTS`` snapshots), as ``bench.floor_app`` replays them."""
    answers: dict[str, dict[str, Any]] = {}
    wanted: set[str] = set()  # the kinds the call being made records
    with urllib.request.urlopen(url.rstrip("/") + "/v1/config", timeout=30) as response:
        answers["config"] = _answer(response.status, response.headers, response.read())
    catalog = RestCatalog("floor-recorder", uri=url)

    def keep(response: requests.Response, *args: Any, **kwargs: Any) -> None:
        kind = kind_of(response.request.method or "", response.request.path_url.split("?")[0])
        if kind in wanted and response.ok:
            answers[kind] = _answer(response.status_code, response.headers, response.content)

    # the client's own session, so that what is recorded is what this client was sent
    catalog._session.hooks["response"].append(keep)
    try:
        catalog.create_namespace(RECORDED)
        wanted.add("create")
        made = catalog.create_table((*RECORDED, "recorded"), SCHEMA)
        wanted.clear()
        wanted.add("commit")  # a commit step's answer, as the phase makes (one property)
        catalog.commit_table(made, (), (SetPropertiesUpdate(updates={"round": "0"}),))
        wanted.clear()
        add_snapshots(catalog, catalog.load_table(made.name()), LOAD_SNAPSHOTS)
        wanted.add("load")  # the table with its snapshots, as the load phase loads
        catalog.load_table(made.name())
    finally:
        catalog.close()
    missing = [kind for kind in ("config", "create", "commit", "load") if kind not in answers]
    if missing:
        raise RuntimeError(f"the node's answers were not recorded: {', '.join(missing)}")
    return answers


@dataclass
class Side:
    """One catalog's three phases: each call's seconds and the client's CPU per phase."""

    name: str
    catalog: Catalog
    step_table: Table
    load_name: tuple[str, ...]
    created: int = 0  # tables made so far (the warm-up's included): each its own name
    times: dict[str, list[float]] = field(default_factory=lambda: {p: [] for p in PHASES})
    cpu: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))

    def call(self, phase: str) -> Callable[[int], object]:
        if phase == "create":
            return lambda _: self._create()
        if phase == "step":
            update = SetPropertiesUpdate
            return lambda i: self.catalog.commit_table(
                self.step_table, (), (update(updates={"round": str(i)}),)
            )
        return lambda _: self.catalog.load_table(self.load_name)

    def _create(self) -> Table:
        self.created += 1
        return self.catalog.create_table((*NAMESPACE, f"c{self.created}"), SCHEMA)

    def result(self) -> dict[str, float]:
        create, step, load = (self.times[p] for p in PHASES)
        return {
            "create_table_per_s": len(create) / sum(create),
            "commit_step_p50_ms": Latency.of(step).p50,
            "load_table_per_s": len(load) / sum(load),
            **{f"{p}_client_cpu_ms": self.cpu[p] / len(self.times[p]) * 1000 for p in PHASES},
        }


def side(name: str, catalog: Catalog, *, floor: bool = False) -> Side:
    """``catalog``'s tables for the phases: on the floor they need not exist (every
    answer is the recorded one), elsewhere they are made here, as the workload makes its
    own."""
    if floor:
        step = catalog.load_table((*NAMESPACE, "step"))
        return Side(name, catalog, step, (*NAMESPACE, "load"))
    catalog.create_namespace(NAMESPACE)
    step = catalog.create_table((*NAMESPACE, "step"), SCHEMA)
    add_snapshots(catalog, catalog.create_table((*NAMESPACE, "load"), SCHEMA), LOAD_SNAPSHOTS)
    return Side(name, catalog, step, (*NAMESPACE, "load"))


def measure(sides: list[Side], args: argparse.Namespace) -> None:
    counts = {"create": args.tables, "step": args.commits, "load": args.loads}
    warm = max(1, args.warmup)
    for one in sides:  # not measured: the first calls of a catalog (``warm_up``)
        for phase in PHASES:
            call = one.call(phase)
            for i in range(warm):
                call(i)
    total = sum(counts.values()) * len(sides)
    with Progress("client floor", total=total) as progress:
        for phase in PHASES:
            pieces = in_rounds(counts[phase], args.rounds)
            for number, piece in enumerate(pieces):
                order = sides if number % 2 == 0 else sides[::-1]
                for one in order:
                    call = one.call(phase)
                    started_cpu = time.process_time()
                    for i in piece:
                        started = time.perf_counter()
                        call(i)
                        one.times[phase].append(time.perf_counter() - started)
                        progress.done += 1
                    one.cpu[phase] += time.process_time() - started_cpu


def run(
    catalogs: Mapping[str, Catalog], node_url: str, work: Path, args: argparse.Namespace
) -> dict[str, dict[str, float]]:
    """The floor beside ``catalogs`` (the workload's, by backend name): the figures of
    each, by name."""
    answers = work / "answers.json"
    answers.write_text(json.dumps(record(node_url)))
    with FloorApp(answers, work / "floor_app.log") as app:
        floor = RestCatalog("floor", uri=app.url)
        try:
            sides = [side(FLOOR, floor, floor=True)]
            sides += [side(name, catalog) for name, catalog in catalogs.items()]
            measure(sides, args)
        finally:
            floor.close()
    return {one.name: one.result() for one in sides}


ROWS = [
    ("create_table/s", "create_table_per_s", "{:.0f}"),
    ("commit step p50 ms", "commit_step_p50_ms", "{:.2f}"),
    ("load_table/s", "load_table_per_s", "{:.0f}"),
    ("create_table client CPU ms", "create_client_cpu_ms", "{:.2f}"),
    ("commit step client CPU ms", "step_client_cpu_ms", "{:.2f}"),
    ("load_table client CPU ms", "load_client_cpu_ms", "{:.2f}"),
]


def section(results: Mapping[str, Mapping[str, float]]) -> list[str]:
    names = list(results)
    rows = by_column(results, ROWS)
    head = (
        f"The REST client's floor ({FLOOR}: PyIceberg's RestCatalog against the node's own "
        "answers replayed from memory), side by side with"
    )
    return [head + " " + ", ".join(names[1:]) + ":", table(["measure", *names], rows)]


SUMMARY = [
    ("create_table/s", "create_table_per_s", "/s"),
    ("commit step p50", "commit_step_p50_ms", "ms"),
    ("load_table/s", "load_table_per_s", "/s"),
]


def summary_rows(results: Mapping[str, Mapping[str, float]], ours: str, base: str) -> list[Row]:
    """The floor against ``base`` (what any REST catalog could reach, as a share of
    ``base``'s figure) and ``ours`` against the floor (how much of what the client
    allows this service reaches). Reported, without targets: they bound the targets."""
    floor = results.get(FLOOR)
    if floor is None:
        return []
    rows: list[Row] = []
    for label, key, unit in SUMMARY:
        if base in results:
            rows.append(
                Row(
                    "iceberg floor",
                    f"{label}: REST client floor vs {base}",
                    Figure(FLOOR, floor[key], unit),
                    Figure(base, results[base][key], unit),
                )
            )
        if ours in results:
            rows.append(
                Row(
                    "iceberg floor",
                    f"{label}: {ours} vs REST client floor",
                    Figure(ours, results[ours][key], unit),
                    Figure(FLOOR, floor[key], unit),
                )
            )
    return rows
