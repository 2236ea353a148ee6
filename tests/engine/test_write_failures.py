"""The store's failed writes: the first of a run logged with its traceback, the rest
counted into one line a minute, the run ended by the next write that succeeds."""

from __future__ import annotations

import logging

import pytest

from metastore.engine.write_failures import WriteFailures


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def failure(n: int) -> OSError:
    try:
        raise OSError(28, f"No space left on device ({n})")
    except OSError as exc:
        return exc


def test_a_run_is_logged_once_then_counted_then_ended(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    failures = WriteFailures(clock, every_s=60.0)
    caplog.set_level(logging.INFO, "metastore.engine.committer")
    assert failures.failing is None
    failures.succeeded()  # nothing to end
    assert caplog.records == []

    failures.failed("write of 1 commits", failure(1))
    (first,) = caplog.records
    assert first.levelno == logging.ERROR and first.exc_info is not None
    assert "later failures are counted" in first.getMessage()
    for n in range(2, 12):  # within the minute: counted, not logged
        clock.now += 5
        failures.failed("write of 1 commits", failure(n))
    assert len(caplog.records) == 1
    run = failures.failing
    assert run is not None and run.count == 11 and run.since == 1_000.0
    assert run.first_error == "OSError: [Errno 28] No space left on device (1)"

    clock.now += 10  # 60 s after the first line
    failures.failed("write of 2 commits", failure(12))
    summary = caplog.records[-1]
    assert summary.levelno == logging.ERROR and summary.exc_info is None
    assert summary.getMessage() == (
        "write of 2 commits failed: 11 writes failed in the last 60 s, 12 since the first; "
        "this one: OSError: [Errno 28] No space left on device (12)"
    )

    clock.now += 1.5
    failures.succeeded()
    ended = caplog.records[-1]
    assert ended.levelno == logging.WARNING
    assert ended.getMessage() == "writes succeed again after 12 failed over 61.5 s"
    assert failures.failing is None and failures.total == 12

    failures.failed("write of 1 commits", failure(13))  # a new run: its traceback again
    assert caplog.records[-1].exc_info is not None
    assert failures.failing is not None and failures.failing.count == 1
    assert failures.total == 13
