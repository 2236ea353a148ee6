"""A metastore node as a child process.

Started on a free loopback port, awaited until /health answers, stopped by PID:
SIGTERM for a graceful stop, SIGKILL to simulate a crash.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from harness.loop_guard import GUARD_ENV, REPO
from harness.process import Child, free_port, kill_pid


class NodeProcess(Child):
    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        extra_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
        cwd: Path | None = None,
    ) -> None:
        """``cwd``: where the node runs (this process's directory by default); ``python
        -m`` looks there first for the package, so a node started in another source
        tree (and with it on ``PYTHONPATH``) runs that tree's code."""
        self.data_dir = data_dir
        self.cwd = cwd
        self.port = port or free_port()
        self.extra_args = extra_args
        self.env = {**os.environ, **(env or {})}
        self.log_path = log_path or data_dir.parent / f"node-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "spawn() first"
        return self.proc.pid

    def start(self, timeout: float = 30.0) -> NodeProcess:
        return self.spawn().wait_healthy(timeout)

    def spawn(self) -> NodeProcess:
        """Start the process without waiting (several nodes start side by side)."""
        env = self.env
        program = "metastore"
        if env.get(GUARD_ENV):  # the tests' loop guard watches the node (harness.loop_guard)
            program = "harness.guarded_node"
            paths = [str(REPO), *filter(None, [env.get("PYTHONPATH")])]
            env = {**env, "PYTHONPATH": os.pathsep.join(paths)}
        args = [
            sys.executable, "-m", program, "serve",
            "--port", str(self.port), "--data-dir", str(self.data_dir), *self.extra_args,
        ]  # fmt: skip
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.cwd
        )
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


def stop_checked(node: NodeProcess) -> bool:
    """Stop gracefully; False (with the log's tail printed) unless it exits 0."""
    if node.proc is not None and node.proc.poll() is not None:
        print(f"node exited early with {node.proc.returncode}:\n{node.log_tail()}")
        return False
    code = node.stop()
    if code != 0:
        print(f"node stopped with exit code {code}:\n{node.log_tail()}")
    return code == 0
