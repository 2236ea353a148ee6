"""One CPU for the node's interpreter threads (``METASTORE_PIN_CPU``).

A request passes between threads that take turns under one interpreter lock: the
event loop reads it, a request thread prepares it, a commit thread writes it, a
sync thread makes its files durable, and the loop answers. Each turn wakes a
thread; when the scheduler wakes it on another CPU, that CPU must be woken first,
which on a virtual machine costs more than most of the work handed over (a Python
round trip to an idle pool thread: 100 µs of CPU across two vCPUs, 27 µs on one).
The interpreter lock lets only one of these threads compute at a time anyway, so
keeping them on one CPU loses no parallelism and saves those wake-ups.

Threads inherit their creator's CPUs, so pinning the main thread before the app
starts pins every thread the node starts after it. RocksDB's background threads
(flushes and compactions, named ``rocksdb:*``) never take the interpreter lock;
``free_background`` gives them back every CPU the process had, so a compaction
does not wait behind the interpreter. Linux only; off by default, because a CPU
chosen for the node should be one nothing else keeps busy.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

BACKGROUND_PREFIXES = ("rocksdb:",)  # threads that run without the interpreter lock


class PinRefused(Exception):
    """The system would not pin the node's threads (a CPU taken offline since the
    settings were checked, or a sandbox that forbids it): the node does not start."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def parse(value: str) -> int | None:
    """The CPU ``value`` names, or None for "" (off); ValueError says why it cannot be."""
    if value == "":
        return None
    if not value.isascii() or not value.isdigit():
        raise ValueError(f"must be a CPU number or empty (off), got {value!r}")
    if not hasattr(os, "sched_setaffinity"):
        raise ValueError("pinning needs Linux (sched_setaffinity); leave it empty here")
    cpu = int(value)
    allowed = os.sched_getaffinity(0)
    if cpu not in allowed:
        raise ValueError(f"CPU {cpu} is not one this node may run on ({_ranges(allowed)})")
    return cpu


def pin(cpu: int) -> frozenset[int]:
    """Pin the calling thread, and so every thread it starts from now on, to ``cpu``;
    returns the CPUs it could use before (for ``free_background``)."""
    before = frozenset(os.sched_getaffinity(0))
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError as exc:
        raise PinRefused(f"cannot pin to CPU {cpu} ({exc.strerror or exc})") from None
    log.info("interpreter threads pinned to CPU %d (of %s)", cpu, _ranges(before))
    return before


def free_background(cpus: frozenset[int], tasks: Path = Path("/proc/self/task")) -> int:
    """Give the process's background threads (``BACKGROUND_PREFIXES``) ``cpus`` back;
    how many threads were given them. A thread that ended meanwhile is skipped."""
    freed = 0
    for task in tasks.iterdir():
        try:
            name = (task / "comm").read_text().strip()
            if name.startswith(BACKGROUND_PREFIXES):
                os.sched_setaffinity(int(task.name), cpus)
                freed += 1
        except (FileNotFoundError, ProcessLookupError):
            continue
    log.info("%d background threads run on %s", freed, _ranges(cpus))
    return freed


def _ranges(cpus: frozenset[int] | set[int]) -> str:
    """``{0, 1, 2, 5}`` as ``CPUs 0-2,5``."""
    parts: list[str] = []
    for cpu in sorted(cpus):
        if parts and parts[-1].split("-")[-1] == str(cpu - 1):
            parts[-1] = f"{parts[-1].split('-')[0]}-{cpu}"
        else:
            parts.append(str(cpu))
    return "CPUs " + ",".join(parts)
