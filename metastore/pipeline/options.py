"""The command line every pipeline job shares, parsed into one validated value.

A job reads a running node (``--url``: an embedded node hands it a checkpoint of
its store, a cluster node its changelog and applied offsets), the changelog topics
directly (``--kafka`` with ``--topic-prefix`` and ``--partitions``), or a store
directory no node has open (``--data-dir``: a stopped embedded node's ``rocksdb``
directory, or a checkpoint). ``--tenant`` and ``--catalog`` narrow the scope;
``--out`` is where the job writes; ``--master`` is Spark's. With authentication
on, ``--token`` (or ``METASTORE_TOKEN``) is a bearer token, or ``--credential
ID:SECRET`` (or ``METASTORE_CREDENTIAL``) a service principal's client credentials
exchanged for one at the node's token endpoint; prefer the environment, which other
users of the machine cannot read off the process list.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from metastore.cluster.cluster_config import MAX_PARTITIONS
from metastore.pipeline.exits import JobError
from metastore.util.setting_rules import ConfigError, check_range, check_url, integer

SourceKind = Literal["url", "kafka", "data-dir"]
DEFAULT_TENANT = "default"
DEFAULT_MASTER = "local[*]"


def add_common(parser: argparse.ArgumentParser, env: Mapping[str, str] | None = None) -> None:
    """The options every job shares; defaults from ``env`` (the environment as it is
    when the parser is built, not when this module was imported)."""
    env = os.environ if env is None else env
    source = parser.add_argument_group("source (exactly one)")
    source.add_argument("--url", metavar="URL", help="a running node (embedded or cluster)")
    source.add_argument(
        "--kafka", metavar="BOOTSTRAP", help="the changelog topics' bootstrap servers"
    )
    source.add_argument(
        "--data-dir", metavar="DIR", help="a store no node has open (or a checkpoint)"
    )
    source.add_argument(
        "--topic-prefix",
        default=env.get("METASTORE_TOPIC_PREFIX", "metastore"),
        help="topics <prefix>.refs and <prefix>.objects (default metastore)",
    )
    source.add_argument("--partitions", type=integer, default=12, help="of the topics (default 12)")
    scope = parser.add_argument_group("scope (default: everything)")
    scope.add_argument("--tenant", metavar="T", help="one tenant")
    scope.add_argument(
        "--catalog", metavar="C", help=f"one catalog (of --tenant, default {DEFAULT_TENANT!r})"
    )
    run = parser.add_argument_group("run")
    run.add_argument("--out", metavar="DIR", help="where the job writes")
    run.add_argument(
        "--master", default=DEFAULT_MASTER, help=f"Spark master (default {DEFAULT_MASTER})"
    )
    run.add_argument(
        "--json", action="store_true", help="print the summary as one JSON object, last line"
    )
    run.add_argument("--no-progress", action="store_true", help="no periodic progress lines")
    auth = parser.add_argument_group("authentication (a node with auth on)")
    auth.add_argument(
        "--token", default=env.get("METASTORE_TOKEN"), help="bearer token (env METASTORE_TOKEN)"
    )
    auth.add_argument(
        "--credential",
        metavar="ID:SECRET",
        default=env.get("METASTORE_CREDENTIAL"),
        help="client credentials for the token endpoint (env METASTORE_CREDENTIAL)",
    )


@dataclass(frozen=True, slots=True)
class Scope:
    """Which catalogs a job covers: all, one tenant's, or one catalog."""

    tenant: str | None = None
    catalog: str | None = None

    def __post_init__(self) -> None:
        if self.catalog is not None and self.tenant is None:
            raise ValueError("a catalog scope names its tenant")

    def covers(self, tenant: str, catalog: str) -> bool:
        """Whether the catalog ``(tenant, catalog)`` (catalog "" = the tenant's own
        records) is in scope; one catalog's scope includes its tenant's records."""
        if self.tenant is not None and tenant != self.tenant:
            return False
        return self.catalog is None or catalog in ("", self.catalog)

    def describe(self) -> str:
        if self.tenant is None:
            return "everything"
        if self.catalog is None:
            return f"tenant {self.tenant!r}"
        return f"catalog {self.catalog!r} of tenant {self.tenant!r}"


def executor_python(master: str, env: Mapping[str, str] = os.environ) -> str:
    """The interpreter of the executors' Python workers: ``PYSPARK_PYTHON`` if set (a
    cluster whose hosts keep the package at another path), else this one. A local
    master runs its tasks on this machine, so there it must be an executable here: the
    job stops with one line instead of a failed task's traceback. A cluster's hosts are
    not this machine, and the path is theirs to check."""
    chosen = env.get("PYSPARK_PYTHON") or sys.executable
    if master.startswith("local") and shutil.which(chosen) is None:
        raise ValueError(
            f"PYSPARK_PYTHON: {chosen!r} is not an executable on this machine, where a "
            "local master runs the tasks"
        )
    return chosen


@dataclass(frozen=True, slots=True)
class JobOptions:
    source: SourceKind
    where: str  # the URL, the bootstrap servers or the directory
    topic_prefix: str
    partitions: int
    scope: Scope
    out: Path
    master: str
    json: bool
    progress: bool
    token: str | None
    credential: tuple[str, str] | None

    def __post_init__(self) -> None:
        if not 1 <= self.partitions <= MAX_PARTITIONS:
            raise ValueError(f"--partitions must be 1-{MAX_PARTITIONS}, not {self.partitions}")
        if self.source == "url":
            check_url("--url", self.where)  # one a client can be built on, or refused here
        if not self.master:
            raise ValueError("--master must name a Spark master")
        executor_python(self.master)

    def claim_out(self) -> Path:
        """Create ``out`` and mark it as a job's (``OUT_MARKER``); the directory, for its files."""
        self.out.mkdir(parents=True, exist_ok=True)
        marker = self.out / OUT_MARKER
        if not marker.exists():
            marker.write_text("written by metastore's jobs; a later run may replace files here\n")
        return self.out

    @classmethod
    def from_args(cls, args: argparse.Namespace, job: str) -> JobOptions:
        """The options of ``args``; ``JobError`` (exit 2) naming the first problem."""
        try:
            return cls._parse(args, job)
        except ValueError as exc:
            raise JobError(str(exc)) from None

    @classmethod
    def _parse(cls, args: argparse.Namespace, job: str) -> JobOptions:
        given: dict[SourceKind, Any] = {
            "url": args.url,
            "kafka": args.kafka,
            "data-dir": args.data_dir,
        }
        named = [(kind, value) for kind, value in given.items() if value]
        if len(named) != 1:
            raise ValueError("name exactly one source: --url, --kafka or --data-dir")
        source, where = named[0]
        tenant = args.tenant
        if args.catalog is not None and tenant is None:
            tenant = DEFAULT_TENANT
        credential = None
        if args.credential:
            client_id, sep, secret = args.credential.partition(":")
            if not sep or not client_id or not secret:
                raise ValueError("--credential must be ID:SECRET")
            credential = (client_id, secret)
        out = Path(args.out) if args.out else Path(f"metastore-{job}")
        try:
            if out.exists() and not out.is_dir():
                raise ValueError(f"--out {str(out)!r} is not a directory")
            if job != "rebuild":  # a rebuild's --out must be new or empty (its own check)
                check_out(out)
        except OSError as exc:  # a name too long for the file system, a denied directory
            raise ValueError(f"--out cannot be used: {exc.strerror}") from None
        return cls(
            source=source,
            where=str(where).rstrip("/") if source == "url" else str(where),
            topic_prefix=args.topic_prefix,
            partitions=args.partitions,
            scope=Scope(tenant, args.catalog),
            out=out,
            master=args.master,
            json=args.json,
            progress=not args.no_progress,
            token=args.token or None,
            credential=credential,
        )


# The file a job leaves in its --out: a later run may replace what is there, since a job
# replaces its own output by name (export's table folders, gc's marks, audit's report).
OUT_MARKER = ".metastore-job-output"


def check_out(out: Path) -> None:
    """``out`` is new, empty, or a directory a job wrote before: a mistyped ``--out`` (a
    home directory holding a ``tables`` folder) must not lose files to a job's output."""
    if out.is_dir() and not (out / OUT_MARKER).exists() and any(out.iterdir()):
        raise ValueError(
            f"--out {str(out)!r} holds files no metastore job wrote; a job replaces its own"
            " output there, so name a new or empty directory"
        )


MAX_AGE_S = 3650 * 86_400.0  # ten years: any longer grace or retention is a unit mistake


@contextmanager
def _refused_as_usage() -> Iterator[None]:
    """A setting rule's refusal, as the jobs' bad usage (exit 2, one line)."""
    try:
        yield
    except ConfigError as exc:
        raise JobError(str(exc)) from None


def check_seconds(flag: str, value: float, low: float, high: float) -> float:
    """A duration flag, finite and within ``[low, high]``. A bare ``value < 0`` test lets
    nan through (every comparison with it is false) to the arithmetic that decides what
    a job keeps and what it deletes."""
    with _refused_as_usage():
        check_range(flag, value, low, high)
    return value


def check_node_url(flag: str, url: str) -> str:
    """A node's ``http(s)://`` URL, refused as one line before a client is built on it
    (a malformed one would end in the HTTP library's traceback)."""
    with _refused_as_usage():
        check_url(flag, url)
    return url
