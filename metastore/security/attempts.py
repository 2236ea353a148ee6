"""Limits on failed token requests, per client id and per source address.

Without them the token endpoint lets anyone guess secrets as fast as the node
hashes. A key (a client id, or an address) that failed ``limit`` times within
the last ``window_s`` seconds is refused (429 with ``Retry-After``) until its
oldest failure leaves the window. The per-id limit stops guessing one client's
secret from many addresses (at the price that a guesser can hold that client's
token requests back for a window; tokens already issued keep working); the
per-address limit stops one address from trying many ids.

An attempt counts as a failure from the moment it starts and is forgiven if it
succeeds, so concurrent guesses cannot all slip in before the first one fails.
Unknown ids are limited exactly like real ones: the reply must not tell them
apart. Memory is bounded: past ``max_keys`` keys the least recently failed are
forgotten.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass

from metastore.errors import MetastoreError

Clock = Callable[[], float]


class TooManyFailures(MetastoreError):
    """429: too many failed token requests for this client id or from this address."""

    status = 429
    error_type = "TooManyRequestsException"

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class FailureWindow:
    """Failure times per key within a sliding window (monotonic seconds)."""

    def __init__(
        self, limit: int, window_s: float, clock: Clock = time.monotonic, max_keys: int = 10_000
    ) -> None:
        self.limit = limit
        self.window_s = window_s
        self._clock = clock
        self._max_keys = max_keys
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def wait_s(self, key: str) -> float:
        """Seconds until ``key`` may try again (0 = now)."""
        times = self._recent(key)
        if times is None or len(times) < self.limit:
            return 0.0
        return max(0.0, times[0] + self.window_s - self._clock())

    def add(self, key: str) -> float:
        """Count one failure of ``key`` now; returns the time it was counted at."""
        now = self._clock()
        times = self._recent(key)
        if times is None:
            times = self._failures[key] = deque(maxlen=self.limit)
            while len(self._failures) > self._max_keys:
                self._failures.popitem(last=False)
        times.append(now)
        self._failures.move_to_end(key)
        return now

    def forgive(self, key: str, at: float) -> None:
        """Take back the failure counted at ``at`` (the attempt succeeded)."""
        times = self._failures.get(key)
        if times is not None and at in times:
            times.remove(at)

    def _recent(self, key: str) -> deque[float] | None:
        times = self._failures.get(key)
        if times is None:
            return None
        horizon = self._clock() - self.window_s
        while times and times[0] <= horizon:
            times.popleft()
        if not times:
            del self._failures[key]
            return None
        return times


@dataclass(frozen=True, slots=True)
class Attempt:
    client_id: str
    address: str
    at: tuple[float, float]


class Attempts:
    """The two windows of the token endpoint, checked and counted together."""

    def __init__(self, per_client: FailureWindow, per_address: FailureWindow) -> None:
        self._client = per_client
        self._address = per_address

    def begin(self, client_id: str, address: str) -> Attempt:
        """Count an attempt as failed until forgiven; ``TooManyFailures`` if either
        the client id or the address is at its limit (then nothing is counted)."""
        wait = max(self._client.wait_s(client_id), self._address.wait_s(address))
        if wait > 0:
            raise TooManyFailures(
                "too many failed token requests for this client or from this address",
                retry_after=max(1, math.ceil(wait)),
            )
        return Attempt(
            client_id, address, (self._client.add(client_id), self._address.add(address))
        )

    def forgive(self, attempt: Attempt) -> None:
        """The attempt succeeded, or was never checked: it is no failure."""
        self._client.forgive(attempt.client_id, attempt.at[0])
        self._address.forgive(attempt.address, attempt.at[1])
