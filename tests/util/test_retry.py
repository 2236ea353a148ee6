"""The one retry schedule: attempts, deadline, jitter bounds, async waits."""

from __future__ import annotations

import asyncio
import random

import pytest

from metastore.util.retry import RetryPolicy


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    async def async_sleep(self, seconds: float) -> None:
        self.sleep(seconds)


def test_max_attempts_counts_the_first_attempt() -> None:
    t = FakeTime()
    attempts = RetryPolicy(0.01, 1.0, max_attempts=3, jitter=False).start(
        clock=t.clock, sleep=t.sleep
    )
    assert attempts.backoff() and attempts.backoff()
    assert not attempts.backoff()
    assert t.slept == [0.01, 0.02]
    assert attempts.attempt == 3


def test_backoff_doubles_up_to_the_cap() -> None:
    t = FakeTime()
    attempts = RetryPolicy(0.1, 0.5, jitter=False).start(clock=t.clock, sleep=t.sleep)
    for _ in range(5):
        assert attempts.backoff()
    assert t.slept == [0.1, 0.2, 0.4, 0.5, 0.5]


def test_full_jitter_stays_within_the_cap() -> None:
    t = FakeTime()
    attempts = RetryPolicy(0.1, 0.4, max_attempts=200).start(
        clock=t.clock, sleep=t.sleep, rng=random.Random(7)
    )
    while attempts.backoff():
        pass
    caps = [min(0.4, 0.1 * 2**n) for n in range(199)]
    assert all(0 <= s <= cap for s, cap in zip(t.slept, caps, strict=True))
    assert len(set(t.slept)) > 100  # drawn, not fixed


def test_a_wait_past_the_deadline_is_not_taken() -> None:
    t = FakeTime()
    attempts = RetryPolicy(1.0, 1.0, deadline_s=2.5, jitter=False).start(
        clock=t.clock, sleep=t.sleep
    )
    assert attempts.backoff() and attempts.backoff()
    assert not attempts.backoff()  # 2.0 + 1.0 > 2.5
    assert t.now == 2.0


def test_time_spent_in_attempts_counts_against_the_deadline() -> None:
    t = FakeTime()
    attempts = RetryPolicy(0.1, 0.1, deadline_s=1.0, jitter=False).start(
        clock=t.clock, sleep=t.sleep
    )
    t.now += 0.95  # a slow attempt
    assert not attempts.backoff()


def test_async_backoff_uses_the_async_sleep() -> None:
    t = FakeTime()
    attempts = RetryPolicy(0.05, 0.05, max_attempts=2, jitter=False).start(
        clock=t.clock, async_sleep=t.async_sleep
    )

    async def run() -> list[bool]:
        return [await attempts.abackoff(), await attempts.abackoff()]

    assert asyncio.run(run()) == [True, False]
    assert t.slept == [0.05]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"base_s": -1.0, "max_s": 1.0},
        {"base_s": 2.0, "max_s": 1.0},
        {"base_s": 0.1, "max_s": 1.0, "max_attempts": 0},
        {"base_s": 0.1, "max_s": 1.0, "deadline_s": -1.0},
    ],
)
def test_a_policy_that_cannot_work_is_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
