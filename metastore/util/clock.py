"""Time sources, injected so tests can step time (and step it backwards)."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_us(self) -> int:
        """Wall-clock microseconds since the Unix epoch."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards (for timeouts)."""
        ...


class SystemClock:
    def now_us(self) -> int:
        return time.time_ns() // 1000

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock the test moves by hand; both readings move together."""

    def __init__(self, now_us: int = 1_767_225_600_000_000) -> None:
        self._now_us = now_us
        self._mono = 0.0

    def now_us(self) -> int:
        return self._now_us

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        self._now_us += int(seconds * 1_000_000)
        self._mono += max(seconds, 0.0)

    def set_us(self, now_us: int) -> None:
        """Jump the wall clock (possibly backwards); the monotonic clock stays put."""
        self._now_us = now_us
