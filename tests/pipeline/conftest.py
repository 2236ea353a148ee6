"""One Spark session for every pipeline test (``local[2]``), and the helpers to run a
job in this process on it, as the command line does."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from harness.spark_standalone import SparkStandalone
from metastore.node.cli import _parser
from metastore.pipeline import job_runner as cli
from metastore.pipeline.spark_session import start

# PySpark reads a job's results from a local socket it leaves to the garbage collector
# (``pyspark.util._load_from_socket``); only that warning is PySpark's, not ours.
SPARK_SOCKETS = pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <socket.socket:pytest.PytestUnraisableExceptionWarning"
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/pipeline/" in str(item.path).replace("\\", "/"):
            item.add_marker(SPARK_SOCKETS)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    log = tmp_path_factory.mktemp("spark") / "spark.log"
    session = start("local[2]", "metastore-tests", log, partitions=2)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandalone]:
    """A Spark standalone master and worker (``harness.spark_standalone``), for the
    tests that run a job as an operator's cluster runs it (``--master spark://...``)."""
    with SparkStandalone(tmp_path_factory.mktemp("spark-standalone")) as cluster:
        yield cluster


@dataclass
class Ran:
    status: int
    stdout: str

    @property
    def summary(self) -> dict[str, Any]:
        """The ``--json`` summary: the last line of standard output."""
        found: dict[str, Any] = json.loads(self.stdout.strip().splitlines()[-1])
        return found


def run_job(spark: SparkSession, *argv: str) -> Ran:
    """``metastore <argv>`` in this process, on the shared session."""
    args = _parser().parse_args(list(argv))
    out = io.StringIO()
    status = cli.run(args, out, spark)
    return Ran(status, out.getvalue())


def out_dir(tmp_path: Path, name: str) -> str:
    return str(tmp_path / name)
