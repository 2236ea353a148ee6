"""``metastore serve`` (a real process) refuses what an operator can fix with one line
naming the problem and the fix, exit status 2, no traceback and no "serving" line: an
address another process listens on, a data directory another process has open, one
that holds a database of another format or none RocksDB can open, brokers it cannot
reach. The line names the setting as the operator gave it (``--data-dir`` or
``METASTORE_DATA_DIR``), and a start that fails leaves no data directory it made itself.
``metastore replay`` shows its progress as plain lines in a log file and as one line
redrawn in place on a terminal (a pseudo-terminal here)."""

from __future__ import annotations

import errno
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rocksdict import Options, Rdict

from harness.process import free_port
from metastore.config.environment import ENV_PREFIX
from metastore.config.server_config import ServerConfig
from metastore.node.refusals import refusal
from metastore.persistence.rocksdb import RocksDBPersistence
from metastore.persistence.rocksdb_layout import FORMAT_KEY


def _env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    return {**base, **extra}


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``metastore serve`` with these flags and only these METASTORE_* variables."""
    return subprocess.run(
        [sys.executable, "-m", "metastore", "serve", *args], env=_env(**env),
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def serve(
    data_dir: Path | None, *args: str, port: int | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """``metastore serve`` on ``data_dir`` (None: the one ``METASTORE_DATA_DIR`` names)."""
    flags = ["--port", str(port or free_port())]
    if data_dir is not None:
        flags += ["--data-dir", str(data_dir)]
    return run(*flags, *args, **env)


def assert_one_line(done: subprocess.CompletedProcess[str], *parts: str) -> str:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert "serving on" not in done.stderr + done.stdout
    for part in parts:
        assert part in lines[0], lines[0]
    return lines[0]


def test_a_busy_port(tmp_path: Path) -> None:
    kept = tmp_path / "kept"
    kept.mkdir()  # existed before the start: it stays
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = assert_one_line(
            serve(tmp_path / "new" / "data", port=port),
            f"--port: cannot listen on 127.0.0.1:{port}",
            "Address already in use",
            "choose another --port",
        )
        assert line.startswith("metastore: ")
        assert_one_line(serve(kept, port=port), "--port: cannot listen")
        assert_one_line(
            run("--data-dir", str(kept), METASTORE_PORT=str(port)),
            "METASTORE_PORT: cannot listen",
            "choose another METASTORE_PORT",
        )
    assert not (tmp_path / "new").exists()  # made by the start that failed: removed
    assert kept.is_dir() and not any(kept.iterdir())


def test_a_port_taken_between_the_check_and_the_listen_is_the_same_line() -> None:
    config = ServerConfig(port=8181)
    names = ServerConfig.names({"port": None}, {})
    line = refusal(OSError(errno.EADDRINUSE, "Address already in use"), config, names)
    assert line is not None and "choose another --port" in line
    assert refusal(RuntimeError("a defect"), config, names) is None  # the traceback reports it


def test_a_data_directory_another_process_holds(tmp_path: Path) -> None:
    held = RocksDBPersistence(tmp_path / "data" / "rocksdb")  # this process holds its lock
    try:
        assert_one_line(
            serve(tmp_path / "data"),
            "metastore: cannot start: --data-dir:",
            "in use by another process",
            "LOCK",
            "own --data-dir",
        )
        assert_one_line(
            serve(None, METASTORE_DATA_DIR=str(tmp_path / "data")),
            "metastore: cannot start: METASTORE_DATA_DIR:",
            "own METASTORE_DATA_DIR",
        )
    finally:
        held.close()
    assert (tmp_path / "data" / "rocksdb").is_dir()  # not the failed start's to remove


def test_a_data_directory_of_another_format(tmp_path: Path) -> None:
    db = Rdict(str(tmp_path / "data" / "rocksdb"), Options(raw_mode=True))
    db[FORMAT_KEY] = b"9"  # a layout this release does not know
    db.close()
    assert_one_line(
        serve(tmp_path / "data"),
        "metastore: cannot start: --data-dir:",
        "another format",
        "point --data-dir at",
    )
    (tmp_path / "junk" / "rocksdb").mkdir(parents=True)
    (tmp_path / "junk" / "rocksdb" / "CURRENT").write_text("not RocksDB\n")
    assert_one_line(
        serve(tmp_path / "junk"),
        "metastore: cannot start: --data-dir:",
        "no database this release can open",
        "point --data-dir at",
    )


@pytest.mark.slow  # the broker check gives up after its timeout
def test_an_unreachable_broker(tmp_path: Path) -> None:
    closed = free_port()  # nothing listens there
    warehouse = (tmp_path / "warehouse").as_uri()
    assert_one_line(
        serve(tmp_path / "data", "--kafka", f"127.0.0.1:{closed}", METASTORE_WAREHOUSE=warehouse),
        "metastore: cannot start: --kafka: cannot reach the brokers",
        f"brokers 127.0.0.1:{closed}",
        "check --kafka and",
        "METASTORE_KAFKA_PROPERTIES",
    )
    assert not (tmp_path / "data").exists()  # nothing was written before the brokers answered


# --- progress of a long-running command: metastore replay -----------------------------------


@pytest.fixture
def topics(kafka_bootstrap: str) -> str:
    prefix = f"p{os.getpid()}x{time.monotonic_ns() % 10**9}"
    created = subprocess.run(
        [sys.executable, "-m", "metastore", "topics", "create", "--kafka", kafka_bootstrap,
         "--prefix", prefix],
        env=_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    return prefix


def _replay(kafka: str, prefix: str, data_dir: Path) -> list[str]:
    return [sys.executable, "-m", "metastore", "replay", "--kafka", kafka, "--topic-prefix",
            prefix, "--data-dir", str(data_dir), "--fresh", "--idle", "0.2"]  # fmt: skip


def test_replay_progress_in_a_log_file_is_plain_lines(
    kafka_bootstrap: str, topics: str, tmp_path: Path
) -> None:
    log = tmp_path / "replay.log"
    with log.open("w") as err:
        done = subprocess.run(
            _replay(kafka_bootstrap, topics, tmp_path / "view"), env=_env(), stdout=subprocess.PIPE,
            stderr=err, text=True, timeout=120,
        )  # fmt: skip
    assert done.returncode == 0, log.read_text()
    text = log.read_text()
    assert "\r" not in text
    assert [line for line in text.splitlines() if line.startswith("replay: ")], text


def test_replay_progress_on_a_terminal_is_one_line_redrawn(
    kafka_bootstrap: str, topics: str, tmp_path: Path
) -> None:
    master, slave = os.openpty()
    try:
        child = subprocess.Popen(
            _replay(kafka_bootstrap, topics, tmp_path / "view"), env=_env(),
            stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        os.close(slave)
        received = b""
        while True:  # until the child closes its end (EIO on Linux when it exits)
            if select.select([master], [], [], 120)[0]:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                received += chunk
        assert child.wait(120) == 0, received
        child.stdout.close()  # type: ignore[union-attr]
    finally:
        os.close(master)
    assert b"\rreplay: " in received, received
    assert received.rstrip(b"\r\n").count(b"\n") == 0  # one line in all, redrawn
