"""``metastore replay``: rebuild a node's view from the changelog topics.

Reads both topics from the view's stored offsets (the beginning for a fresh or
wiped view), applies every record with the same rules as a live view, shows
progress, and stops once caught up. It produces nothing.

Caught up, on a conformant broker (``broker_profile`` ``kafka``, the default): every
partition has been read to the end its first fetch response reported
(``ViewFeed.reached_first_ends``), so a replay ends while writes go on, holding at
least what was committed when it started. On a ``tansu`` broker, whose reported high
watermarks are wrong, the replay is caught up when

1. no partition of either topic has delivered a record for an idle window
   (``idle_s``, 1 s by default) after the last record of any partition; on a
   broker that stops a fetch at an open transaction this also waits for the
   transaction to end, because the next rule fails meanwhile; and
2. every partition's cached high watermark is known
   (``get_watermark_offsets(cached=True)``, from fetch responses, never a new
   request) and the consumer's position is at or past it. A known watermark
   proves the replay has read from the brokers: a consumer that cannot connect
   reads nothing and would otherwise look idle, so "caught up" on an empty view. A
   correct broker (Apache Kafka) thereby proves the end was reached; the test
   broker's value is at or below the true end, so it never holds a replay back.

A consumer that cannot connect or authenticate says so only through librdkafka's
``error_cb``, so the replay listens there and fails at once (exit status 2, a
source it cannot read, as for every job; one line naming the connection settings)
on an authentication or TLS error, or when no broker could be reached before
anything was read. A replay that is not caught up within ``timeout_s`` fails with
one line and exit status 3.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from confluent_kafka import KafkaError, KafkaException
from rocksdict import AccessType, Options, Rdict

from metastore.cluster.cluster_config import ClusterConfig, profile_from_env, properties_from_env
from metastore.cluster.view.consumer import ViewFeed, open_consumer
from metastore.cluster.view.digest import digest
from metastore.cluster.view.view_store import ViewStore
from metastore.errors import MetastoreError
from metastore.persistence.rocksdb_layout import VIEW_MARKER
from metastore.util.setting_rules import check_range, decimal, integer
from metastore.util.ticker import Ticker

log = logging.getLogger(__name__)

# Bounds of the catch-up rule's flags (here and in ``metastore rebuild``), in seconds.
MIN_WAIT_S = 0.001  # the shortest idle window or timeout
MAX_IDLE_S = 60.0  # a partition's idle window at its high watermark
MAX_TIMEOUT_S = 86_400.0


class ReplayError(MetastoreError):
    """The replay could not run or did not catch up."""


class Unreachable(ReplayError):
    """The brokers could not be reached or refused the connection settings (exit 2)."""


class NotAViewDirectory(ReplayError):
    """``--data-dir`` names something a view must not be written into (exit 2)."""


# librdkafka errors that waiting does not fix: the connection settings are wrong
_SETTINGS_ERRORS = frozenset(
    {KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError.SASL_AUTHENTICATION_FAILED}
)


class BrokerErrors:
    """The replay consumer's ``error_cb``: librdkafka reports connection and
    authentication failures only there (served by the consumer's own calls)."""

    def __init__(self) -> None:
        self.settings: KafkaError | None = None  # the first one the settings cause
        self.unreachable: KafkaError | None = None  # no broker could be reached
        self.transport: KafkaError | None = None  # the latest connection failure

    def __call__(self, error: KafkaError) -> None:
        code = error.code()
        if (code in _SETTINGS_ERRORS or error.fatal()) and self.settings is None:
            self.settings = error
        elif code == KafkaError._ALL_BROKERS_DOWN:
            self.unreachable = error
        elif code in (KafkaError._TRANSPORT, KafkaError._RESOLVE):
            self.transport = error
        log.debug("kafka: %s", error)

    def problem(self, *, heard: bool) -> str | None:
        """Why the replay cannot go on, if it cannot: an authentication or TLS failure,
        or no broker reachable while the brokers have ``heard`` nothing from us yet (a
        broker lost later is waited for, until the timeout)."""
        if self.settings is not None:
            return self.settings.str()
        if self.unreachable is not None and not heard:
            detail = f" ({self.transport.str()})" if self.transport is not None else ""
            return f"no broker could be reached: {self.unreachable.str()}{detail}"
        return None


@dataclass(frozen=True, slots=True)
class ReplaySummary:
    consumed: int  # records read by this run (a resumed view reads only the tail)
    applied: int
    dropped: int
    waiting: int  # refs records still waiting for their objects (re-read next time)
    seconds: float
    digest: str

    @property
    def rate(self) -> float:
        return self.consumed / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` summary; ``digest`` as ``metastore rebuild`` prints it."""
        return {
            "records": self.consumed,
            "consumed": self.consumed,
            "applied": self.applied,
            "dropped": self.dropped,
            "waiting": self.waiting,
            "seconds": round(self.seconds, 3),
            "records_per_s": round(self.rate, 1),
            "digest": self.digest,
        }

    def render(self) -> str:
        return (
            f"replayed {self.consumed} records: applied {self.applied}, dropped {self.dropped}, "
            f"waiting {self.waiting}, in {self.seconds:.2f} s ({self.rate:,.0f} records/s)\n"
            f"digest: {self.digest}"
        )


def replay(
    config: ClusterConfig,
    data_dir: str | Path,
    *,
    fresh: bool = False,
    idle_s: float = 1.0,
    timeout_s: float = 600.0,
    progress: bool = True,
    batch_size: int = 10_000,
) -> ReplaySummary:
    """Bring the view at ``data_dir`` up to the end of the topics; see the module doc."""
    path = Path(data_dir)
    check_data_dir(path)
    if fresh:
        wipe_view(path)
    path.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    store = ViewStore(path, config)
    errors = BrokerErrors()
    try:
        # librdkafka's own log would repeat a connection failure many times a second:
        # its errors reach ``errors`` instead, and the replay reports them once
        feed = ViewFeed(store, open_consumer(store, config, error_cb=errors, log_level=0))
        try:
            counted = _Counted(started)
            with Ticker(counted.line, enabled=progress):
                _run(
                    feed,
                    counted,
                    errors,
                    idle_s=idle_s,
                    deadline=started + timeout_s,
                    batch=batch_size,
                )
        finally:
            feed.consumer.close()
        return ReplaySummary(
            consumed=feed.stats.consumed,
            applied=feed.stats.applied,
            dropped=feed.stats.dropped,
            waiting=sum(store.waiting().values()),
            seconds=time.monotonic() - started,
            digest=digest(store),
        )
    finally:
        store.close()


class _Counted:
    """Records read so far, as a progress line (``metastore.util.ticker``)."""

    def __init__(self, started: float) -> None:
        self.records = 0
        self._started = started

    def update(self, records: int) -> None:
        self.records += records

    def line(self) -> str:
        seconds = time.monotonic() - self._started
        rate = self.records / seconds if seconds > 0 else 0.0
        return f"replay: {self.records:,} records, {seconds:.0f} s ({rate:,.0f} records/s)"


def _run(
    feed: ViewFeed,
    bar: _Counted,
    errors: BrokerErrors,
    *,
    idle_s: float,
    deadline: float,
    batch: int,
) -> None:
    config = feed.store.config
    while True:
        result = feed.step(batch, min(0.2, idle_s))
        now = time.monotonic()
        if result is not None:
            bar.update(result.consumed)
        problem = errors.problem(heard=feed.stats.consumed > 0 or feed.heard())
        if problem is not None:
            raise Unreachable(f"Kafka: {problem} ({config.connection()})")
        if (result is None or config.trusts_broker) and feed.at_end(idle_s):
            return
        if now > deadline:
            behind = list(feed.behind())
            where = "; ".join(behind[:4]) + (f"; {len(behind) - 4} more" if len(behind) > 4 else "")
            where = where or f"every partition at its reported end, idle under {idle_s} s"
            raise ReplayError(
                f"not caught up before the timeout ({feed.stats.consumed} read; {where}; "
                f"{config.connection()})"
            )


def check_data_dir(path: Path) -> None:
    """A view goes into a new or empty directory, or one holding a database: RocksDB
    would otherwise scatter its files among whatever a mistyped path holds."""
    try:
        if path.exists() and not path.is_dir():
            raise NotAViewDirectory(f"--data-dir {path} is not a directory")
        if path.is_dir() and any(path.iterdir()) and not (path / "CURRENT").exists():
            raise NotAViewDirectory(
                f"--data-dir {path} holds files but no database: refusing to write a view"
                " into it (name a new or empty directory, or a view's)"
            )
    except OSError as exc:  # a name too long for the file system, a denied directory
        raise NotAViewDirectory(f"--data-dir cannot be used: {exc.strerror}") from None


def wipe_view(path: Path) -> None:
    """Remove a view's directory; refuses anything that is not a view (an embedded store)."""
    if not path.exists() or not any(path.iterdir()):
        return
    if not (path / "CURRENT").exists():
        raise NotAViewDirectory(f"{path} is not a RocksDB directory: refusing to wipe it")
    db = Rdict(str(path), Options(raw_mode=True), access_type=AccessType.read_only())
    try:
        is_view = db.get(VIEW_MARKER) is not None
    finally:
        db.close()
    if not is_view:
        raise NotAViewDirectory(f"{path} is not a view (an embedded store?): refusing to wipe it")
    shutil.rmtree(path)


# --- command line --------------------------------------------------------------------


def add_parser(commands: Any) -> None:
    """``metastore replay`` on the CLI's subparsers."""
    cmd = commands.add_parser("replay", help="rebuild a view from the changelog topics")
    cmd.add_argument("--kafka", required=True, help="bootstrap servers, HOST:PORT[,HOST:PORT]")
    cmd.add_argument(
        "--topic-prefix",
        "--prefix",
        dest="prefix",
        default="metastore",
        help="topic prefix (default metastore), as the pipeline jobs name it",
    )
    cmd.add_argument("--partitions", type=integer, default=12, help="partitions per topic")
    cmd.add_argument("--data-dir", required=True, help="the view's RocksDB directory")
    cmd.add_argument("--fresh", action="store_true", help="wipe the view and replay from 0")
    cmd.add_argument("--idle", type=decimal, default=1.0, help="idle window in seconds (1)")
    cmd.add_argument("--timeout", type=decimal, default=600.0, help="give up after (600 s)")
    cmd.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress (else: a line redrawn on a terminal, a plain line every 2 s elsewhere)",
    )
    cmd.add_argument(
        "--json", action="store_true", help="print the summary as one JSON object, last line"
    )


def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        config = ClusterConfig(
            args.kafka,
            prefix=args.prefix,
            partitions=args.partitions,
            kafka_properties=properties_from_env(os.environ),
            broker_profile=profile_from_env(os.environ),
        )
        check_range("--idle", args.idle, MIN_WAIT_S, MAX_IDLE_S)  # nan and inf too
        check_range("--timeout", args.timeout, MIN_WAIT_S, MAX_TIMEOUT_S)
    except ValueError as exc:
        print(f"metastore replay: invalid configuration: {exc}", file=sys.stderr)
        return 2
    try:
        summary = replay(
            config,
            args.data_dir,
            fresh=args.fresh,
            idle_s=args.idle,
            timeout_s=args.timeout,
            progress=not args.no_progress,
        )
    except (Unreachable, NotAViewDirectory) as exc:  # bad input, like the jobs'
        print(f"metastore replay: {exc}", file=sys.stderr)
        return 2
    except MetastoreError as exc:
        print(f"metastore replay: {exc}", file=sys.stderr)
        return 3
    except KafkaException as exc:  # e.g. a Kafka property librdkafka refuses
        print(f"metastore replay: Kafka client: {exc} ({config.connection()})", file=sys.stderr)
        return 3
    print(summary.render(), file=out)
    if args.json:
        print(json.dumps(summary.to_json()), file=out)
    return 0
