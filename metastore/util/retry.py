"""One retry schedule for every loop that waits and tries again.

A commit that loses its compare-and-swap, a write forwarded to an owner that moved,
a bootstrap step waiting for its partition's owner: each retries the same way,
with exponential backoff and full jitter (a random delay between 0 and the current
cap, so retrying writers spread out instead of colliding again), bounded by a
number of attempts, a deadline, or both.

What to retry stays with the caller: it catches "conflict, refresh and retry"
(``CommitConflict``, ``RefConditionFailed``, ``NotOwner``) and asks the schedule
for another attempt; "outcome unknown" (``CommitStateUnknown``) is never retried,
because the first attempt may have landed. The clock, the sleep and the random
source are injectable, so the schedule is tested without waiting.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

Clock = Callable[[], float]
Sleep = Callable[[float], None]
AsyncSleep = Callable[[float], Awaitable[None]]

# The jitter's source when none is given. One for the process: seeding a new
# ``random.Random()`` reads the OS's entropy and fills 2.5 KB of state, a cost every
# commit paid (a schedule starts per commit) and a measurable share of a busy node.
_JITTER = random.Random()


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long to wait between attempts and when to give up.

    The n-th wait (n from 0) is drawn from [0, min(max_s, base_s * 2**n)] with
    ``jitter``, or is exactly that cap without it. ``max_attempts`` counts every
    attempt including the first; ``deadline_s`` is measured from ``start``. A wait
    that would end past the deadline is not taken: the caller gives up at once.
    """

    base_s: float
    max_s: float
    max_attempts: int | None = None
    deadline_s: float | None = None
    jitter: bool = True

    def __post_init__(self) -> None:
        if self.base_s < 0 or self.max_s < self.base_s:
            raise ValueError(f"retry backoff needs 0 <= base ({self.base_s}) <= max ({self.max_s})")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError(f"retry max_attempts must be at least 1, not {self.max_attempts}")
        if self.deadline_s is not None and self.deadline_s < 0:
            raise ValueError(f"retry deadline must not be negative, not {self.deadline_s}")

    def start(
        self,
        *,
        clock: Clock = time.monotonic,
        sleep: Sleep = time.sleep,
        async_sleep: AsyncSleep = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> Attempts:
        """The schedule of one retried operation, its first attempt about to run."""
        return Attempts(self, clock, sleep, async_sleep, rng or _JITTER)


class Attempts:
    """One operation's attempts: ``backoff`` (or ``abackoff``) after each failed one."""

    def __init__(
        self,
        policy: RetryPolicy,
        clock: Clock,
        sleep: Sleep,
        async_sleep: AsyncSleep,
        rng: random.Random,
    ) -> None:
        self.policy = policy
        self._clock = clock
        self._sleep = sleep
        self._async_sleep = async_sleep
        self._rng = rng
        self.started = clock()
        self.attempt = 1  # the attempt running now, from 1

    @property
    def elapsed(self) -> float:
        return self._clock() - self.started

    def next_delay(self) -> float | None:
        """The wait before the next attempt, or None when the policy says give up."""
        policy = self.policy
        if policy.max_attempts is not None and self.attempt >= policy.max_attempts:
            return None
        cap = min(policy.max_s, policy.base_s * 2 ** (self.attempt - 1))
        delay = self._rng.uniform(0, cap) if policy.jitter else cap
        if policy.deadline_s is not None and self.elapsed + delay > policy.deadline_s:
            return None
        return delay

    def backoff(self) -> bool:
        """Wait for the next attempt (blocking: only off the event loop); False = give up."""
        delay = self.next_delay()
        if delay is None:
            return False
        self._sleep(delay)
        self.attempt += 1
        return True

    async def abackoff(self) -> bool:
        """``backoff`` for coroutines: waits without blocking the event loop."""
        delay = self.next_delay()
        if delay is None:
            return False
        await self._async_sleep(delay)
        self.attempt += 1
        return True
