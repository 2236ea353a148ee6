"""Request rate per tenant: one token bucket per tenant, in this node's memory.

A bucket holds up to ``capacity`` tokens and gains ``rate`` tokens a second; a
request takes one, and a request that finds none is refused with the time until
one is there (429 with ``Retry-After``). So a tenant may send ``capacity``
requests at once and ``rate`` a second on average. The buckets are per node: a
tenant's requests spread over N nodes may reach N times its rate in total, and a
restarted node starts every bucket full. Time comes from an injected ``Clock``
(monotonic seconds), so tests step it by hand.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict

from metastore.util.clock import Clock


class TokenBucket:
    def __init__(self, rate: float, capacity: float, now: float) -> None:
        self.rate = rate
        self.capacity = capacity
        self._tokens = capacity
        self._at = now

    def take(self, now: float) -> float:
        """Take one token: 0.0 if there was one, else the seconds until there is."""
        elapsed = max(0.0, now - self._at)  # a clock that steps back gives nothing
        self._tokens = min(self.capacity, self._tokens + elapsed * self.rate)
        self._at = max(self._at, now)
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / self.rate

    def reshape(self, rate: float, capacity: float) -> None:
        """A changed quota: the new rate from now on, never more tokens than it holds."""
        self.rate = rate
        self.capacity = capacity
        self._tokens = min(self._tokens, capacity)


class RateLimiter:
    """The buckets of every tenant this node served lately (at most ``max_tenants``:
    past that the least recently used is forgotten, i.e. starts full again)."""

    def __init__(self, clock: Clock, max_tenants: int = 10_000) -> None:
        self._clock = clock
        self._max = max_tenants
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, tenant: str, rate: float, capacity: float) -> int:
        """0 if ``tenant`` may send a request now, else whole seconds to wait (>= 1).
        ``rate`` <= 0 means no limit (and forgets the tenant's bucket)."""
        with self._lock:
            if rate <= 0:
                self._buckets.pop(tenant, None)
                return 0
            now = self._clock.monotonic()
            bucket = self._buckets.get(tenant)
            if bucket is None:
                bucket = self._buckets[tenant] = TokenBucket(rate, capacity, now)
                while len(self._buckets) > self._max:
                    self._buckets.popitem(last=False)
            elif (bucket.rate, bucket.capacity) != (rate, capacity):
                bucket.reshape(rate, capacity)
            self._buckets.move_to_end(tenant)
            wait = bucket.take(now)
        return 0 if wait == 0.0 else max(1, math.ceil(wait))
