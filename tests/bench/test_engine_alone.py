"""The benchmark of the commit engine alone (``bench.scenarios.engine_alone``): the
node's own engine, started without HTTP, makes the native creates durably, and its
figures are set beside the node's for the same load."""

from __future__ import annotations

import argparse
import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.load import Failures, Latency
from bench.scenarios import engine_alone
from bench.scenarios.embedded_writes import HOT_CATALOG, NAMESPACE, ThroughputResult
from harness.engine import build_engine
from metastore.model.keys import Kind
from metastore.persistence.rocksdb import RocksDBPersistence


def _tables(data_dir: Path, catalog: str) -> list[str]:
    """The table names a catalog holds, read from the stopped engine's store."""
    persistence = RocksDBPersistence(data_dir / "rocksdb", sync=False)
    executor = ThreadPoolExecutor(1)
    service, lanes = build_engine(persistence, executor)
    try:
        names: list[str] = []
        token: str | None = None
        while True:
            page = service.list_entities(
                engine_alone.TENANT, catalog, (NAMESPACE,), Kind.TABLE, token, 1000
            )
            names += [entity.key.name for entity in page.items]
            token = page.next_token
            if token is None:
                return names
    finally:
        asyncio.run(lanes.close())
        executor.shutdown()
        persistence.close()


def test_the_engine_alone_makes_each_load_durably(tmp_path: Path) -> None:
    args = argparse.Namespace(seconds=0.4, warmup=0.1, catalogs=3, concurrency=4)
    failures = Failures()
    hot, many = engine_alone.measure(tmp_path, True, args, failures)
    assert failures.count == 0, failures
    assert (hot.scenario, many.scenario) == (
        "engine alone: hot catalog",
        "engine alone: 3 catalogs",
    )
    for result in (hot, many):
        assert result.commits > 0 and result.errors == 0
        assert result.server_commits == result.commits  # the engine counted each one
        assert result.commits_per_write is not None and result.commits_per_write >= 1
        # the batches of several catalogs share one fsync: never fewer commits per fsync
        assert result.commits_per_fsync is not None
        assert result.commits_per_fsync >= result.commits_per_write
        assert result.node_cpu > 0
        # every commit allocates: the young generation ran, and took part of the CPU
        assert result.collector_share is not None and 0 < result.collector_share < 1
    data_dir = tmp_path / "engine-fsync" / "data"
    hot_tables = _tables(data_dir, HOT_CATALOG)
    # the warm-up's creates are there too, and every name is one a client made
    assert len(hot_tables) >= hot.commits
    assert all(name.startswith("t") and int(name[1:].split("_")[0]) < 4 for name in hot_tables)
    assert sum(len(_tables(data_dir, f"c{i:03d}")) for i in range(3)) >= many.commits


def _result(scenario: str, fsync: bool, per_s: float, cpu: float) -> ThroughputResult:
    return ThroughputResult(
        scenario=scenario,
        fsync=fsync,
        catalogs=1,
        concurrency=32,
        seconds=10.0,
        commits=int(per_s * 10),
        commits_per_s=per_s,
        latency=Latency.of([0.01]),
        server_commits=int(per_s * 10),
        server_batches=1,
        commits_per_write=None,
        commits_per_fsync=None,
        cas_retries=0,
        node_cpu=cpu,
        client_cpu=0.0,
        errors=0,
    )


def test_each_engine_load_is_read_against_the_node_s_same_load() -> None:
    nodes = [
        _result("hot catalog", True, 2000.0, 1.0),  # 0.5 ms per answer
        _result("hot catalog", False, 4000.0, 1.0),  # another mode: not this one's
        _result("64 catalogs", True, 1000.0, 1.0),  # 1 ms per answer
    ]
    engines = [
        _result("engine alone: hot catalog", True, 4000.0, 1.0),  # 0.25 ms per commit
        _result("engine alone: 64 catalogs", True, 2500.0, 1.0),  # 0.4 ms per commit
    ]
    ceiling = _result("bare aiohttp", False, 10000.0, 1.0)
    rows = {row.measure: row for row in engine_alone.summary_rows(engines, nodes, ceiling)}
    assert rows["hot catalog (fsync) engine alone commits/s vs ceiling"].ratio == 0.4
    assert rows["hot catalog (fsync) engine cpu per commit vs node's per answer"].ratio == 0.5
    assert rows["64 catalogs (fsync) engine cpu per commit vs node's per answer"].ratio == 0.4
    assert len(rows) == 4
    text = "\n".join(engine_alone.section(engines, nodes, ceiling))
    assert "0.25" in text and "0.50" in text  # engine and node CPU per commit, hot catalog
    # without the node's loads or the ceiling only what can be said is said
    assert [r.measure for r in engine_alone.summary_rows(engines, [], None)] == []
    assert engine_alone.section([], nodes, ceiling) == []
