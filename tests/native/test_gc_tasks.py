"""Task records, expiry endpoints and hostile GC input, on a real node over HTTP."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from harness.node import NodeProcess

T = "default"
TASKS = "/api/v1/admin/tasks"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    root = tmp_path_factory.mktemp("gc-tasks")
    process = NodeProcess(root / "data", log_path=root / "node.log")
    with process:
        yield process
    log = process.log_path.read_text(errors="replace")
    assert "Traceback" not in log, f"the node logged an unhandled error:\n{process.log_tail(60)}"


def call(node: NodeProcess, method: str, path: str, body: Any = None, **params: str) -> Any:
    return requests.request(
        method, f"{node.url}{path}", json=body, params=params or None, timeout=30
    )


def error_type(reply: requests.Response, status: int) -> str:
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert set(error) >= {"message", "type", "code"} and error["code"] == status
    return str(error["type"])


def scope() -> str:
    return f"{T}/c{uuid.uuid4().hex[:8]}"


def acquire(node: NodeProcess, where: str, run: str, lease: int = 60) -> requests.Response:
    body = {"job": "gc", "scope": where, "run": run, "lease-seconds": lease}
    return call(node, "POST", TASKS, body)


def test_a_second_run_is_refused_while_the_lease_is_live_and_the_same_run_resumes(
    node: NodeProcess,
) -> None:
    where = scope()
    first = acquire(node, where, "run-1")
    assert first.status_code == 200, first.text
    assert first.json()["status"] == "running" and first.json()["progress"] == {}
    progress = {"phase": "sweep", "catalogs-done": ["a", "b"]}
    renewed = call(
        node,
        "PUT",
        f"{TASKS}/gc/{where}",
        {"run": "run-1", "progress": progress, "lease-seconds": 60},
    )
    assert renewed.status_code == 200 and renewed.json()["progress"] == progress

    assert error_type(acquire(node, where, "run-2"), 409) == "TaskBusy"
    lost = call(node, "PUT", f"{TASKS}/gc/{where}", {"run": "run-2", "lease-seconds": 60})
    assert error_type(lost, 409) == "LeaseLost"

    resumed = acquire(node, where, "run-1")  # the same run (restarted) resumes its own
    assert resumed.status_code == 200 and resumed.json()["progress"] == progress

    listed = call(node, "GET", TASKS).json()["tasks"]
    mine = [t for t in listed if t["scope"] == where]
    assert [(t["job"], t["run"], t["status"]) for t in mine] == [("gc", "run-1", "running")]


def test_an_expired_lease_is_taken_over_with_its_progress(node: NodeProcess) -> None:
    where = scope()
    assert acquire(node, where, "crashed", lease=1).status_code == 200
    progress = {"phase": "mark", "candidates": "/out/c.parquet"}
    body = {"run": "crashed", "progress": progress, "lease-seconds": 1}
    assert call(node, "PUT", f"{TASKS}/gc/{where}", body).status_code == 200
    assert error_type(acquire(node, where, "next"), 409) == "TaskBusy"

    while True:  # the crashed run never renews: its lease runs out
        listed = call(node, "GET", TASKS).json()["tasks"]
        (record,) = [t for t in listed if t["scope"] == where]
        if record["status"] == "expired":
            break
        time.sleep(0.2)
    taken = acquire(node, where, "next")
    assert taken.status_code == 200, taken.text
    assert taken.json()["run"] == "next" and taken.json()["progress"] == progress
    late = call(node, "PUT", f"{TASKS}/gc/{where}", {"run": "crashed", "lease-seconds": 60})
    assert error_type(late, 409) == "LeaseLost"  # the crashed run learns it lost the task

    summary = {"deleted": 3}
    done = call(node, "DELETE", f"{TASKS}/gc/{where}", {"summary": summary}, run="next")
    assert done.status_code == 200 and done.json()["status"] == "done"
    assert done.json()["summary"] == summary
    fresh = acquire(node, where, "later")  # free again; a new run starts from scratch
    assert fresh.status_code == 200 and fresh.json()["progress"] == {}
    assert fresh.json()["summary"] == summary
    metrics = call(node, "GET", "/metrics").text
    assert 'metastore_tasks{job="gc",status="running"}' in metrics


@pytest.mark.parametrize(
    ("method", "path", "body", "params"),
    [
        ("POST", TASKS, {"job": "gc", "scope": "../x", "run": "r", "lease-seconds": 5}, {}),
        ("POST", TASKS, {"job": "gc", "scope": "a/b/c", "run": "r", "lease-seconds": 5}, {}),
        ("POST", TASKS, {"job": "rm -rf", "scope": "all", "run": "r", "lease-seconds": 5}, {}),
        ("POST", TASKS, {"job": "gc", "scope": "all", "run": "r/../x", "lease-seconds": 5}, {}),
        ("POST", TASKS, {"job": "gc", "scope": "all", "run": "r", "lease-seconds": 0}, {}),
        ("POST", TASKS, {"job": "gc", "scope": "all", "run": "r", "lease-seconds": 1e9}, {}),
        ("POST", TASKS, ["not", "an", "object"], {}),
        ("PUT", TASKS + "/gc/%2E%2E", {"run": "r", "lease-seconds": 5}, {}),
        ("PUT", TASKS + "/nojob/all", {"run": "r", "lease-seconds": 5}, {}),
        ("PUT", TASKS + "/gc/all", {"run": "r", "lease-seconds": 5, "progress": "x"}, {}),
        (
            "PUT",
            TASKS + "/gc/all",
            {"run": "r", "lease-seconds": 5, "progress": {"x": "y" * 20_000}},
            {},
        ),
        ("DELETE", TASKS + "/gc/all", None, {}),  # no run
        ("DELETE", TASKS + "/gc/all", None, {"run": "a b"}),
        ("POST", "/api/v1/admin/gc/leases", {"expired-for-seconds": -1}, {}),
        ("POST", f"/api/v1/tenants/{T}/catalogs/{T}/gc/expire", {"lifetime-seconds": "1"}, {}),
    ],
)
def test_hostile_task_and_expiry_input_is_a_400_and_writes_nothing(
    node: NodeProcess, method: str, path: str, body: Any, params: dict[str, str]
) -> None:
    before = call(node, "GET", TASKS).json()
    error_type(call(node, method, path, body, **params), 400)
    assert call(node, "GET", TASKS).json() == before


def _head(node: NodeProcess, catalog: str) -> str:
    reply = call(node, "GET", f"/api/v1/tenants/{T}/catalogs/{catalog}/ref")
    assert reply.status_code == 200, reply.text
    return str(reply.json()["head"])


@pytest.mark.parametrize(
    "body",
    [
        {"mark-head": "1", "candidates": [{"type": "node-lease", "id": "1"}]},
        {"mark-head": "1", "candidates": [{"type": "task-table", "id": "1"}]},
        {"mark-head": "1", "candidates": [{"type": "commit", "id": -5}]},
        {"mark-head": "1", "candidates": [{"type": "commit", "id": "99999999999999999999"}]},
        {"mark-head": "1", "candidates": [{"type": "commit", "id": 1, "tenant": "other"}]},
        {"mark-head": "1", "candidates": [{"type": "commit", "id": 1}] * 10_001},
        {"mark-head": 0, "candidates": []},
        {"mark-head": "12", "candidates": []},  # not a commit of the catalog
        {"mark-head": "1", "candidates": {}},
        {"candidates": []},
        {"mark-head": "1", "candidates": [], "dry-run": "yes"},
    ],
)
def test_hostile_sweep_input_is_a_400_and_writes_nothing(
    node: NodeProcess, body: dict[str, Any]
) -> None:
    head = _head(node, T)
    error_type(call(node, "POST", f"/api/v1/tenants/{T}/catalogs/{T}/gc/sweep", body), 400)
    assert _head(node, T) == head


def test_sweep_of_an_unknown_catalog_is_a_404(node: NodeProcess) -> None:
    reply = call(
        node,
        "POST",
        f"/api/v1/tenants/{T}/catalogs/nosuch/gc/sweep",
        {"mark-head": "1", "candidates": []},
    )
    assert reply.status_code == 404, reply.text


def test_idempotency_records_past_their_lifetime_are_expired(node: NodeProcess) -> None:
    namespaces = f"/api/v1/tenants/{T}/catalogs/{T}/namespaces"
    name = f"ns{uuid.uuid4().hex[:8]}"
    key = {"Idempotency-Key": f"k-{name}"}
    url = f"{node.url}{namespaces}"
    first = requests.post(url, json={"namespace": [name]}, headers=key, timeout=30)
    assert first.status_code in (200, 201), first.text
    replay = requests.post(url, json={"namespace": [name]}, headers=key, timeout=30)
    assert replay.status_code == first.status_code  # the record replays the outcome

    expire = f"/api/v1/tenants/{T}/catalogs/{T}/gc/expire"
    nothing = {"expired": 0, "collected": 0}  # no record aged out, no dropped table collected
    assert call(node, "POST", expire, {"lifetime-seconds": 3600}).json() == nothing
    while True:  # the record ages past a one-second lifetime
        expired = call(node, "POST", expire, {"lifetime-seconds": 1})
        assert expired.status_code == 200, expired.text
        if expired.json()["expired"]:
            break
        time.sleep(0.2)
    again = requests.post(url, json={"namespace": [name]}, headers=key, timeout=30)
    assert again.status_code == 409, again.text  # no record any more: a real second create

    leases = call(node, "POST", "/api/v1/admin/gc/leases", {"expired-for-seconds": 1})
    assert leases.status_code == 200 and leases.json() == {"removed": 0}  # ours is live
    assert call(node, "GET", "/health").status_code == 200
