"""The command-line parsers of the pipeline jobs (no Spark import: ``metastore serve``
starts without loading it)."""

from __future__ import annotations

from typing import Any

from metastore.pipeline.options import add_common
from metastore.util.setting_rules import decimal, integer

DEFAULT_NAMESPACE = "metastore_export"  # of the registered export tables
DEFAULT_OLDER_THAN_S = 3 * 24 * 3600  # orphan files younger than this are kept (maintain)


def add_parsers(commands: Any) -> None:
    audit = commands.add_parser(
        "audit",
        help="report references that dangle (exit 1 if any do)",
        description="Check that every reference of a catalog, tenant or everything resolves.",
    )
    add_common(audit)
    export = commands.add_parser(
        "export",
        help="state and commit history to Parquet or Iceberg tables",
        description="Export namespaces, tables, views, principals, grants and commits.",
    )
    add_common(export)
    export.add_argument(
        "--register",
        nargs="?",
        const="",
        metavar="WAREHOUSE",
        help="also register the export as Iceberg tables through --url, in the catalog "
        "WAREHOUSE names (catalog or tenant/catalog; default: the caller's default catalog)",
    )
    export.add_argument(
        "--register-namespace",
        default=DEFAULT_NAMESPACE,
        help=f"namespace of the registered tables (default {DEFAULT_NAMESPACE})",
    )
    rebuild = commands.add_parser(
        "rebuild",
        help="build a node's view from the changelog, in parallel",
        description="Apply the changelog topics one Spark task per partition into a fresh "
        "view directory (--out) a node can start on (serve --restore-from) to read only "
        "the tail.",
    )
    add_common(rebuild)
    rebuild.add_argument(
        "--idle",
        type=decimal,
        default=1.0,
        help="with --kafka: a partition is read once idle this long at its high watermark "
        "(seconds, default 1)",
    )
    rebuild.add_argument(
        "--timeout", type=decimal, default=600.0, help="a partition gives up after (600 s)"
    )
    gc = commands.add_parser(
        "gc",
        help="collect garbage: mark unreachable objects, sweep them",
        description="Mark the objects no ref, recent HEAD or retained commit reaches; after "
        "the grace period, have the node delete those still unreachable (and delete "
        "orphaned metadata files under the tables' locations).",
    )
    add_common(gc)
    gc.add_argument(
        "--grace", type=decimal, default=3 * 24 * 3600.0, metavar="SECONDS",
        help="only objects older than this are candidates; the sweep waits it out after "
        "the mark (default 3 days)",
    )  # fmt: skip
    gc.add_argument(
        "--retention", type=decimal, default=7 * 24 * 3600.0, metavar="SECONDS",
        help="history kept for ?at= reads and ref resets (default 7 days)",
    )  # fmt: skip
    gc.add_argument("--phase", choices=("mark", "sweep", "both"), default="both")
    gc.add_argument(
        "--dry-run", action="store_true", help="list what would be deleted, delete nothing"
    )
    gc.add_argument(
        "--lease-seconds", type=integer, default=60, help="of the task lease (default 60)"
    )
    gc.add_argument(
        "--node", metavar="URL", help="with --kafka or --data-dir: the node that sweeps"
    )
    maintain = commands.add_parser(
        "maintain",
        help="expire snapshots, delete unneeded and orphan files",
        description="Expire snapshots by each table's retention properties (defaults on its "
        "namespace or catalog), delete the files no snapshot needs any more, and remove "
        "orphan files below the tables' locations. Commits through --url.",
    )
    add_common(maintain)
    maintain.add_argument(
        "--dry-run",
        action="store_true",
        help="list what would be expired and deleted; change nothing",
    )
    maintain.add_argument(
        "--older-than",
        type=decimal,
        default=DEFAULT_OLDER_THAN_S,
        metavar="SECONDS",
        help="orphan files must be older than this (default 3 days)",
    )
