"""Reporting shared by the benchmarks: the machine, text tables, and the JSON file."""

from __future__ import annotations

import json
import math
import os
import platform
import shlex
import sys
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from bench.load import Failures


def command_line(module: str) -> str:
    """How this benchmark was started, as one would type it (``python -m <module> ...``)."""
    return shlex.join([Path(sys.executable).name, "-m", module, *sys.argv[1:]])


def machine() -> dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if "model name" in ln), "")
    except OSError:
        pass
    try:
        nproc = len(os.sched_getaffinity(0))
    except AttributeError:
        nproc = os.cpu_count() or 0
    return {
        "nproc": nproc,
        "cpu": model,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "aiohttp": aiohttp.__version__,
    }


def table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], left: Collection[int] = (0,)
) -> str:
    """Columns padded to fit; those in ``left`` (the first) left-aligned, the others
    right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i in left else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    return "\n".join([line(headers), "  ".join("-" * w for w in widths), *map(line, rows)])


def by_column(
    results: Mapping[str, Mapping[str, float]], rows: Sequence[tuple[str, str, str]]
) -> list[list[str]]:
    """A table's rows: for each ``(label, key, format)``, the label and each column's
    figure under ``key`` (``-`` where that column has none)."""
    return [
        [label, *(fmt.format(results[n][key]) if key in results[n] else "-" for n in results)]
        for label, key, fmt in rows
    ]


def pairs(rows: Sequence[Sequence[str]]) -> str:
    width = max(len(key) for key, _ in rows)
    return "\n".join(f"  {key.ljust(width)}  {value}" for key, value in rows)


def pct(value: float) -> str:
    return "-" if math.isnan(value) else f"{value * 100:.0f}%"


def ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}"


def ratio(a: float, b: float) -> str:
    """``a / b`` for a table: "-" when either is missing (NaN) or ``b`` is zero."""
    return "-" if not b or math.isnan(a) or math.isnan(b) else f"{a / b:.2f}"


def finite(value: Any) -> Any:
    """NaN (no samples) -> null, so the file is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def write_json(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(finite(report), indent=2, allow_nan=False) + "\n")


def save_report(path: Path, root: Path, report: dict[str, Any]) -> None:
    """Write a benchmark's summary and say where (relative to the repository ``root``)."""
    write_json(path, report)
    print(f"\nwrote {path.relative_to(root)}")


def print_outcome(text: str, failures: Failures, nodes_ok: bool, what: str = "failures") -> bool:
    """Print the summary and what went wrong; True if nothing did."""
    print("\n" + "=" * 100 + "\n" + text)
    if failures.count:
        print(f"\nFAILED: {failures.count} unexpected {what}, e.g.:")
        for sample in failures.samples:
            print("  " + sample)
    if not nodes_ok:
        print("\nFAILED: a node did not stop cleanly (see above)")
    return failures.count == 0 and nodes_ok
