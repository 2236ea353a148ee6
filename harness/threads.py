"""Threads run to provoke races: the interpreter switches between them far more often
than its default 5 ms, so an interleaving that breaks a rule shows up in a short test."""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence


def run_interleaved(
    threads: Sequence[threading.Thread], switch_interval_s: float, timeout_s: float = 60.0
) -> None:
    """Start ``threads`` and join each (up to ``timeout_s``) with the interpreter's switch
    interval at ``switch_interval_s``; the previous interval is restored after."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(switch_interval_s)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout_s)
    finally:
        sys.setswitchinterval(previous)
