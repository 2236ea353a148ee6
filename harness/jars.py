"""Java programs the tests and benchmarks run, fetched from Maven Central by their POMs.

Each folder of ``harness/maven/`` holds one POM naming pinned artifacts; ``fetch(name)``
copies them with their dependencies into ``.jars/<name>/`` through Maven's own cache
(``~/.m2``), once: a stamp records the POM's digest, so a changed POM fetches again and
an unchanged one costs a file read. ``python -m harness.jars NAME...`` is what
``make test`` and ``make bench`` run first on a fresh machine.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
POMS = REPO / "harness" / "maven"
JARS = REPO / ".jars"
# pinned, so a fresh machine resolves what this one did (Maven's default is older)
COPY = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies"
STAMP = ".pom-sha256"


class JarsMissing(RuntimeError):
    """The jars are not there and could not be fetched: the one line says why."""


def names() -> list[str]:
    return sorted(p.name for p in POMS.iterdir() if (p / "pom.xml").is_file())


def directory(name: str) -> Path:
    return JARS / name


def _digest(pom: Path) -> str:
    return hashlib.sha256(pom.read_bytes()).hexdigest()


def fetched(name: str) -> bool:
    stamp = directory(name) / STAMP
    pom = POMS / name / "pom.xml"
    return stamp.is_file() and stamp.read_text().strip() == _digest(pom)


def classpath(name: str) -> str:
    """The ``-cp`` of one program: every jar of its folder, fetched first if needed."""
    fetch(name)
    return str(directory(name) / "*")


def fetch(name: str) -> Path:
    """``.jars/<name>/`` holding the POM's artifacts and their dependencies."""
    pom = POMS / name / "pom.xml"
    if not pom.is_file():
        raise JarsMissing(f"no POM for {name!r} in {POMS} (known: {', '.join(names())})")
    target = directory(name)
    if fetched(name):
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarsMissing("Maven (mvn) is not installed: run `make setup` (apt: maven)")
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    started = time.monotonic()
    print(f"fetching the {name} jars from Maven Central ({pom.relative_to(REPO)})", flush=True)
    run = subprocess.run(
        [mvn, "-q", "-B", "-f", str(pom), COPY, f"-DoutputDirectory={partial}"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )
    if run.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        last = (run.stdout + run.stderr).strip().splitlines()[-5:]
        raise JarsMissing(f"mvn could not fetch the {name} jars: {' | '.join(last)}")
    (partial / STAMP).write_text(_digest(pom) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)  # whole or not at all: a cut fetch leaves only .partial
    jars = sorted(target.glob("*.jar"))
    size = sum(j.stat().st_size for j in jars) / 2**20
    took = time.monotonic() - started
    print(f"fetched {len(jars)} jars ({size:.0f} MiB) into {target} in {took:.0f}s", flush=True)
    return target


def main(argv: list[str]) -> int:
    for name in argv or names():
        try:
            fetch(name)
        except JarsMissing as exc:
            print(f"harness.jars: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
