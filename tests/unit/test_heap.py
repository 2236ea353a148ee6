"""The node's collector settings: what startup loaded is frozen, so a full collection
no longer walks it (the tail of the commit latency)."""

from __future__ import annotations

import subprocess
import sys
from textwrap import dedent


def test_startup_heap_is_frozen_out_of_full_collections() -> None:
    # In a fresh interpreter: freezing the test process would change every other test.
    script = dedent(
        """
        import gc
        from metastore.api import heap, server  # the node's modules, as serve loads them
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
