"""A Spark standalone cluster on loopback: one master and one worker, child processes.

The jobs run on ``local[*]`` by default and on any cluster with ``--master``; in local
mode the executors live in the driver's JVM, on a cluster each is a JVM of its own
that a worker starts, with Python workers of its own, in a working directory of its
own, and with only the environment the worker gives it. This starts the smallest
such cluster from the installed PySpark (its ``bin/spark-class``, the same Java the
jobs use) so a test can run a job the way an operator's cluster runs it.

The master and the worker listen on free loopback ports (RPC and web UI; the worker's
RPC port is the kernel's choice and only the master dials it). The cluster is ready
once the master's status (``/json/`` of its web UI) lists the worker alive; it is
stopped by PID: SIGTERM (the worker then stops its executors) and SIGKILL for
whatever is left after a grace period.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

from pyspark.find_spark_home import _find_spark_home

from harness.process import Child, free_port

STOP_GRACE_S = 10.0


class SparkStandalone(Child):
    def __init__(self, root: Path, cores: int = 2, memory: str = "1g") -> None:
        self.root = root
        self.cores = cores
        self.memory = memory
        self.port = free_port()
        self.ui_port = free_port()
        self.worker_ui_port = free_port()
        self.work_dir = root / "work"  # each application's executors run in a folder here
        self.master_proc: subprocess.Popen[bytes] | None = None
        self.worker_proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """What a job's ``--master`` names."""
        return f"spark://127.0.0.1:{self.port}"

    def status(self) -> dict[str, Any]:
        """The master's own account of its workers and applications."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            found: dict[str, Any] = json.loads(r.read())
            return found

    def __enter__(self) -> SparkStandalone:
        self.root.mkdir(parents=True, exist_ok=True)
        self.work_dir.mkdir(exist_ok=True)
        try:
            self.master_proc = self._spawn(
                "master",
                "org.apache.spark.deploy.master.Master",
                "--host", "127.0.0.1", "--port", str(self.port),
                "--webui-port", str(self.ui_port),
            )  # fmt: skip
            self._wait_for(lambda status: True, "the master's status")
            self.worker_proc = self._spawn(
                "worker",
                "org.apache.spark.deploy.worker.Worker", self.url,
                "--host", "127.0.0.1", "--cores", str(self.cores), "--memory", self.memory,
                "--webui-port", str(self.worker_ui_port), "--work-dir", str(self.work_dir),
            )  # fmt: skip
            self._wait_for(lambda status: status.get("aliveworkers", 0) >= 1, "an alive worker")
        except BaseException:
            self.close()
            raise
        return self

    def _spawn(self, name: str, main_class: str, *args: str) -> subprocess.Popen[bytes]:
        find_home: Callable[[], str] = _find_spark_home  # untyped in pyspark
        home = find_home()  # SPARK_HOME, else the installed package's own
        env = {
            **os.environ,
            "SPARK_HOME": home,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(self.root),
            "SPARK_WORKER_DIR": str(self.work_dir),
        }
        log = (self.root / f"{name}.log").open("ab")
        try:
            return subprocess.Popen(
                [str(Path(home) / "bin" / "spark-class"), main_class, *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.root,
                start_new_session=True,  # its own group: the stop reaches its children
            )
        finally:
            log.close()

    def _wait_for(
        self, ready: Callable[[dict[str, Any]], bool], what: str, timeout: float = 90.0
    ) -> None:
        deadline = time.monotonic() + timeout
        while True:
            for proc, name in ((self.master_proc, "master"), (self.worker_proc, "worker")):
                if proc is not None and proc.poll() is not None:
                    raise RuntimeError(f"the Spark {name} exited: {self.log_tail(name)}")
            try:
                if ready(self.status()):
                    return
            except (OSError, urllib.error.URLError, ValueError):
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {what} after {timeout:.0f} s: {self.log_tail('master')}")
            time.sleep(0.2)

    def log_tail(self, name: str, lines: int = 20) -> str:
        path = self.root / f"{name}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        """The worker first (it stops its executors), then the master."""
        for proc in (self.worker_proc, self.master_proc):
            _stop_group(proc)
        self.worker_proc = self.master_proc = None


def _stop_group(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM to the process's group, then SIGKILL to whatever of the group is left
    (at once once the process is gone, after ``STOP_GRACE_S`` if it is not); reaped."""
    if proc is None:
        return
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with suppress(subprocess.TimeoutExpired):
        proc.wait(STOP_GRACE_S)
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
