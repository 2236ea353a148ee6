"""Checkpoints a real node reports are absolute paths: a job (``metastore audit --url``)
opens them from its own directory, wherever that is."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from harness.node import NodeProcess

CHECKPOINTS = "/api/v1/admin/checkpoints"


def call(node: NodeProcess, method: str, path: str) -> Any:
    request = urllib.request.Request(node.url + path, method=method)
    with urllib.request.urlopen(request, timeout=60) as reply:
        return json.loads(reply.read() or b"null")


def test_a_node_started_with_a_relative_data_dir_reports_absolute_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, elsewhere = tmp_path / "node-home", tmp_path / "job-home"
    home.mkdir()
    elsewhere.mkdir()
    node = NodeProcess(Path("data"), cwd=home, log_path=tmp_path / "node.log")  # --data-dir data
    with node:
        made = call(node, "POST", CHECKPOINTS)
        listed = call(node, "GET", CHECKPOINTS)["checkpoints"]
        path = Path(made["path"])
        assert path.is_absolute(), made
        assert path == home / "data" / "checkpoints" / made["id"], made
        assert [Path(c["path"]) for c in listed] == [path], listed
        monkeypatch.chdir(elsewhere)  # as a job run from another directory sees it
        assert (Path(made["path"]) / "CURRENT").is_file()  # a RocksDB database
        call(node, "DELETE", f"{CHECKPOINTS}/{made['id']}")
    assert "data in " + str(home / "data") in node.log_path.read_text()
