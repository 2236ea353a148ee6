"""One table of every benchmark's ratios and the figures behind them.

``make bench`` runs each benchmark in its own process; each one hands its headline
ratios to ``contribute`` (``.bench/rows/<source>.json``), and ``python -m
bench.summary`` (the last step of ``make bench``) reads them all, prints ONE table and
writes ``.bench/summary.json``. A scenario module contributes by returning ``Row``s:

    Row("iceberg", "create_table/s", Figure("metastore", 126, "/s"),
        Figure("sql-sqlite", 107, "/s"), at_least(1.0))

``ratio`` is ``figure / base``; a row without ``base`` is one figure checked against
its target as is (e.g. client retries, at most 0). A row without a target is reported
only. A source's file is replaced whole by its next run, so the table always shows
each benchmark's latest run; ``make bench`` empties ``.bench/rows`` first, so after it
the table is that one run. A ``--quick`` run's rows are marked as such.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from bench.report import finite, table, write_json

REPO_ROOT = Path(__file__).resolve().parents[1]
ROWS_DIR = REPO_ROOT / ".bench" / "rows"
OUT_PATH = REPO_ROOT / ".bench" / "summary.json"
# the order of the table's sections; sources not named here follow, by name
ORDER = ("embedded", "iceberg", "iceberg floor", "appenders", "cluster", "pipeline", "authz", "gc")


@dataclass(frozen=True)
class Figure:
    """One measured figure: what it is of (a backend, a load), its value and unit."""

    label: str
    value: float
    unit: str = ""

    def text(self) -> str:
        if math.isnan(self.value):
            return f"{self.label} -"
        digits = 0 if abs(self.value) >= 100 or self.value == int(self.value) else 2
        return f"{self.label} {self.value:,.{digits}f}{_spaced(self.unit)}"


def _spaced(unit: str) -> str:
    return unit if not unit or unit.startswith("/") else f" {unit}"


@dataclass(frozen=True)
class Target:
    """``ratio >= value`` or ``ratio <= value``."""

    op: Literal[">=", "<="]
    value: float

    def met(self, ratio: float) -> bool | None:
        if math.isnan(ratio):
            return None
        return ratio >= self.value if self.op == ">=" else ratio <= self.value

    def text(self) -> str:
        return f"{'≥' if self.op == '>=' else '≤'} {self.value:.3g}"


def ratio_text(ratio: float, target: Target | None) -> str:
    """Two decimals, or as many as it takes to show why a ratio that rounds onto its
    target is not met (0.897 against 0.9, not "0.90 NO")."""
    if math.isnan(ratio):
        return "-"
    for digits in (2, 3, 4):
        text = f"{ratio:.{digits}f}"
        if target is None or target.met(ratio) == target.met(float(text)):
            return text
    return text


def at_least(value: float) -> Target:
    return Target(">=", value)


def at_most(value: float) -> Target:
    return Target("<=", value)


@dataclass(frozen=True)
class Row:
    """One line of the summary: ``figure / base`` (or ``figure`` alone) and its target."""

    section: str
    measure: str
    figure: Figure
    base: Figure | None = None
    target: Target | None = None

    @property
    def ratio(self) -> float:
        if self.base is None:
            return self.figure.value
        if not self.base.value or math.isnan(self.base.value):
            return math.nan
        return self.figure.value / self.base.value

    def as_json(self) -> dict[str, Any]:
        met = None if self.target is None else self.target.met(self.ratio)
        return asdict(self) | {"ratio": self.ratio, "met": met}


def contribute(source: str, rows: Iterable[Row], *, quick: bool = False) -> Path:
    """Record ``source``'s rows for the summary (replacing its previous ones)."""
    path = ROWS_DIR / f"{source}.json"
    report = {
        "source": source,
        "quick": quick,
        "command": " ".join(["python", "-m", *sys.argv]),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "rows": [row.as_json() for row in rows],
    }
    write_json(path, report)
    return path


def _load(path: Path) -> tuple[dict[str, Any], list[Row]]:
    report = json.loads(path.read_text())
    rows = []
    for raw in report["rows"]:
        figure = _figure(raw["figure"])
        assert figure is not None
        target = raw.get("target")
        rows.append(
            Row(
                raw["section"],
                raw["measure"],
                figure,
                _figure(raw.get("base")),
                None if target is None else Target(target["op"], float(target["value"])),
            )
        )
    return report, rows


def _figure(raw: dict[str, Any] | None) -> Figure | None:
    if raw is None:
        return None
    value = raw["value"]
    return Figure(raw["label"], math.nan if value is None else float(value), raw.get("unit", ""))


def collect(rows_dir: Path = ROWS_DIR) -> list[tuple[dict[str, Any], list[Row]]]:
    """Every source's report and rows, in ``ORDER``."""
    found = {p.stem: _load(p) for p in sorted(rows_dir.glob("*.json"))}
    rank = {name: i for i, name in enumerate(ORDER)}
    names = sorted(found, key=lambda n: (rank.get(n, len(ORDER)), n))
    return [found[n] for n in names]


def render(sources: Sequence[tuple[dict[str, Any], list[Row]]]) -> str:
    """The one table: section, measure, figure, base, ratio, target, met."""
    lines: list[list[str]] = []
    for report, rows in sources:
        quick = " (quick)" if report.get("quick") else ""
        for row in rows:
            ratio = row.ratio
            met = None if row.target is None else row.target.met(ratio)
            lines.append(
                [
                    f"{row.section}{quick}",
                    row.measure,
                    row.figure.text(),
                    "" if row.base is None else row.base.text(),
                    ratio_text(ratio, row.target),
                    "" if row.target is None else row.target.text(),
                    {None: "", True: "yes", False: "NO"}[met],
                ]
            )
    if not lines:
        return "no benchmark rows (run the benchmarks first)"
    headers = ["section", "measure", "figure", "vs", "ratio", "target", "met"]
    return table(headers, lines, left=(0, 1, 2, 3))


def main(argv: Sequence[str] | None = None) -> int:
    del argv
    sources = collect()
    print("\n" + "=" * 100 + "\nSummary: every benchmark's ratios in this run\n")
    print(render(sources))
    summary = {
        "sources": [
            {k: v for k, v in report.items() if k != "rows"}
            | {"rows": [row.as_json() for row in rows]}
            for report, rows in sources
        ]
    }
    write_json(OUT_PATH, finite(summary))
    print(f"\nwrote {OUT_PATH.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
