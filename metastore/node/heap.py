"""The node's garbage collector, set for a server: what lives long is frozen.

CPython's cyclic collector stops the whole process while it runs, and a full
(oldest-generation) collection walks every tracked object: with the modules,
pyiceberg's and pydantic's classes, the app and the caches loaded at startup, one
took 0.8 s on the loaded 2-core benchmark machine during a PyIceberg workload, paid
in full by the request that triggered it (the tail of the commit latency). Once the
node is up, ``settle_after_startup`` collects once and freezes what survived
(``gc.freeze``: moved to a permanent generation that collections do not walk), so a
full collection walks only what was allocated since: 0.16 s on the same workload.

Serving, the object cache fills with decoded commits and entities (tens of thousands
of tracked objects a minute under load), and every full collection walked them all
again and found nothing to free: 40-110 ms pauses about once a second with 64
catalogs committing, which were the commit latency's p99. So ``freeze_survivors``
freezes what each full collection leaves: a full collection walks only what arrived
since the last one. Frozen objects are still freed by reference counting when nothing
refers to them; only a reference cycle among them would outlive its use (a request in
flight at a freeze, an exception with its traceback). ``reclaim`` unfreezes, collects
everything and freezes again, every ``METASTORE_GC_RECLAIM_S`` (600 s): one full walk
of the heap per interval instead of one a second, and such cycles live at most that
long. The collection thresholds stay CPython's: raising the youngest one (fewer,
bigger young collections) made the middle generation's pauses longer in the same
measurement.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from typing import Any

log = logging.getLogger(__name__)


def settle_after_startup() -> None:
    """Collect once and freeze what survived startup."""
    gc.collect()
    gc.freeze()


def freeze_survivors() -> None:
    """From now on, what a full collection leaves is frozen."""
    if _freeze_after_full not in gc.callbacks:
        gc.callbacks.append(_freeze_after_full)


def stop_freezing_survivors() -> None:
    if _freeze_after_full in gc.callbacks:
        gc.callbacks.remove(_freeze_after_full)


def _freeze_after_full(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop" and info.get("generation") == 2:
        gc.freeze()


def reclaim() -> int:
    """Collect everything, the frozen objects included, and freeze what survives; the
    number of objects freed (cyclic garbage that had been frozen while alive)."""
    gc.unfreeze()
    collected = gc.collect()
    gc.freeze()
    return collected


async def reclaim_every(interval_s: float) -> None:
    """``reclaim`` once per ``interval_s``, on the loop (the pause is the same wherever
    it runs: the collector stops every thread)."""
    while True:
        await asyncio.sleep(interval_s)
        started = time.perf_counter()
        collected = reclaim()
        log.info(
            "heap: one full collection freed %d objects in %.0f ms; %d objects frozen",
            collected,
            (time.perf_counter() - started) * 1000,
            gc.get_freeze_count(),
        )
