"""Metrics and logs of a real embedded node: ``/metrics`` read with prometheus_client's own
parser, JSON log lines read back from the node's stderr.

One node for the module, started with ``METASTORE_LOG_FORMAT=json``: every line it
writes must be one JSON object, and each test finds its own request's lines by the
request id it sent.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from harness.node import NodeProcess
from metastore.config.server_config import ServerConfig
from metastore.util.setting_rules import ConfigError
from tests.native.support import TIMEOUT, Api, Reply, assert_status

NAMESPACES_ROUTE = "/api/v1/tenants/{tenant}/catalogs/{catalog}/namespaces"
TASKS = "/api/v1/admin/tasks"
ACCESS_LINE_WAIT_S = 10.0  # the line follows the answer at once; this bounds a failure


@pytest.fixture(scope="module")
def json_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    root = tmp_path_factory.mktemp("observed")
    env = {"METASTORE_LOG_FORMAT": "json"}
    with NodeProcess(root / "data", log_path=root / "node.log", env=env) as process:
        yield process
    assert "Traceback" not in process.log_path.read_text(errors="replace")


@pytest.fixture
async def api(json_node: NodeProcess) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        yield Api(session, json_node.url)


async def scrape(api: Api) -> dict[str, Any]:
    """Every family of ``/metrics`` by name, parsed by prometheus_client."""
    reply = await api.get("/metrics")
    assert reply.status == 200, reply.describe()
    return {family.name: family for family in text_string_to_metric_families(reply.text)}


def samples(families: dict[str, Any], family: str, suffix: str) -> list[Sample]:
    return [s for s in families[family].samples if s.name == family + suffix]


def count(families: dict[str, Any], family: str, **labels: str) -> float:
    """The ``_count`` of a histogram's series whose labels include ``labels``."""
    return sum(
        s.value
        for s in samples(families, family, "_count")
        if all(s.labels.get(k) == v for k, v in labels.items())
    )


def header(reply: Reply, name: str) -> str:
    return {k.lower(): v for k, v in reply.headers.items()}[name.lower()]


def log_lines(node: NodeProcess) -> list[dict[str, Any]]:
    """Every line the node wrote so far, each parsed as one JSON object."""
    lines = []
    for number, text in enumerate(node.log_path.read_text().splitlines(), 1):
        try:
            line = json.loads(text)
        except ValueError:
            raise AssertionError(f"log line {number} is not JSON: {text!r}") from None
        assert isinstance(line, dict), text
        lines.append(line)
    return lines


async def access_line(node: NodeProcess, request_id: str) -> dict[str, Any]:
    """The access line of the request ``request_id`` (written once its answer is made)."""
    deadline = time.monotonic() + ACCESS_LINE_WAIT_S
    while time.monotonic() < deadline:
        for line in log_lines(node):
            if line.get("logger") == "metastore.access" and line.get("request_id") == request_id:
                return line
        await asyncio.sleep(0.02)
    raise AssertionError(f"no access line for {request_id} in {node.log_tail()}")


# --- metrics --------------------------------------------------------------------------------


async def test_metrics_parse_with_histograms_of_every_kind(api: Api) -> None:
    families = await scrape(api)
    expected = {
        "metastore_http_request_duration_seconds": {"route", "method", "status"},
        "metastore_commit_duration_seconds": {"outcome"},
        "metastore_commit_group_commits": set(),
        "metastore_durable_write_duration_seconds": set(),
        "metastore_job_run_duration_seconds": {"job"},
    }
    for name, labels in expected.items():
        assert families[name].type == "histogram", (name, families[name].type)
        for sample in families[name].samples:
            assert set(sample.labels) - {"le"} == labels, sample
    # the running totals are still there, as counters
    assert families["metastore_commits"].type == "counter"
    # embedded: no forwarding, no owners, no view
    assert "metastore_forward_duration_seconds" in families  # registered, never observed
    assert not families["metastore_forward_duration_seconds"].samples
    assert "metastore_view_lag_records" not in families


async def test_the_collector_pauses_and_the_process_are_exposed(api: Api) -> None:
    families = await scrape(api)
    pauses = "metastore_gc_pause_seconds"
    assert families[pauses].type == "histogram"
    generations = {s.labels["generation"] for s in samples(families, pauses, "_count")}
    assert generations == {"0", "1", "2"}
    # the node collected everything once it had started, to freeze what startup loaded
    assert count(families, pauses, generation="2") >= 1
    full = [s.value for s in samples(families, pauses, "_sum") if s.labels["generation"] == "2"]
    assert full[0] > 0
    for process in ("process_cpu_seconds", "process_resident_memory_bytes", "process_open_fds"):
        assert families[process].samples[0].value > 0, process


async def test_a_commit_moves_the_commit_histograms_and_its_route(api: Api) -> None:
    catalog = await api.new_catalog()
    before = await scrape(api)
    await catalog.create_namespace("ns")
    after = await scrape(api)

    route = {"route": NAMESPACES_ROUTE, "method": "POST", "status": "201"}
    family = "metastore_http_request_duration_seconds"
    assert count(after, family, **route) == count(before, family, **route) + 1
    for family in (
        "metastore_commit_group_commits",
        "metastore_durable_write_duration_seconds",
    ):
        assert count(after, family) >= count(before, family) + 1, family
    commits = "metastore_commit_duration_seconds"
    assert count(after, commits, outcome="committed") >= count(before, commits) + 1
    written = samples(after, "metastore_durable_write_duration_seconds", "_sum")
    assert written[0].value > 0


async def test_routes_are_templates_never_raw_paths(api: Api) -> None:
    probe = secrets.token_hex(6)
    assert (await api.get(f"/no/such/{probe}")).status == 404
    assert (await api.get(f"/api/v1/tenants/{probe}")).status == 404
    families = await scrape(api)
    family = families["metastore_http_request_duration_seconds"]
    routes = {s.labels["route"] for s in family.samples}
    assert not any(probe in route for route in routes), routes
    assert "(unmatched)" in routes and "/api/v1/tenants/{tenant}" in routes, routes


async def test_a_job_run_the_node_records_is_observed(api: Api) -> None:
    before = await scrape(api)
    run = f"r{secrets.token_hex(4)}"
    scope = f"t{secrets.token_hex(4)}"
    body = {"job": "gc", "scope": scope, "run": run, "lease-seconds": 60}
    assert_status(await api.post(TASKS, body), 200)
    finished = await api.call("DELETE", f"{TASKS}/gc/{scope}", params={"run": run})
    assert_status(finished, 200)
    after = await scrape(api)
    family = "metastore_job_run_duration_seconds"
    assert count(after, family, job="gc") == count(before, family, job="gc") + 1


# --- logs -----------------------------------------------------------------------------------


async def test_every_line_is_json_and_a_request_has_its_access_line(
    api: Api, json_node: NodeProcess
) -> None:
    catalog = await api.new_catalog()
    request_id = f"req-{secrets.token_hex(6)}"
    trace = secrets.token_hex(16)
    headers = {"X-Request-Id": request_id, "traceparent": f"00-{trace}-{'ab' * 8}-01"}
    body = {"namespace": ["logged"], "properties": {}}
    reply = await api.call("POST", catalog.path + "/namespaces", json_body=body, headers=headers)
    assert_status(reply, 201)
    assert header(reply, "X-Request-Id") == request_id

    line = await access_line(json_node, request_id)
    assert line["level"] == "INFO" and line["method"] == "POST", line
    assert line["route"] == NAMESPACES_ROUTE and line["status"] == 201, line
    assert line["trace_id"] == trace and line["span_id"] != "ab" * 8, line
    assert line["tenant"] == catalog.tenant and line["principal"] == "anonymous", line
    assert isinstance(line["duration_ms"], float) and line["duration_ms"] >= 0, line
    assert line["time"].endswith("+00:00") and line["message"], line
    startup = [entry for entry in log_lines(json_node) if "ready" in entry["message"]]
    assert startup and startup[0]["logger"].startswith("metastore"), startup


@pytest.mark.parametrize(
    "traceparent",
    [
        "garbage",
        "00-" + "0" * 32 + "-" + "ab" * 8 + "-01",  # all-zero trace id
        "00-" + "AB" * 16 + "-" + "ab" * 8 + "-01",  # upper-case hex
        "ff-" + "ab" * 16 + "-" + "ab" * 8 + "-01",  # the invalid version
        "00-" + "ab" * 16 + "-" + "ab" * 8 + "-01-extra",  # version 00 has four fields
    ],
)
async def test_a_malformed_traceparent_starts_a_new_trace(
    api: Api, json_node: NodeProcess, traceparent: str
) -> None:
    request_id = f"req-{secrets.token_hex(6)}"
    headers = {"X-Request-Id": request_id, "traceparent": traceparent}
    reply = await api.call("GET", "/health", headers=headers)
    assert reply.status == 200, reply.describe()
    line = await access_line(json_node, request_id)
    assert len(line["trace_id"]) == 32 and line["trace_id"] not in traceparent.lower(), line


async def test_a_request_id_that_is_not_a_plain_token_is_replaced(
    api: Api, json_node: NodeProcess
) -> None:
    reply = await api.call("GET", "/health", headers={"X-Request-Id": "a b\tc"})
    assert reply.status == 200
    request_id = header(reply, "X-Request-Id")
    assert request_id != "a b\tc"
    assert (await access_line(json_node, request_id))["route"] == "/health"


def test_the_log_format_is_text_or_json(tmp_path: Path) -> None:
    assert ServerConfig(data_dir=tmp_path, log_format="json").log_format == "json"
    with pytest.raises(ConfigError, match="log_format"):
        ServerConfig(data_dir=tmp_path, log_format="JSON")


async def test_the_access_line_keeps_the_path_as_sent(api: Api, json_node: NodeProcess) -> None:
    """An escaped newline stays escaped: a client cannot start a log line of its own."""
    request_id = f"req-{secrets.token_hex(6)}"
    reply = await api.call("GET", "/no/such%0Apath", headers={"X-Request-Id": request_id})
    assert reply.status == 404
    line = await access_line(json_node, request_id)
    assert line["path"] == "/no/such%0Apath" and line["route"] == "(unmatched)", line
    assert "\n" not in line["message"], line
