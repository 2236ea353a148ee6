"""Coordinated tasks: at most one run of a job per scope, leased, resumable.

A batch job (``metastore gc``, ``metastore maintain``) holds a lease on its task
record for the whole run and renews it while it works, recording its progress. A
second run of the same job and scope is refused (``TaskBusy``) while the lease is
live; once a crashed run's lease has expired, another run takes the record over
*with its progress*, so it resumes instead of starting over, and the same run id
always resumes its own.

All task records are one updateable object of the system tenant, changed only by
compare-and-swap on its token (the same primitive as the node-id leases): a lost
CAS re-reads and decides again on the one retry schedule. There are a handful of
jobs and scopes and a renewal every few seconds, so one object is small and
contention is negligible, and listing every task is one read.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from metastore.errors import CommitConflict, ServiceUnavailable
from metastore.model.codec import Codec
from metastore.model.ids import system_id
from metastore.model.keys import ObjKey
from metastore.model.objtypes import TASK_TABLE
from metastore.persistence.base import Persistence, UpdateableObject
from metastore.util.clock import Clock
from metastore.util.retry import RetryPolicy

SYSTEM_TENANT = ""
TASKS_KEY = ObjKey(SYSTEM_TENANT, "", TASK_TABLE.name, system_id(0))
JOBS = ("gc", "maintain")
Status = Literal["running", "done", "expired"]
STATUSES: tuple[Status, ...] = ("running", "done", "expired")
# a CAS lost to another task update: re-read and decide again
CAS_RETRY = RetryPolicy(base_s=0.01, max_s=0.2, max_attempts=50)


class TaskBusy(CommitConflict):
    """Another run holds the task's lease: wait for it, or for its lease to expire."""

    error_type = "TaskBusy"


class LeaseLost(CommitConflict):
    """This run no longer holds the task's lease (another run took it over)."""

    error_type = "LeaseLost"


@dataclass(frozen=True, slots=True)
class TaskRecord:
    job: str
    scope: str
    run: str
    holder: str  # the principal that acquired it
    leased_until_us: int
    status: Literal["running", "done"]
    progress: Mapping[str, Any]
    summary: Mapping[str, Any]
    started_at_us: int
    updated_at_us: int

    def state(self, now_us: int) -> Status:
        if self.status == "running" and self.leased_until_us <= now_us:
            return "expired"
        return self.status

    def live(self, now_us: int) -> bool:
        return self.state(now_us) == "running"

    def to_json(self, now_us: int) -> dict[str, Any]:
        return {
            "job": self.job,
            "scope": self.scope,
            "run": self.run,
            "holder": self.holder,
            "lease-expires-at-ms": self.leased_until_us // 1000,
            "status": self.state(now_us),
            "progress": dict(self.progress),
            "summary": dict(self.summary),
            "started-at-ms": self.started_at_us // 1000,
            "updated-at-ms": self.updated_at_us // 1000,
        }


Table = dict[tuple[str, str], TaskRecord]


class Tasks:
    """The task records over a persistence (blocking: call from a worker thread)."""

    def __init__(self, persistence: Persistence, codec: Codec, clock: Clock) -> None:
        self._persistence = persistence
        self._codec = codec
        self._clock = clock
        self.seen: tuple[TaskRecord, ...] = ()  # as last read here (for ``/metrics``)

    def list(self) -> list[TaskRecord]:
        table, _ = self._read()
        return sorted(table.values(), key=lambda t: (t.job, t.scope))

    def acquire(self, job: str, scope: str, run: str, holder: str, lease_s: int) -> TaskRecord:
        """Take (or resume) the task's lease; ``TaskBusy`` while another run's is live."""

        def change(now_us: int, current: TaskRecord | None) -> TaskRecord:
            until = now_us + lease_s * 1_000_000
            if current is None or current.status == "done":
                return TaskRecord(
                    job, scope, run, holder, until, "running", {}, _summary(current),
                    now_us, now_us,
                )  # fmt: skip
            if current.run != run and current.live(now_us):
                raise TaskBusy(
                    f"task {job} {scope!r} is held by run {current.run!r} until "
                    f"{current.leased_until_us // 1000} ms; wait for it or for its lease to expire"
                )
            # the same run resumes; an expired run is taken over with its progress
            return replace(
                current, run=run, holder=holder, leased_until_us=until, updated_at_us=now_us
            )

        return self._update(job, scope, change)

    def renew(
        self, job: str, scope: str, run: str, progress: Mapping[str, Any] | None, lease_s: int
    ) -> TaskRecord:
        """Extend this run's lease and record its progress; ``LeaseLost`` if it lost it."""

        def change(now_us: int, current: TaskRecord | None) -> TaskRecord:
            current = _held(job, scope, run, current)
            return replace(
                current,
                leased_until_us=now_us + lease_s * 1_000_000,
                progress=current.progress if progress is None else dict(progress),
                updated_at_us=now_us,
            )

        return self._update(job, scope, change)

    def finish(self, job: str, scope: str, run: str, summary: Mapping[str, Any]) -> TaskRecord:
        """Record the run as done with its summary and release the lease."""

        def change(now_us: int, current: TaskRecord | None) -> TaskRecord:
            current = _held(job, scope, run, current)
            return replace(
                current,
                status="done",
                leased_until_us=now_us,
                summary=dict(summary),
                updated_at_us=now_us,
            )

        return self._update(job, scope, change)

    # --- the CAS loop --------------------------------------------------------------------

    def _update(
        self,
        job: str,
        scope: str,
        change: Callable[[int, TaskRecord | None], TaskRecord],
    ) -> TaskRecord:
        attempts = CAS_RETRY.start()
        while True:
            table, token = self._read()
            record = change(self._clock.now_us(), table.get((job, scope)))
            table[(job, scope)] = record
            new = UpdateableObject(TASKS_KEY, self._encode(table), secrets.token_hex(8))
            if self._persistence.cas_updateable(TASKS_KEY, token, new):
                self.seen = tuple(table.values())
                return record
            if not attempts.backoff():
                raise ServiceUnavailable("task records are changing too fast; retry later")

    def _read(self) -> tuple[Table, str | None]:
        stored = self._persistence.get_updateable(TASKS_KEY)
        if stored is None:
            self.seen = ()
            return {}, None
        records = self._codec.decode("task_table", stored.data)["tasks"]
        table = {(r["job"], r["scope"]): _decode(r) for r in records}
        self.seen = tuple(table.values())
        return table, stored.token

    def _encode(self, table: Table) -> bytes:
        records = [
            {
                "job": t.job,
                "scope": t.scope,
                "run": t.run,
                "holder": t.holder,
                "leased_until_us": t.leased_until_us,
                "status": t.status,
                "progress": json.dumps(dict(t.progress), sort_keys=True),
                "summary": json.dumps(dict(t.summary), sort_keys=True),
                "started_at_us": t.started_at_us,
                "updated_at_us": t.updated_at_us,
            }
            for _, t in sorted(table.items())
        ]
        return self._codec.encode("task_table", {"tasks": records})

    def counts(self, now_us: int) -> dict[tuple[str, Status], int]:
        """Tasks per job and state, as last read here."""
        found: dict[tuple[str, Status], int] = {}
        for record in self.seen:
            key = (record.job, record.state(now_us))
            found[key] = found.get(key, 0) + 1
        return found


def _held(job: str, scope: str, run: str, current: TaskRecord | None) -> TaskRecord:
    if current is None or current.run != run or current.status == "done":
        holder = "nobody" if current is None or current.status == "done" else current.run
        raise LeaseLost(f"run {run!r} does not hold task {job} {scope!r} (held by {holder})")
    return current


def _summary(previous: TaskRecord | None) -> Mapping[str, Any]:
    return previous.summary if previous is not None else {}


def _decode(record: Mapping[str, Any]) -> TaskRecord:
    status = record["status"]
    return TaskRecord(
        record["job"],
        record["scope"],
        record["run"],
        record["holder"],
        record["leased_until_us"],
        "done" if status == "done" else "running",
        json.loads(record["progress"]),
        json.loads(record["summary"]),
        record["started_at_us"],
        record["updated_at_us"],
    )
