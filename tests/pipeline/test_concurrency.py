"""``metastore audit`` and ``metastore export`` against a node that 16 clients keep
committing to over HTTP for the whole job: the jobs succeed, every client commit is
acknowledged, what the job read is one consistent snapshot (audit clean; each
catalog's exported tables and commits agree), and the node answers the same reads
the same way before and after."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField
from pyspark.sql import SparkSession

from harness.node import NodeProcess
from tests.pipeline.conftest import run_job
from tests.pipeline.support import Http

CLIENTS = 16
TENANT = "busy"
WRITTEN = ("w0", "w1", "w2", "w3")  # the clients' catalogs (client i writes WRITTEN[i % 4])
STABLE = "stable"  # nobody writes here while the jobs run
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))
BASE_COMMITS = 2  # create catalog, create namespace: a written catalog's commits before tables


def catalog_path(catalog: str, *parts: str) -> str:
    return "/".join(("/api/v1/tenants", TENANT, "catalogs", catalog, *parts))


@dataclass
class Clients:
    """``CLIENTS`` threads each creating tables, one commit per request, until stopped."""

    url: str
    run_name: str  # names are new in every run
    stop: threading.Event = field(default_factory=threading.Event)
    acknowledged: list[list[str]] = field(default_factory=lambda: [[] for _ in range(CLIENTS)])
    failures: list[str] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)
    started: threading.Barrier = field(default_factory=lambda: threading.Barrier(CLIENTS + 1))

    def run(self, i: int) -> None:
        http = Http(self.url)
        path = catalog_path(WRITTEN[i % len(WRITTEN)], "namespaces/ns/tables")
        n = 0
        while not self.stop.is_set():
            name = f"{self.run_name}_c{i}_{n}"
            status, body = http.call("POST", path, {"name": name})
            if status not in (200, 201):
                self.failures.append(f"client {i}: {name}: {status} {body}")
                self.started.abort()  # fail the test now, not at the barrier's timeout
                return
            self.acknowledged[i].append(name)
            n += 1
            if n == 1:
                self.started.wait(timeout=60)

    def __enter__(self) -> Clients:
        self.threads = [threading.Thread(target=self.run, args=(i,)) for i in range(CLIENTS)]
        for thread in self.threads:
            thread.start()
        self.started.wait(timeout=60)  # every client has committed once
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)

    def count(self) -> int:
        return sum(len(names) for names in self.acknowledged)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    root = tmp_path_factory.mktemp("busy")
    with NodeProcess(root / "data", log_path=root / "node.log") as running:
        http = Http(running.url)
        http.ok("POST", "/api/v1/tenants", {"name": TENANT})
        for catalog in (*WRITTEN, STABLE):
            http.ok("POST", f"/api/v1/tenants/{TENANT}/catalogs", {"name": catalog})
            http.ok("POST", catalog_path(catalog, "namespaces"), {"namespace": ["ns"]})
        client = RestCatalog("t", uri=running.url, warehouse=f"{TENANT}/{STABLE}")
        client.create_table(("ns", "ice"), SCHEMA)
        yield running


def stable_answers(url: str) -> dict[str, Any]:
    """Reads of what nobody writes while the jobs run: they must not change."""
    http = Http(url)
    client = RestCatalog("t", uri=url, warehouse=f"{TENANT}/{STABLE}")
    table = client.load_table(("ns", "ice"))
    return {
        "tables": http.pages(catalog_path(STABLE, "namespaces/ns/tables"), "tables"),
        "commits": http.pages(catalog_path(STABLE, "commits"), "commits"),
        "metadata": (table.metadata_location, table.metadata.model_dump_json()),
        "checkpoints": http.ok("GET", "/api/v1/admin/checkpoints"),
    }


def check_after(url: str, clients: Clients) -> None:
    """Every acknowledged commit is there, and nothing else of this run was."""
    assert clients.failures == []
    http = Http(url)
    for catalog in WRITTEN:
        listed = http.pages(catalog_path(catalog, "namespaces/ns/tables"), "tables")
        run = {t["name"] for t in listed if t["name"].startswith(clients.run_name + "_")}
        mine = {
            name
            for i, names in enumerate(clients.acknowledged)
            if WRITTEN[i % len(WRITTEN)] == catalog
            for name in names
        }
        assert run == mine, catalog


@pytest.mark.parametrize("job", ["audit", "export"])
def test_a_job_while_16_clients_keep_committing(
    spark: SparkSession, node: NodeProcess, tmp_path: Path, job: str
) -> None:
    before = stable_answers(node.url)
    with Clients(node.url, job) as clients:
        at_start = clients.count()
        ran = run_job(
            spark, job, "--url", node.url, "--tenant", TENANT, "--out", str(tmp_path), "--json"
        )
        during = clients.count() - at_start
    assert ran.status == 0, ran.stdout
    assert during > 0  # the clients kept committing while the job ran
    check_after(node.url, clients)
    assert stable_answers(node.url) == before
    summary = ran.summary
    if job == "audit":
        assert summary["dangling"] == 0 and summary["catalogs"] == len(WRITTEN) + 1
        return
    # one consistent snapshot: in each written catalog, one commit per exported table
    tables = pq.read_table(tmp_path / "tables").to_pylist()
    commits = pq.read_table(tmp_path / "commits").to_pylist()
    for catalog in WRITTEN:
        exported = [t for t in tables if t["catalog"] == catalog]
        history = [c for c in commits if c["catalog"] == catalog]
        assert len(history) == len(exported) + BASE_COMMITS, catalog
    assert summary["tables"]["tables"] == len(tables) > 1
