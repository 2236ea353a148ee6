"""Bad input to the jobs and to ``metastore replay``: one clear line on standard error and
exit status 2, before any Spark work (the real command line, in a child process)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.node import NodeProcess
from tests.pipeline.support import Http


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "metastore", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )


def refused(done: subprocess.CompletedProcess[str], prefix: str, *words: str) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(prefix), lines[0]
    for word in words:
        assert word in lines[0], lines[0]
    assert "Traceback" not in done.stderr
    return lines[0]


@pytest.fixture(scope="module")
def stopped_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("stopped")
    with NodeProcess(root / "data", log_path=root / "node.log") as node:
        Http(node.url).ok("POST", "/api/v1/tenants", {"name": "acme"})
    yield root / "data" / "rocksdb"


@pytest.mark.parametrize("job", ["audit", "export"])
def test_an_unknown_tenant_or_catalog(job: str, stopped_store: Path, tmp_path: Path) -> None:
    source = ("--data-dir", str(stopped_store), "--out", str(tmp_path))
    refused(
        cli(job, *source, "--tenant", "nobody"), f"metastore {job}: ", "unknown tenant 'nobody'"
    )
    done = cli(job, *source, "--tenant", "acme", "--catalog", "nothing")
    refused(done, f"metastore {job}: ", "unknown catalog 'nothing'")


@pytest.mark.parametrize("job", ["audit", "export"])
def test_a_directory_that_is_not_a_store(job: str, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    done = cli(job, "--data-dir", str(tmp_path), "--out", str(tmp_path / "out"))
    refused(done, f"metastore {job}: ", "is not a metastore store")
    done = cli(job, "--data-dir", str(tmp_path / "notes.txt"), "--out", str(tmp_path / "out"))
    refused(done, f"metastore {job}: ", "is not a directory")


def test_an_unreachable_node(tmp_path: Path) -> None:
    done = cli("audit", "--url", "http://127.0.0.1:1", "--out", str(tmp_path))
    refused(done, "metastore audit: ", "cannot reach the node at http://127.0.0.1:1")


def test_an_unreachable_broker(tmp_path: Path) -> None:
    done = cli("export", "--kafka", "127.0.0.1:1", "--out", str(tmp_path))
    refused(done, "metastore export: ", "cannot reach the brokers", "127.0.0.1:1")


def test_no_source_or_two(tmp_path: Path) -> None:
    refused(cli("audit", "--out", str(tmp_path)), "metastore audit: ", "exactly one source")
    done = cli("audit", "--url", "http://127.0.0.1:1", "--kafka", "127.0.0.1:1")
    refused(done, "metastore audit: ", "exactly one source")


@pytest.mark.parametrize("job", ["audit", "export", "gc", "maintain"])
def test_an_out_directory_holding_other_files(job: str, tmp_path: Path) -> None:
    """A mistyped --out (a home directory with a `tables` folder): refused, nothing lost.
    Export replaces its table folders by name, audit its report, maintain its tables."""
    home = tmp_path / "home"
    (home / "tables").mkdir(parents=True)
    (home / "tables" / "mine.txt").write_text("mine")
    done = cli(job, "--url", "http://127.0.0.1:1", "--out", str(home))
    refused(done, f"metastore {job}: --out ", "holds files no metastore job wrote")
    assert sorted(p.relative_to(home).as_posix() for p in home.rglob("*")) == [
        "tables",
        "tables/mine.txt",
    ]


def test_an_out_directory_a_job_wrote_is_taken_again(tmp_path: Path) -> None:
    """What a job claimed (the marker it leaves) a later run may write into; the check
    comes before the source, so the unreachable node is what refuses this run."""
    from metastore.node.cli import _parser
    from metastore.pipeline.options import OUT_MARKER, JobOptions

    out = tmp_path / "out"
    args = _parser().parse_args(["export", "--url", "http://127.0.0.1:1", "--out", str(out)])
    options = JobOptions.from_args(args, "export")
    assert not out.exists()  # parsing writes nothing
    assert options.claim_out() == out and (out / OUT_MARKER).is_file()
    (out / "tables").mkdir()
    assert JobOptions.from_args(args, "export").out == out
    done = cli("export", "--url", "http://127.0.0.1:1", "--out", str(out))
    refused(done, "metastore export: ", "cannot reach the node")


def test_register_needs_a_node(stopped_store: Path, tmp_path: Path) -> None:
    done = cli("export", "--data-dir", str(stopped_store), "--register", "--out", str(tmp_path))
    refused(done, "metastore export: ", "--register needs --url")


@pytest.mark.parametrize(
    ("command", "flag", "value"),
    [
        # nan passes every `< 0` test, into the arithmetic that decides what is deleted
        ("gc", "--grace", "nan"),
        ("gc", "--grace", "-1"),
        ("gc", "--grace", "1e300"),  # a unit mistake; the sweep would wait for ever
        ("gc", "--retention", "inf"),
        ("maintain", "--older-than", "nan"),
        ("maintain", "--older-than", "-inf"),
        ("rebuild", "--idle", "0"),
        ("rebuild", "--idle", "nan"),
        ("rebuild", "--timeout", "nan"),
        ("replay", "--idle", "nan"),
        ("replay", "--timeout", "-1"),
        ("topics create", "--timeout", "nan"),
        ("topics create", "--timeout", "1e308"),  # past what the admin client takes
    ],
)
def test_a_duration_that_is_not_finite_or_in_bounds(
    command: str, flag: str, value: str, tmp_path: Path
) -> None:
    """Refused before any node, broker or file is touched: the sources named here do not
    exist, and the line is about the flag."""
    source = {
        "gc": ("--url", "http://127.0.0.1:1", "--out", str(tmp_path / "out")),
        "maintain": ("--url", "http://127.0.0.1:1", "--out", str(tmp_path / "out")),
        "rebuild": ("--url", "http://127.0.0.1:1", "--out", str(tmp_path / "out")),
        "replay": ("--kafka", "127.0.0.1:1", "--data-dir", str(tmp_path / "view")),
        "topics create": ("--kafka", "127.0.0.1:1"),
    }[command]
    done = cli(*command.split(), *source, f"{flag}={value}")
    line = refused(done, "metastore", f"{flag}: must be between")
    assert line.endswith(f"got {float(value)!r}"), line
    assert not any(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize(
    "url", ["http://[::1", "file:///etc", "http://node:99999", "http://u:p@node"]
)
def test_a_node_url_that_is_not_one(url: str, tmp_path: Path) -> None:
    """--url and gc's --node: refused as one line before a client is built on them (an
    unclosed IPv6 bracket used to end in the URL parser's traceback)."""
    done = cli("audit", "--url", url, "--out", str(tmp_path / "out"))
    refused(done, "metastore audit: --url: must be an http:// or https:// URL", repr(url))
    done = cli("gc", "--kafka", "127.0.0.1:1", "--node", url, "--out", str(tmp_path / "out"))
    refused(done, "metastore gc: --node: must be an http:// or https:// URL", repr(url))
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("fresh", [(), ("--fresh",)])
def test_replay_writes_no_view_among_other_files(fresh: tuple[str, ...], tmp_path: Path) -> None:
    """A mistyped --data-dir (a home directory, a file) is refused before any broker is
    asked: RocksDB used to put its files beside the ones found there."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("mine")
    done = cli("replay", "--kafka", "127.0.0.1:1", "--data-dir", str(home), *fresh)
    refused(done, "metastore replay: ", "holds files but no database")
    assert [p.name for p in home.iterdir()] == ["notes.txt"]
    done = cli("replay", "--kafka", "127.0.0.1:1", "--data-dir", str(home / "notes.txt"))
    refused(done, "metastore replay: ", "is not a directory")
    assert (home / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize(
    ("command", "flag", "value", "problem"),
    [  # a replay of a billion partitions used to hang building its assignment
        ("replay", "--partitions", "1000000000", "partitions must be 1-10000"),
        ("topics create", "--partitions", "1000000000", "partitions must be 1-10000"),
        ("topics create", "--replication-factor", "100000", "replication_factor must be 1-100"),
    ],
)
def test_a_count_past_its_bound(
    command: str, flag: str, value: str, problem: str, tmp_path: Path
) -> None:
    source = ["--kafka", "127.0.0.1:1"]
    if command == "replay":
        source += ["--data-dir", str(tmp_path / "view")]
    done = cli(*command.split(), *source, flag, value, "--timeout", "1")
    refused(done, "metastore", f"invalid configuration: {problem}, not {value}")
    assert not any(tmp_path.iterdir())


LONG = "a" * 5000  # past any file system's name length


@pytest.mark.parametrize(
    ("command", "flag"),
    [
        ("audit --url http://127.0.0.1:1", "--out"),
        ("rebuild --url http://127.0.0.1:1", "--out"),
        ("audit", "--data-dir"),
        ("replay --kafka 127.0.0.1:1", "--data-dir"),
    ],
)
def test_a_path_the_file_system_cannot_take(command: str, flag: str, tmp_path: Path) -> None:
    """A name too long for the file system: one line, not the OSError's traceback."""
    extra = ["--out", str(tmp_path / "out")] if flag == "--data-dir" and "audit" in command else []
    done = cli(*command.split(), flag, str(tmp_path / LONG), *extra)
    job = command.split()[0]
    refused(done, f"metastore {job}: {flag} cannot be used: File name too long")


def test_replay_of_an_unreachable_broker_exits_2(tmp_path: Path) -> None:
    """It used to print "replayed 0 records" and exit 0 (later: exit 3)."""
    view = str(tmp_path / "view")
    done = cli("replay", "--kafka", "127.0.0.1:1", "--data-dir", view, "--no-progress")
    refused(done, "metastore replay: Kafka: ", "no broker could be reached", "127.0.0.1:1")
    assert "replayed" not in done.stdout


def test_a_node_with_auth_on_refuses_a_job_without_a_token(tmp_path: Path) -> None:
    env = {"METASTORE_AUTH": "on", "METASTORE_AUTH_CLIENTS": "root:root-secret-1"}
    with NodeProcess(tmp_path / "data", log_path=tmp_path / "node.log", env=env) as node:
        done = cli("audit", "--url", node.url, "--out", str(tmp_path / "out"))
        refused(done, "metastore audit: ", "401")
        out = str(tmp_path / "out")
        done = cli("audit", "--url", node.url, "--credential", "root:wrong", "--out", out)
        refused(done, "metastore audit: ", "401")


@pytest.mark.parametrize("job", ["audit", "export", "gc", "maintain", "rebuild"])
def test_an_executor_python_that_is_not_one_on_a_local_master(
    job: str, stopped_store: Path, tmp_path: Path
) -> None:
    """``PYSPARK_PYTHON`` names the executors' interpreter; a local master runs them
    here, so a path that is no executable here is refused before anything starts (on
    a cluster it is the hosts' path: tests/pipeline/test_spark_cluster.py)."""
    out = tmp_path / "out"
    source = ("--kafka", "127.0.0.1:1") if job == "rebuild" else ("--data-dir", str(stopped_store))
    missing = str(tmp_path / "no-such-python")
    done = cli(job, *source, "--out", str(out), env={"PYSPARK_PYTHON": missing})
    refused(done, f"metastore {job}: ", "PYSPARK_PYTHON", missing, "not an executable")
    assert not out.exists()
