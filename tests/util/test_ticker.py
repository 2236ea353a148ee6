"""Progress output: plain lines where no terminal is attached, one line redrawn in place
with carriage returns on a terminal (a real pseudo-terminal here)."""

from __future__ import annotations

import io
import os
import select
import time
from collections.abc import Callable

from metastore.util.ticker import Ticker

WAIT_S = 30.0


def _until(condition: Callable[[], bool]) -> None:
    """Poll ``condition`` (the ticker's own thread makes it true) within a generous bound."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, "the ticker wrote nothing"
        time.sleep(0.005)


class Counting:
    def __init__(self) -> None:
        self.calls = 0

    def line(self) -> str:
        self.calls += 1
        return f"job: {self.calls} records"


def test_without_a_terminal_it_writes_plain_periodic_lines_and_a_last_one() -> None:
    out = io.StringIO()  # like a log file: not a terminal
    counting = Counting()
    with Ticker(counting.line, out=out, line_s=0.01, frame_s=0.0):
        _until(lambda: out.getvalue().count("\n") >= 3)
    text = out.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert all(line.startswith("job: ") for line in lines), lines
    assert lines[-1] == f"job: {counting.calls} records"  # the last one, at the end


def test_on_a_terminal_it_redraws_one_line_and_ends_it() -> None:
    master, slave = os.openpty()
    out = os.fdopen(slave, "w")
    received = b""

    def read() -> bytes:
        nonlocal received
        while select.select([master], [], [], 0)[0]:
            received += os.read(master, 65536)
        return received

    try:
        assert out.isatty()
        lines = iter(["job: a much longer first line", "job: short"] + ["job: x"] * 100_000)
        with Ticker(lambda: next(lines), out=out, frame_s=0.01, line_s=3600.0):
            _until(lambda: read().count(b"\r") >= 3)  # frames, long before a plain line
        _until(lambda: read().endswith(b"\n"))
    finally:
        out.close()
        os.close(master)
    frames = received.replace(b"\r\n", b"\n").split(b"\r")
    assert frames[0] == b""  # every frame starts at the line's beginning
    assert frames[1].startswith(b"job: a much longer first line")
    assert frames[2].startswith(b"job: short") and len(frames[2]) >= len(frames[1])  # covered
    assert received.count(b"\n") == 1  # one line in all, ended when the ticker stops


def test_a_disabled_ticker_writes_nothing() -> None:
    out = io.StringIO()
    with Ticker(lambda: "job", out=out, enabled=False, line_s=0.0):
        pass
    assert out.getvalue() == ""
