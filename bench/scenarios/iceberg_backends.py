"""The catalogs the PyIceberg benchmark compares, each a context manager yielding one.

- ``metastore``: an embedded node (child process, fsync on) through ``RestCatalog``;
- ``sql-sqlite``: PyIceberg's ``SqlCatalog`` on a SQLite file;
- ``sql-postgres``: ``SqlCatalog`` on PostgreSQL 15 from Debian's packages, started on
  a loopback port in a temp directory (``ensure_postgres`` installs it with apt-get
  when missing and running as root, or says why it cannot).

Every backend writes its table files to a local ``file://`` warehouse under ``root``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import RestCatalog

from harness.node import NodeProcess
from harness.process import free_port

PG_BIN = Path("/usr/lib/postgresql/15/bin")


@contextmanager
def metastore_backend(root: Path) -> Iterator[Catalog]:
    node = NodeProcess(root / "node" / "data", log_path=root / "node.log")
    with node:
        catalog = RestCatalog("bench", uri=node.url)
        try:
            yield catalog
        finally:
            catalog.close()


@contextmanager
def sqlite_backend(root: Path) -> Iterator[Catalog]:
    from pyiceberg.catalog.sql import SqlCatalog

    warehouse = root / "sqlite-warehouse"
    warehouse.mkdir(parents=True)
    yield SqlCatalog("bench", uri=f"sqlite:///{root / 'catalog.db'}", warehouse=warehouse.as_uri())


def _as_postgres(args: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


def ensure_postgres() -> str | None:
    """None if PostgreSQL 15 is usable, else why not."""
    if (PG_BIN / "initdb").exists():
        return None
    if os.geteuid() != 0:
        return "PostgreSQL 15 is not installed and installing it needs root"
    print("  installing postgresql-15 (apt-get)", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "postgresql-15"],
    ):
        if subprocess.run(command, env=env, check=False).returncode != 0:
            return f"{' '.join(command)} failed"
    return None if (PG_BIN / "initdb").exists() else "postgresql-15 installed no initdb"


@contextmanager
def postgres_backend(root: Path) -> Iterator[Catalog]:
    from pyiceberg.catalog.sql import SqlCatalog

    data = root / "pg"
    data.mkdir(parents=True)
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(data, "postgres")
    port = free_port()

    def run(*command: str) -> None:
        subprocess.run(_as_postgres(list(command)), check=True, capture_output=True)

    run(str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres")
    options = f"-p {port} -k {data} -c listen_addresses=127.0.0.1"
    run(
        str(PG_BIN / "pg_ctl"),
        "-D",
        str(data),
        "-o",
        options,
        "-l",
        str(data / "log"),
        "-w",
        "start",
    )
    try:
        warehouse = root / "pg-warehouse"
        warehouse.mkdir()
        uri = f"postgresql+psycopg2://postgres@127.0.0.1:{port}/postgres"
        catalog = SqlCatalog("bench", uri=uri, warehouse=warehouse.as_uri())
        try:
            yield catalog
        finally:
            catalog.engine.dispose()
    finally:
        run(str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")


Backend = Callable[[Path], AbstractContextManager[Catalog]]
BACKENDS: dict[str, Backend] = {
    "metastore": metastore_backend,
    "sql-sqlite": sqlite_backend,
    "sql-postgres": postgres_backend,
}
