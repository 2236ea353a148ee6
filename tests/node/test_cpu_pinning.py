"""``METASTORE_PIN_CPU``: a real node's interpreter threads run on the CPU it names (its
main thread, the event loop, and every thread started after it, by requests too), while
RocksDB's background threads keep every CPU the node could use (read from ``/proc``, the
kernel's view). Native threads libraries start at import, before the settings are read
(pyarrow's), are left as the scheduler has them."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from harness.node import NodeProcess
from metastore.config.server_config import ServerConfig
from metastore.node.refusals import refusal
from metastore.util import cpu_pinning

CPUS = sorted(os.sched_getaffinity(0))


def _threads(pid: int) -> dict[int, tuple[str, frozenset[int]]]:
    """Every thread of ``pid``: its name and the CPUs it may run on."""
    threads = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            threads[int(task.name)] = (
                (task / "comm").read_text().strip(),
                frozenset(os.sched_getaffinity(int(task.name))),
            )
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended meanwhile
    return threads


@pytest.mark.skipif(len(CPUS) < 2, reason="one CPU: pinned and free threads look alike")
def test_a_pinned_node_runs_its_interpreter_threads_on_one_cpu(tmp_path: Path) -> None:
    cpu = CPUS[-1]
    env = {"METASTORE_PIN_CPU": str(cpu)}
    with NodeProcess(tmp_path / "data", extra_args=("--fsync",), env=env) as node:
        at_start = _threads(node.pid)
        catalog = RestCatalog("pinned", uri=node.url)
        catalog.create_namespace("ns")
        table = catalog.create_table("ns.t", Schema(NestedField(1, "id", LongType())))
        for step in range(3):  # the commit and sync threads start with the first commits
            with table.transaction() as tx:
                tx.set_properties(step=str(step))
        threads = _threads(node.pid)
        log = node.log_path.read_text()
    started = {tid: cpus for tid, (_, cpus) in threads.items() if tid not in at_start}
    background = {tid: cpus for tid, (name, cpus) in threads.items() if name.startswith("rocksdb:")}
    assert threads[node.pid][1] == {cpu}, threads  # the main thread: the event loop
    assert len(started) >= 2, (at_start, threads)  # commit and sync threads at least
    assert set(started.values()) == {frozenset({cpu})}, threads
    assert background, threads
    assert set(background.values()) == {frozenset(CPUS)}, threads
    assert f"interpreter threads pinned to CPU {cpu}" in log
    assert f"{len(background)} background threads run on" in log


def test_an_unpinned_node_leaves_the_scheduler_free(tmp_path: Path) -> None:
    with NodeProcess(tmp_path / "data", env={"METASTORE_PIN_CPU": ""}) as node:
        RestCatalog("free", uri=node.url).create_namespace("ns")
        threads = _threads(node.pid)
        log = node.log_path.read_text()
    assert {cpus for _, cpus in threads.values()} == {frozenset(CPUS)}, threads
    assert "interpreter threads pinned" not in log


def test_only_background_threads_are_given_cpus_back(tmp_path: Path) -> None:
    """Thread names come from ``/proc``; one that ended between listing and reading is
    skipped, and no thread of another name is touched (these tids are not threads)."""
    for tid, name in [(1, "python"), (2, "jemalloc_bg_thd")]:
        (tmp_path / str(tid)).mkdir()
        (tmp_path / str(tid) / "comm").write_text(name + "\n")
    (tmp_path / "3").mkdir()  # ended: no comm any more
    assert cpu_pinning.free_background(frozenset(CPUS), tasks=tmp_path) == 0


@pytest.mark.parametrize(
    ("cpus", "shown"),
    [({0}, "CPUs 0"), ({0, 1, 2, 5}, "CPUs 0-2,5"), ({3, 4, 7, 8, 9}, "CPUs 3-4,7-9")],
)
def test_cpu_sets_are_shown_as_ranges(cpus: set[int], shown: str) -> None:
    assert cpu_pinning._ranges(cpus) == shown


def test_a_cpu_the_system_will_not_pin_to_stops_the_node_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A CPU taken offline since the settings were checked, or a sandbox that forbids
    pinning: ``metastore serve`` prints this line and exits 2, no traceback."""

    def forbidden(pid: int, cpus: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setaffinity", forbidden)
    with pytest.raises(cpu_pinning.PinRefused) as refused:
        cpu_pinning.pin(CPUS[0])
    names = ServerConfig.names({}, {"METASTORE_PIN_CPU": str(CPUS[0])})
    assert refusal(refused.value, ServerConfig(), names) == (
        f"METASTORE_PIN_CPU: cannot pin to CPU {CPUS[0]} (Operation not permitted); name "
        "another CPU, or leave it empty"
    )
