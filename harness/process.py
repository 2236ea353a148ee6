"""Child processes owned by PID: a free loopback port, a kill that reaps, CPU accounting."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from types import TracebackType


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def kill_pid(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGKILL a child by PID (if still running) and reap it."""
    if proc is not None and proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU seconds of this process, or of ``pid`` (Linux /proc)."""
    if pid is None:
        t = os.times()
        return t.user + t.system
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


class Child:
    """A child process owned by PID; leaving the ``with`` block stops it."""

    proc: subprocess.Popen[bytes] | None = None

    def kill(self) -> None:
        kill_pid(self.proc)

    def close(self) -> None:
        self.kill()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
