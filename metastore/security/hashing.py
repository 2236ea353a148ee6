"""Client-secret hashing on a small, bounded thread pool.

PBKDF2 is slow on purpose (tens of milliseconds a try): run on the event loop,
a handful of clients sending wrong secrets would stall every other request of
the node. ``hashlib.pbkdf2_hmac`` releases the GIL, so a couple of threads hash
while the loop keeps serving. The pool takes at most ``threads + queue`` jobs;
one more is refused at once (503 with ``Retry-After``) instead of waiting in a
line that a flood could make arbitrarily long.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from metastore.errors import ServiceUnavailable

ITERATIONS = 60_000


def hash_secret(secret: str, salt: bytes, iterations: int = ITERATIONS) -> str:
    return hashlib.pbkdf2_hmac("sha256", secret.encode(), salt, iterations).hex()


def secret_matches(secret: str, salt: bytes, expected: str) -> bool:
    """Constant-time comparison of ``secret``'s hash with a stored one."""
    return hmac.compare_digest(hash_secret(secret, salt), expected)


class HashingBusy(ServiceUnavailable):
    """Every hashing slot is taken; nothing was checked, retry after ``retry_after`` s."""

    error_type = "SlowDownException"
    retry_after = 1


class HashPool:
    def __init__(self, threads: int, queue: int) -> None:
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="token-hash")
        self._slots = threading.BoundedSemaphore(threads + queue)

    async def matches(self, secret: str, salt: bytes, expected: str) -> bool:
        """``secret_matches`` on a pool thread; ``HashingBusy`` if no slot is free.

        A slot is released when the hash is done, not when the caller stops
        waiting, so cancelled requests cannot let more work in than the pool holds.
        """
        if not self._slots.acquire(blocking=False):
            raise HashingBusy("too many token requests are being checked; retry shortly")
        try:
            job = self._executor.submit(secret_matches, secret, salt, expected)
        except BaseException:
            self._slots.release()
            raise
        job.add_done_callback(self._release)
        return await asyncio.wrap_future(job)

    def _release(self, _: Future[bool]) -> None:
        self._slots.release()

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)
