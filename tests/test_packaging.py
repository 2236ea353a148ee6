"""The wheel carries the schemas and topic specs and works from outside the checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHIPPED_AVRO = sorted(p.name for p in (REPO / "schemas" / "avro").glob("*.avsc"))


@pytest.mark.slow
def test_wheel_ships_schemas_and_imports_from_outside_the_repo(tmp_path: Path) -> None:
    assert "entity.v2.avsc" in SHIPPED_AVRO
    dist, unpacked, elsewhere = tmp_path / "dist", tmp_path / "site", tmp_path / "cwd"
    elsewhere.mkdir()
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
    with zipfile.ZipFile(wheels[0]) as wheel:
        wheel.extractall(unpacked)

    avro = unpacked / "metastore" / "_schemas" / "avro"
    assert avro.is_dir()
    assert sorted(p.name for p in avro.glob("*.avsc")) == SHIPPED_AVRO
    assert (avro / "entity.v2.avsc").read_bytes() == (
        REPO / "schemas" / "avro" / "entity.v2.avsc"
    ).read_bytes()
    assert (unpacked / "metastore" / "codec.py").is_file()
    topics_spec = unpacked / "metastore" / "_topics" / "metastore.json"
    assert topics_spec.is_file()
    assert topics_spec.read_bytes() == (REPO / "topics" / "metastore.json").read_bytes()

    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = str(unpacked)
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            "import metastore, metastore.codec as c; print(metastore.__file__);"
            " print(c.default_codec().names())",
        ],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    module_file, names = run.stdout.splitlines()
    module_path = Path(module_file).resolve()
    assert module_path == (unpacked / "metastore" / "__init__.py").resolve()
    assert not module_path.is_relative_to(REPO)
    expected = sorted({name.split(".", 1)[0] for name in SHIPPED_AVRO})
    assert {"commit", "entity", "index", "node_lease", "ref"} <= set(expected)
    assert names == repr(expected)

    topics = subprocess.run(
        [
            sys.executable,
            "-c",
            "from metastore.resources import topics_dir;"
            " from metastore.cluster.topics import load_specs;"
            " print(topics_dir()); print([s.role for s in load_specs()])",
        ],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert topics.returncode == 0, topics.stderr
    topics_path, roles = topics.stdout.splitlines()
    assert Path(topics_path).resolve() == (unpacked / "metastore" / "_topics").resolve()
    assert roles == repr(["refs", "objects"])
