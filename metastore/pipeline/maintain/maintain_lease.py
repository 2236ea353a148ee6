"""The task lease a maintenance run holds for its scope, through the node's task records.

At most one run of ``maintain`` per scope at a time: the run acquires the task record
(``POST /api/v1/admin/tasks``), renews it from a background thread while it works
(``PUT``, which also records its progress), and finishes it with its summary
(``DELETE``). Another run's live lease refuses this one (exit 2, naming the holder);
a crashed run's lease expires and the next run takes over.
"""

from __future__ import annotations

import json
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any, TextIO

from metastore.pipeline.exits import JobError
from metastore.pipeline.node_client import NodeClient
from metastore.pipeline.options import Scope

JOB = "maintain"
LEASE_S = 120


def scope_name(scope: Scope) -> str:
    if scope.tenant is None:
        return "all"
    return scope.tenant if scope.catalog is None else f"{scope.tenant}/{scope.catalog}"


def send(node: NodeClient, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """One call to the node: its status and JSON body (an error status is returned, not
    raised); an unreachable node is a ``JobError``."""
    headers = {"Accept": "application/json"}
    data = None
    if body is not None:
        headers["Content-Type"] = "application/json"
        data = json.dumps(body).encode()
    token = node.bearer()
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(node.url + path, data, headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            return exc.code, json.loads(raw) if raw else None
        except ValueError:
            return exc.code, None
    except (urllib.error.URLError, OSError) as exc:
        raise JobError(f"cannot reach the node at {node.url} ({exc})") from None


def _message(found: Any) -> str:
    error = found.get("error") if isinstance(found, dict) else None
    return str(error.get("message", "")) if isinstance(error, dict) else ""


class Lease:
    """The held task record (a context manager renewing it until exit)."""

    def __init__(self, node: NodeClient, scope: Scope, *, err: TextIO = sys.stderr) -> None:
        self.node = node
        self.scope = scope_name(scope)
        self.run = uuid.uuid4().hex
        self.progress: dict[str, Any] = {}
        self.lost = False  # another run took the lease over: stop deleting
        self.held = False
        self._err = err
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._path = "/api/v1/admin/tasks/{}/{}".format(
            JOB, urllib.parse.quote(self.scope, safe="/")
        )

    def __enter__(self) -> Lease:
        body = {"job": JOB, "scope": self.scope, "run": self.run, "lease-seconds": LEASE_S}
        status, found = send(self.node, "POST", "/api/v1/admin/tasks", body)
        if status in (404, 405):  # a node without task records: nothing to coordinate with
            print(
                "metastore maintain: the node keeps no task records; running without a lease",
                file=self._err,
            )
            return self
        if status == 409:
            raise JobError(
                f"another maintain run holds the lease of {self.scope}: {_message(found)}"
            )
        if status >= 300:
            raise JobError(f"node {self.node.url}: task lease refused: {status} {_message(found)}")
        self.held = True
        self._thread = threading.Thread(target=self._renew, name="lease", daemon=True)
        self._thread.start()
        return self

    def record(self, **progress: Any) -> None:
        self.progress.update(progress)

    def _renew(self) -> None:
        while not self._stop.wait(LEASE_S / 4):
            body = {"run": self.run, "progress": self.progress, "lease-seconds": LEASE_S}
            try:
                status, _ = send(self.node, "PUT", self._path, body)
            except JobError:
                continue  # the next renewal tries again; the lease outlasts a few misses
            if status == 409:
                self.lost = True
                print(f"metastore maintain: lease of {self.scope} lost", file=self._err)
                return

    def finish(self, summary: dict[str, Any]) -> None:
        """Record the summary and give the lease back (status "done")."""
        self.record(summary=summary)
        self._release({"summary": summary})

    def __exit__(self, *exc: object) -> None:
        self._release(None)  # a failed run gives it back too (if not finished already)

    def _release(self, body: Any) -> None:
        if not self.held:
            return
        self.held = False
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        query = urllib.parse.urlencode({"run": self.run})
        send(self.node, "DELETE", f"{self._path}?{query}", body)
