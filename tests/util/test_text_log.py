"""The text log's lines: the standard formatter's text, with the time's text made once
per second."""

from __future__ import annotations

import logging

from metastore.util.logs import TEXT_FORMAT, TextFormatter


def _record(created: float) -> logging.LogRecord:
    record = logging.LogRecord(
        "metastore.access", logging.INFO, __file__, 1, "GET %s", ("/x",), None
    )
    record.created, record.msecs = created, (created - int(created)) * 1000
    return record


def test_every_line_is_the_standard_formatters_line_across_seconds() -> None:
    ours, standard = TextFormatter(), logging.Formatter(TEXT_FORMAT)
    for created in (1_795_400_000.001, 1_795_400_000.999, 1_795_400_001.5, 1_795_400_000.25):
        record = _record(created)
        assert ours.format(record) == standard.format(record)
    custom = _record(1_795_400_002.0)
    assert ours.formatTime(custom, "%H") == standard.formatTime(custom, "%H")
