"""Child processes owned by PID: a free loopback port, a kill that reaps, CPU accounting."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
from types import TracebackType

# Ports are handed out from a block of this process's own, below the kernel's ephemeral
# range (32768-60999 by default): a port is free when handed out but taken only when the
# child binds it, and in between another test process (pytest-xdist runs several) could
# be handed the same port by the kernel; its node would then answer this one's health
# checks. Each pytest-xdist worker (``gw<N>``) has a block of its own (any other process
# the first one), and a process never hands out a port twice (nodes started side by side).
PORT_BLOCK = 1000
FIRST_PORT = 20000
_handed: set[int] = set()
_random = random.Random()


def _block() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker[2:]) + 1 if worker.startswith("gw") and worker[2:].isdigit() else 0
    start = FIRST_PORT + (index % 12) * PORT_BLOCK
    return range(start, start + PORT_BLOCK)


def free_port() -> int:
    """A loopback port free now, from this process's block (see above)."""
    block = _block()
    if len(_handed) >= len(block) // 2:  # a long-lived process starts over (the bind
        _handed.clear()  # below still skips a port one of its children holds)
    for _ in range(10 * len(block)):
        port = _random.choice(block)
        if port in _handed:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed.add(port)
        return port
    raise RuntimeError(f"no free loopback port in {block.start}-{block.stop - 1}")


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
