"""Progress of a long-running command, fit for wherever its standard error goes.

On a terminal a person watches: one line, redrawn in place with a carriage return a
few times a second, finished with a newline when the command ends. Anywhere else (a
log file, a pipe, a CI job) a carriage-return frame is noise that piles up in one
enormous line, so the same text goes out as a plain line every ``line_s`` seconds, and
once more at the end. Every long-running command (``replay``, the pipeline jobs,
the benchmarks) reports through a ``Ticker``.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import TextIO

LINE_S = 2.0  # plain lines (not a terminal): one every this many seconds
FRAME_S = 0.25  # a terminal's line: redrawn this often


def is_terminal(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):  # a stand-in without a file, or one closed
        return False


class Ticker:
    """Writes ``render()`` to ``out`` (default: standard error at the time of entry)
    while the ``with`` block runs, and once more when it ends (a context manager).

    ``terminal`` overrides the check of ``out`` (None: ``out.isatty()``).
    """

    def __init__(
        self,
        render: Callable[[], str],
        *,
        out: TextIO | None = None,
        enabled: bool = True,
        line_s: float = LINE_S,
        frame_s: float = FRAME_S,
        terminal: bool | None = None,
    ) -> None:
        self._render = render
        self._given = out
        self._out: TextIO = sys.stderr
        self._enabled = enabled
        self._line_s = line_s
        self._frame_s = frame_s
        self._terminal = terminal
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._width = 0  # of the terminal line drawn last (a shorter one must cover it)

    @property
    def terminal(self) -> bool:
        return self._terminal if self._terminal is not None else is_terminal(self._out)

    def __enter__(self) -> Ticker:
        self._out = self._given if self._given is not None else sys.stderr
        if self._enabled:
            self._thread = threading.Thread(target=self._run, name="progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is None:
            return
        self._thread.join()
        self._write(final=True)

    def _run(self) -> None:
        while not self._stop.wait(self._frame_s if self.terminal else self._line_s):
            self._write(final=False)

    def _write(self, *, final: bool) -> None:
        try:
            text = self._render()
        except Exception as exc:  # a progress line must never break the command
            text = f"(progress unavailable: {type(exc).__name__})"
        if self.terminal:
            pad = " " * max(0, self._width - len(text))
            self._width = len(text)
            self._out.write("\r" + text + pad + ("\n" if final else ""))
        else:
            self._out.write(text + "\n")
        self._out.flush()
