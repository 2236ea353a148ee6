"""The node's collector settings: what startup loaded and what full collections leave
is frozen, so a full collection no longer walks it (the tail of the commit latency);
an occasional reclaim frees cycles that were frozen while alive."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from textwrap import dedent

from harness.node import NodeProcess


def test_startup_heap_is_frozen_out_of_full_collections() -> None:
    # In a fresh interpreter: freezing the test process would change every other test.
    script = dedent(
        """
        import gc
        from metastore.node import heap, server  # the node's modules, as serve loads them
        import pyiceberg.table  # noqa: F401

        before = len(gc.get_objects())
        heap.settle_after_startup()
        walked = len(gc.get_objects())  # what a full collection still walks
        print(gc.get_freeze_count(), before, walked)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], check=True, capture_output=True, text=True
    ).stdout
    frozen, before, walked = map(int, out.split())
    assert frozen > 0.9 * before
    assert walked < 0.1 * before


def _run(script: str) -> list[str]:
    """``script`` in a fresh interpreter (freezing this one would change every other
    test); its printed words."""
    return subprocess.run(
        [sys.executable, "-c", dedent(script)], check=True, capture_output=True, text=True
    ).stdout.split()


def test_what_a_full_collection_leaves_is_frozen_from_then_on() -> None:
    frozen, walked, after_stop = map(
        int,
        _run(
            """
            import gc
            from metastore.node import heap

            heap.settle_after_startup()
            heap.freeze_survivors()
            start = gc.get_freeze_count()
            kept = [[i] for i in range(20_000)]  # a cache filling up
            gc.collect()
            frozen = gc.get_freeze_count() - start
            walked = len(gc.get_objects())  # what the next full collection walks
            heap.stop_freezing_survivors()
            more = [[i] for i in range(5_000)]
            gc.collect()
            print(frozen, walked, len(gc.get_objects()))
            """
        ),
    )
    assert frozen >= 20_000
    assert walked < 1_000
    assert after_stop >= 5_000  # no longer frozen once stopped


def test_reclaim_frees_a_cycle_frozen_while_it_was_alive() -> None:
    alive_frozen, alive_reclaimed, freed = _run(
        """
        import gc
        import weakref
        from metastore.node import heap

        class Request:  # a request in flight at a freeze, in a cycle with itself
            pass

        request = Request()
        request.me = request
        ref = weakref.ref(request)
        heap.settle_after_startup()
        del request
        gc.collect()
        alive_frozen = ref() is not None
        freed = heap.reclaim()
        print(alive_frozen, ref() is not None, freed)
        """
    )
    assert (alive_frozen, alive_reclaimed) == ("True", "False")
    assert int(freed) >= 1


def test_a_node_reclaims_at_its_interval(tmp_path: Path) -> None:
    with NodeProcess(tmp_path / "data", env={"METASTORE_GC_RECLAIM_S": "1"}) as node:
        deadline = time.monotonic() + 30
        while "heap: one full collection freed" not in node.log_path.read_text():
            assert time.monotonic() < deadline, node.log_tail()
            time.sleep(0.1)
