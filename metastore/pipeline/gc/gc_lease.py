"""The task lease a maintenance job holds on its scope for its whole run.

A node keeps one task record per (job, scope), compare-and-swapped on its token: at
most one run holds it at a time. Acquiring it returns the record, with the progress
the last run recorded: a crashed run's lease expires and the next run takes it over
*with* that progress, so it resumes instead of starting over. While the job runs a
thread renews the lease (every third of its length) with the progress recorded so
far; if the node says the lease was lost, the job stops at its next step rather than
work on beside another run.
"""

from __future__ import annotations

import threading
import urllib.parse
import uuid
from typing import Any

from metastore.pipeline.exits import JobError
from metastore.pipeline.node_client import NodeClient

TASKS = "/api/v1/admin/tasks"


def scope_name(tenant: str | None, catalog: str | None) -> str:
    """The task scope: ``all``, ``<tenant>`` or ``<tenant>/<catalog>``."""
    if tenant is None:
        return "all"
    return tenant if catalog is None else f"{tenant}/{catalog}"


class Lease:
    """A held task lease (a context manager: renews while open, finishes on success)."""

    def __init__(self, node: NodeClient, job: str, scope: str, lease_s: int) -> None:
        self.node = node
        self.job = job
        self.scope = scope
        self.run = uuid.uuid4().hex
        self.lease_s = lease_s
        self.record: dict[str, Any] = {}
        self.progress: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._lost: str | None = None
        self._thread: threading.Thread | None = None

    @property
    def path(self) -> str:
        quoted = urllib.parse.quote(self.scope, safe="")
        return f"{TASKS}/{urllib.parse.quote(self.job)}/{quoted}"

    def acquire(self) -> dict[str, Any]:
        """Take the lease (``JobError`` naming the holder if another run has it); the
        progress a crashed earlier run recorded, else ``{}``."""
        body = {
            "job": self.job,
            "scope": self.scope,
            "run": self.run,
            "lease-seconds": self.lease_s,
        }
        try:
            self.record = self.node.call("POST", TASKS, body) or {}
        except JobError as exc:
            if " 409 " in f" {exc.message} ":
                raise JobError(
                    f"another {self.job} run holds the lease on scope {self.scope!r}; "
                    f"try again when it is done or its lease expires ({exc.message})"
                ) from None
            raise
        found = self.record.get("progress")
        self.progress = dict(found) if isinstance(found, dict) else {}
        self._thread = threading.Thread(target=self._renew_loop, name="lease", daemon=True)
        self._thread.start()
        return self.progress

    def save(self, progress: dict[str, Any]) -> None:
        """Record ``progress`` now (and renew): a rerun resumes from here."""
        with self._lock:
            self.progress = progress
        self._renew()
        self.check()

    def check(self) -> None:
        if self._lost is not None:
            raise JobError(f"lost the lease on scope {self.scope!r} ({self._lost})")

    def finish(self, summary: dict[str, Any]) -> None:
        self._halt()
        query = urllib.parse.urlencode({"run": self.run})
        self.node.call("DELETE", f"{self.path}?{query}", {"summary": summary})

    def abandon(self) -> None:
        """Stop renewing without finishing: the lease expires, the progress stays."""
        self._halt()

    def _halt(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _renew(self) -> None:
        with self._lock:
            body = {"run": self.run, "progress": self.progress, "lease-seconds": self.lease_s}
            try:
                self.node.call("PUT", self.path, body)
            except JobError as exc:
                if " 409 " in f" {exc.message} ":
                    self._lost = exc.message
                # an unreachable node: the next renewal tries again before the lease ends

    def _renew_loop(self) -> None:
        while not self._stop.wait(max(0.2, self.lease_s / 3)):
            self._renew()
