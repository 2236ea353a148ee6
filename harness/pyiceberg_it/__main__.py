"""Run PyIceberg's integration tests against a node: ``python -m harness.pyiceberg_it``.

Each warehouse (``--warehouse file``, ``s3`` or ``all``, the default) is one pytest
session of their tests with our adapter (``harness.pyiceberg_it.plugin``), which
starts its own node and S3 server, so the sessions run side by side (they wait on
the node and the S3 server far more than they compute); each one's output is
printed whole when it ends. Arguments after ``--`` go to pytest (e.g.
``-- tests/integration/test_catalog.py -x``); the exit code is non-zero if any
session fails.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.pyiceberg_it.source import extract

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "pyiceberg-it"
INI = Path(__file__).resolve().parent / "pytest.ini"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.pyiceberg_it", description=__doc__)
    parser.add_argument("--warehouse", choices=("file", "s3", "all"), default="all")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args(argv)
    tests = extract(CACHE)
    warehouses = ("file", "s3") if args.warehouse == "all" else (args.warehouse,)
    selected = args.pytest_args or ["tests/integration"]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pyiceberg-it-") as logs:
        sessions = {}
        for warehouse in warehouses:
            command = [
                sys.executable, "-m", "pytest", "-c", str(INI), "--rootdir", str(tests),
                f"--metastore-warehouse={warehouse}", *selected,
            ]  # fmt: skip
            with (Path(logs) / warehouse).open("wb") as log:
                sessions[warehouse] = subprocess.Popen(
                    command, cwd=tests, stdin=subprocess.DEVNULL, stdout=log, stderr=log
                )
        failed = []
        for warehouse, session in sessions.items():
            code = session.wait()
            print(f"== PyIceberg {tests.name} integration tests, {warehouse} warehouse ==")
            print((Path(logs) / warehouse).read_text(errors="replace"), flush=True)
            if code != 0:
                failed.append(warehouse)
    elapsed = time.monotonic() - started
    outcome = f"failed ({', '.join(failed)} warehouse)" if failed else "passed"
    print(f"PyIceberg integration tests {outcome} in {elapsed:.0f}s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
