"""Token buckets per tenant on an injected clock: bursts, refill, Retry-After, reshaping."""

from __future__ import annotations

import pytest

from metastore.catalog.rate import RateLimiter, TokenBucket
from metastore.util.clock import ManualClock


def test_a_bucket_allows_its_capacity_at_once_then_its_rate() -> None:
    bucket = TokenBucket(rate=2.0, capacity=3.0, now=0.0)
    assert [bucket.take(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take(0.0) == pytest.approx(0.5)  # one token comes in half a second
    assert bucket.take(0.25) == pytest.approx(0.25)  # a refusal takes nothing
    assert bucket.take(0.5) == 0.0
    assert bucket.take(0.5) == pytest.approx(0.5)
    assert bucket.take(100.0) == 0.0  # refilled, but never past its capacity
    assert [bucket.take(100.0) for _ in range(3)][-1] == pytest.approx(0.5)


def test_a_clock_that_steps_back_gives_no_tokens() -> None:
    bucket = TokenBucket(rate=1.0, capacity=1.0, now=10.0)
    assert bucket.take(10.0) == 0.0
    assert bucket.take(5.0) > 0.0  # earlier than the last take: nothing refilled
    assert bucket.take(10.5) == pytest.approx(0.5)
    assert bucket.take(11.0) == 0.0


def test_limiter_refuses_with_whole_seconds_per_tenant() -> None:
    clock = ManualClock()
    limiter = RateLimiter(clock)
    assert [limiter.take("acme", 0.1, 2.0) for _ in range(2)] == [0, 0]
    assert limiter.take("acme", 0.1, 2.0) == 10  # 1 token at 0.1/s
    assert limiter.take("beta", 0.1, 2.0) == 0  # another tenant, another bucket
    clock.advance(9.5)
    assert limiter.take("acme", 0.1, 2.0) == 1  # never 0 while refused: rounded up
    clock.advance(0.5)
    assert limiter.take("acme", 0.1, 2.0) == 0


def test_no_rate_means_no_limit_and_forgets_the_bucket() -> None:
    clock = ManualClock()
    limiter = RateLimiter(clock)
    assert limiter.take("acme", 1.0, 1.0) == 0
    assert limiter.take("acme", 1.0, 1.0) == 1
    assert all(limiter.take("acme", 0.0, 1.0) == 0 for _ in range(100))
    assert limiter.take("acme", 1.0, 1.0) == 0  # a new, full bucket


def test_a_changed_quota_reshapes_the_bucket_without_adding_tokens() -> None:
    clock = ManualClock()
    limiter = RateLimiter(clock)
    for _ in range(5):
        assert limiter.take("acme", 1.0, 5.0) == 0
    assert limiter.take("acme", 100.0, 50.0) == 1  # empty stays empty: 1/100 s, rounded up
    clock.advance(1.0)
    assert [limiter.take("acme", 100.0, 50.0) for _ in range(50)] == [0] * 50
    assert limiter.take("acme", 1.0, 2.0) == 1  # a lower capacity keeps no more than it


def test_the_limiter_remembers_a_bounded_number_of_tenants() -> None:
    clock = ManualClock()
    limiter = RateLimiter(clock, max_tenants=2)
    for tenant in ("a", "b"):
        assert limiter.take(tenant, 1.0, 1.0) == 0
        assert limiter.take(tenant, 1.0, 1.0) == 1
    assert limiter.take("c", 1.0, 1.0) == 0  # "a" is forgotten (least recently used)
    assert limiter.take("b", 1.0, 1.0) == 1
    assert limiter.take("a", 1.0, 1.0) == 0  # starts full again
