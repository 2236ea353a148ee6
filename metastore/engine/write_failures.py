"""The store's failed writes since the last one that succeeded: logged without flooding,
and shown by ``/health`` until writes succeed again.

A store that cannot write (a full disk, a failing device) fails every commit until
it can again. Logged each time with its traceback, that was twenty lines per request
(1,123 tracebacks for 748 refused commits on a full disk, the log often on that same
disk), and ``/health`` still said ``writable``. Here the first failure of a run is
logged with its traceback, the rest as one line a minute with their count, and the
first write that succeeds says how long and how many; meanwhile ``/health`` answers
``degraded`` (503) with the count and the first error, so a load balancer or an
operator sees it. RocksDB resumes on its own once the disk has 64 MiB free again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from metastore.errors import bounded

log = logging.getLogger("metastore.engine.committer")

SUMMARY_EVERY_S = 60.0  # one line of the run's count this often while writes fail
MAX_ERROR_CHARS = 500  # of the first error, as ``/health`` shows it


@dataclass(frozen=True, slots=True)
class Failing:
    """A run of failed writes: since when (Unix seconds), how many, the first error."""

    since: float
    count: int
    first_error: str


class WriteFailures:
    """Thread-safe: commit threads report, ``/health`` reads."""

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        every_s: float = SUMMARY_EVERY_S,
    ) -> None:
        self._clock = clock
        self._every_s = every_s
        self._lock = threading.Lock()
        self._run: Failing | None = None
        self._logged_at = 0.0  # when the run was last logged
        self._unlogged = 0  # failures of the run since then
        self.total = 0  # every failed write of this process, for ``/metrics``

    @property
    def failing(self) -> Failing | None:
        """The current run of failures, None while writes succeed."""
        return self._run

    def failed(self, what: str, exc: BaseException) -> None:
        """``what`` (a write) raised ``exc``."""
        now = self._clock()
        with self._lock:
            self.total += 1
            run = self._run
            if run is None:
                first = bounded(f"{type(exc).__name__}: {exc}", MAX_ERROR_CHARS)
                self._run = Failing(now, 1, first)
                self._logged_at, self._unlogged = now, 0
                log.error("%s failed; later failures are counted", what, exc_info=exc)
                return
            self._run = run = Failing(run.since, run.count + 1, run.first_error)
            self._unlogged += 1
            if now - self._logged_at < self._every_s:
                return
            count, self._logged_at, self._unlogged = self._unlogged, now, 0
        log.error(
            "%s failed: %d writes failed in the last %.0f s, %d since the first; this one: %s",
            what,
            count,
            self._every_s,
            run.count,
            bounded(f"{type(exc).__name__}: {exc}", MAX_ERROR_CHARS),
        )

    def succeeded(self) -> None:
        """A write succeeded: the run of failures, if any, is over."""
        if self._run is None:  # the common case, without the lock
            return
        with self._lock:
            run, self._run = self._run, None
        if run is not None:
            log.warning(
                "writes succeed again after %d failed over %.1f s",
                run.count,
                self._clock() - run.since,
            )
