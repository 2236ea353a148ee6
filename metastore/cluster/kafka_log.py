"""librdkafka's own log, through the node's logging, each kind of line once a minute.

Left to itself, librdkafka writes its log to stderr in a format of its own
(``%3|1795569000.721|FAIL|rdkafka#consumer-2| ...``), past the node's log format (a
collector reading ``METASTORE_LOG_FORMAT=json`` lines gets lines it cannot parse),
and without limit: with the broker gone, one node of 12 partitions wrote 2,543 lines
in a minute (each consumer reconnects every 50 ms and says so each time), about 3.6
million a day, against three lines of our own.

Every client the node makes is handed the ``metastore.kafka`` logger instead
(``ClusterConfig.client``), so its lines are the node's, in its format. A line that
says what another said in the last minute (the same level, facility, kind of client
and words, numbers such as the attempt's milliseconds aside) is counted, not written;
the first such line after the minute is written with the count, e.g.
``FAIL [rdkafka#consumer-2] ...: Connection refused (and 1,146 more like it in 60 s)``.
A client delivers its lines only when it is polled, so the partition owners poll
their producers while idle (``workers.owner``).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

LOGGER_NAME = "metastore.kafka"
REPEAT_WINDOW_S = 60.0  # a kind of line is written at most once this often
MAX_KINDS = 1_000  # kinds remembered; the oldest is forgotten first

_THREAD = re.compile(r"\[thrd:[^\]]*\]:\s*")  # which of the client's threads said it
_ATTEMPT = re.compile(r"\s*\(after \d+ms in state \w+(?:, \d+ identical error\(s\) suppressed)?\)")
_NUMBER = re.compile(r"(?<![\w.:#/-])\d+(?![\w.:])")  # counts, not addresses or ports
_INSTANCE = re.compile(r"-\d+$")  # rdkafka#producer-7 -> rdkafka#producer


@dataclass(slots=True)
class _Kind:
    written_at: float  # when a line of this kind was last written
    since: int = 0  # lines of this kind not written since then


class RepeatSummary(logging.Filter):
    """Passes the first line of each kind per window and counts the rest.

    Thread-safe: librdkafka's lines arrive on whichever thread polls their client."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        window_s: float = REPEAT_WINDOW_S,
        max_kinds: int = MAX_KINDS,
    ) -> None:
        super().__init__()
        self._clock = clock
        self._window_s = window_s
        self._max_kinds = max_kinds
        self._lock = threading.Lock()
        self._kinds: dict[tuple[object, ...], _Kind] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        facility, client, text = _parts(record)
        key = (record.levelno, facility, _INSTANCE.sub("", client), kind_of(text))
        now = self._clock()
        with self._lock:
            kind = self._kinds.get(key)
            if kind is not None and now - kind.written_at < self._window_s:
                kind.since += 1
                return False
            repeated, elapsed = (kind.since, now - kind.written_at) if kind else (0, 0.0)
            self._kinds.pop(key, None)
            self._kinds[key] = _Kind(now)  # newest last: the oldest is forgotten first
            if len(self._kinds) > self._max_kinds:
                del self._kinds[next(iter(self._kinds))]
        line = f"{facility} [{client}] {_THREAD.sub('', text)}" if client else text
        if repeated:
            line += f" (and {repeated:,} more like it in {elapsed:,.0f} s)"
        record.msg, record.args = line, ()
        return True


def kind_of(text: str) -> str:
    """The words of a line without what varies between attempts of the same failure."""
    return _NUMBER.sub("#", _ATTEMPT.sub("", _THREAD.sub("", text)))


def _parts(record: logging.LogRecord) -> tuple[str, str, str]:
    """confluent-kafka logs ``("%s [%s] %s", facility, client name, text)``."""
    args = record.args
    if isinstance(args, tuple) and len(args) == 3:
        return str(args[0]), str(args[1]), str(args[2])
    return "", "", record.getMessage()


_lock = threading.Lock()


def kafka_logger() -> logging.Logger:
    """The logger every Kafka client of this process is handed, with its filter."""
    logger = logging.getLogger(LOGGER_NAME)
    with _lock:
        if not any(isinstance(f, RepeatSummary) for f in logger.filters):
            logger.addFilter(RepeatSummary())
    return logger
