"""Failure windows of the token endpoint, on an injected clock."""

from __future__ import annotations

import pytest

from metastore.security.attempts import Attempts, FailureWindow, TooManyFailures


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_key_at_its_limit_waits_until_its_oldest_failure_leaves_the_window() -> None:
    clock = Clock()
    window = FailureWindow(limit=2, window_s=60, clock=clock)
    window.add("alice")
    clock.now += 10
    window.add("alice")
    assert window.wait_s("alice") == pytest.approx(50)
    assert window.wait_s("bob") == 0
    clock.now += 50
    assert window.wait_s("alice") == 0  # the first failure left the window
    window.add("alice")
    assert window.wait_s("alice") == pytest.approx(10)  # now the second one is the oldest


def test_attempts_count_until_forgiven_and_retry_after_rounds_up() -> None:
    clock = Clock()
    attempts = Attempts(FailureWindow(2, 60, clock), FailureWindow(100, 60, clock))
    first = attempts.begin("alice", "10.0.0.1")
    attempts.begin("alice", "10.0.0.1")  # in flight: both count
    with pytest.raises(TooManyFailures) as refused:
        attempts.begin("alice", "10.0.0.2")
    assert refused.value.status == 429 and refused.value.retry_after == 60
    attempts.forgive(first)  # it succeeded
    attempts.begin("alice", "10.0.0.2")
    clock.now += 59.5
    with pytest.raises(TooManyFailures) as refused:
        attempts.begin("alice", "10.0.0.3")
    assert refused.value.retry_after == 1  # never 0: "retry now" would be a lie


def test_the_address_limit_holds_back_every_id() -> None:
    clock = Clock()
    attempts = Attempts(FailureWindow(100, 60, clock), FailureWindow(3, 60, clock))
    for client in ("a", "b", "c"):
        attempts.begin(client, "10.0.0.1")
    with pytest.raises(TooManyFailures):
        attempts.begin("d", "10.0.0.1")
    attempts.begin("d", "10.0.0.2")  # another address is not


def test_memory_is_bounded_by_forgetting_the_least_recently_failed_keys() -> None:
    clock = Clock()
    window = FailureWindow(limit=1, window_s=60, clock=clock, max_keys=3)
    for key in ("a", "b", "c", "d"):
        window.add(key)
    assert window.wait_s("a") == 0  # forgotten
    assert all(window.wait_s(key) > 0 for key in ("b", "c", "d"))
