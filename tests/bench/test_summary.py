"""The benchmarks' one summary table: rows handed over by each benchmark come back whole."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench import summary
from bench.summary import Figure, Row, at_least, at_most


def test_rows_round_trip_into_one_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(summary, "ROWS_DIR", tmp_path)
    summary.contribute(
        "cluster",
        [Row("cluster", "hot vs raw", Figure("node", 530, "/s"), Figure("raw", 484, "/s"))],
    )
    summary.contribute(
        "iceberg",
        [
            Row(
                "iceberg",
                "p50",
                Figure("metastore", 6.0, "ms"),
                Figure("sql", 3.0, "ms"),
                at_most(1.0),
            ),
            Row("iceberg", "retries", Figure("metastore", 0.0), None, at_most(0)),
            Row("iceberg", "empty", Figure("metastore", math.nan), None, at_least(1)),
        ],
        quick=True,
    )
    sources = summary.collect(tmp_path)
    assert [report["source"] for report, _ in sources] == ["iceberg", "cluster"]  # ORDER
    rows = sources[0][1]
    assert rows[0].ratio == 2.0 and rows[0].target is not None
    assert rows[0].target.met(rows[0].ratio) is False
    assert rows[1].ratio == 0.0 and rows[1].target == at_most(0)
    lines = summary.render(sources).splitlines()
    assert lines[0].split() == ["section", "measure", "figure", "vs", "ratio", "target", "met"]
    assert "NO" in lines[2] and "(quick)" in lines[2] and "2.00" in lines[2]
    assert lines[3].rstrip().endswith("yes")
    assert " - " in lines[4] and not lines[4].rstrip().endswith(("yes", "NO"))
    assert "1.10" in lines[5]


@pytest.mark.parametrize(
    ("ratio", "target", "shown"),
    [
        (0.8966, at_least(0.9), "0.897"),  # rounds onto the target, not met: a third digit
        (0.8999, at_least(0.9), "0.8999"),
        (0.9123, at_least(0.9), "0.91"),
        (50.004, at_most(50), "50.004"),
        (0.15, None, "0.15"),
        (math.nan, at_least(1), "-"),
    ],
)
def test_a_ratio_never_reads_as_its_target_when_it_misses_it(
    ratio: float, target: summary.Target | None, shown: str
) -> None:
    assert summary.ratio_text(ratio, target) == shown
