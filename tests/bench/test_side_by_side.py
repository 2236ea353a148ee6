"""``bench.side_by_side`` measures two trees' nodes, each running its own tree's code:
a node started in a tree (its working directory and ``PYTHONPATH``) runs that tree's
package even when this checkout is installed, and the tool's report names both."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from bench import side_by_side
from harness.node import NodeProcess

pytestmark = pytest.mark.slow
REPO = Path(side_by_side.__file__).resolve().parents[1]


@pytest.fixture
def other_tree(tmp_path: Path) -> Path:
    """This checkout's HEAD, exported (not a worktree: the repository is left as it is,
    whatever runs beside), its package saying a version of its own."""
    tree = tmp_path / "tree"
    tree.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "HEAD"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    init = tree / "metastore" / "__init__.py"
    init.write_text(init.read_text().replace('__version__ = "', '__version__ = "0.0.0-other+'))
    return tree


def _version(node: NodeProcess) -> str:
    with urllib.request.urlopen(node.url + "/api/v1/openapi.json", timeout=10) as response:
        document = json.load(response)
    version: str = document["info"]["version"]
    return version


def test_a_node_started_in_another_tree_runs_that_trees_code(
    tmp_path: Path, other_tree: Path
) -> None:
    here = NodeProcess(tmp_path / "a", log_path=tmp_path / "a.log").start(120)
    there = NodeProcess(
        tmp_path / "b",
        log_path=tmp_path / "b.log",
        env={"PYTHONPATH": str(other_tree)},
        cwd=other_tree,
    ).start(120)
    try:
        assert _version(there).startswith("0.0.0-other+")
        assert not _version(here).startswith("0.0.0-other+")
    finally:
        here.stop()
        there.stop()


def _tool(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m bench.side_by_side`` run from the repository, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "bench.side_by_side", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_the_tool_measures_both_trees_and_reports_them(tmp_path: Path, other_tree: Path) -> None:
    out = tmp_path / "side.json"
    args = ["--base-tree", str(other_tree), "--rounds", "1", "--ops", "2", "--out", str(out)]
    cpu = str(min(os.sched_getaffinity(0)))
    args += ["--env", f"METASTORE_PIN_CPU={cpu}", "--base-env", "METASTORE_LOG_LEVEL=WARNING"]
    done = _tool(*args, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    assert report["base"] == "(not a git tree)"  # the exported tree names no commit
    assert report["this"] != report["base"]
    assert report["rounds"] == 1 and report["ops_per_phase_and_round"] == 2
    assert report["this_env"] == {"METASTORE_PIN_CPU": cpu}
    assert report["base_env"] == {"METASTORE_LOG_LEVEL": "WARNING"}
    assert f"METASTORE_PIN_CPU={cpu}" in done.stdout
    assert set(report["phases"]) == {"create", "step", "load"}
    for figures in report["phases"].values():
        assert figures["base"]["p50_ms"] > 0 and figures["this"]["p50_ms"] > 0
        assert figures["node_cpu_ms"]["base"] >= 0 and figures["node_cpu_ms"]["this"] >= 0
    assert "operations" in done.stdout and "done" in done.stdout  # the progress line


def test_a_revision_that_cannot_be_checked_out_is_exit_2_and_leaves_no_worktree() -> None:
    done = _tool("--base", "no-such-revision-xyz")
    assert done.returncode == 2
    assert "cannot check out 'no-such-revision-xyz'" in done.stderr
    listed = subprocess.run(
        ["git", "-C", str(REPO), "worktree", "list"], capture_output=True, text=True, check=True
    ).stdout
    assert "side-by-side-" not in listed  # the tool's own temporary tree


def test_a_base_tree_that_is_not_one_is_refused_in_one_line(tmp_path: Path) -> None:
    done = _tool("--base-tree", str(tmp_path))
    assert done.returncode == 2
    assert f"--base-tree {tmp_path} is not a source tree of this service" in done.stderr


def test_a_variable_given_with_env_reaches_this_checkouts_node(other_tree: Path) -> None:
    """A setting the node refuses stops this checkout's node, not the base's."""
    done = _tool("--base-tree", str(other_tree), "--env", "METASTORE_PIN_CPU=4096")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "base: " in done.stdout and "this: " not in done.stdout  # the base node started
    assert "error: " in done.stderr


@pytest.mark.parametrize("pair", ["NOVALUE", "=value"])
def test_a_variable_that_is_not_name_equals_value_is_refused(pair: str) -> None:
    done = _tool("--env", pair)
    assert done.returncode == 2
    assert "--env takes NAME=VALUE" in done.stderr
