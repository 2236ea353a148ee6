"""The catalogs the PyIceberg benchmark compares, each a context manager yielding one.

- ``metastore``: an embedded node (child process, fsync on) through ``RestCatalog``;
- ``metastore-pinned``: the same, its interpreter threads pinned to the last CPU this
  process may use (``METASTORE_PIN_CPU``), as a node with a CPU to itself would run;
- ``sql-sqlite``: PyIceberg's ``SqlCatalog`` on a SQLite file;
- ``sql-postgres``: ``SqlCatalog`` on PostgreSQL from Debian's ``postgresql`` package
  (15 on bookworm), a private cluster (``initdb``) started on a loopback port in a temp
  directory and stopped with it (``ensure_postgres`` installs the package with apt-get
  when missing and running as root, or says why it cannot).

Every backend writes its table files to a local ``file://`` warehouse under ``root``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from pathlib import Path

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import RestCatalog

from bench.load import last_cpu, pin_env
from harness.node import NodeProcess
from harness.process import Child, free_port

PG_ROOT = Path("/usr/lib/postgresql")  # Debian's: one <major version>/bin per installed one


def pg_bin() -> Path | None:
    """The newest installed PostgreSQL's programs (``initdb``, ``pg_ctl``), if any."""
    found = [p.parent for p in PG_ROOT.glob("*/bin/initdb")]
    return max(found, key=lambda p: int(p.parent.name), default=None) if found else None


@contextmanager
def metastore_backend(root: Path, pin: int | None = None) -> Iterator[Catalog]:
    """A node, pinned to CPU ``pin`` if given, never otherwise (whatever the environment
    of this process says)."""
    env = pin_env(pin)
    node = NodeProcess(root / "node" / "data", log_path=root / "node.log", env=env)
    with node:
        catalog = RestCatalog("bench", uri=node.url)
        try:
            yield catalog
        finally:
            catalog.close()


def metastore_pinned_backend(root: Path) -> AbstractContextManager[Catalog]:
    cpu = last_cpu()
    if cpu is None:
        raise RuntimeError("pinning needs Linux (sched_setaffinity)")
    return metastore_backend(root, cpu)


@contextmanager
def sqlite_backend(root: Path) -> Iterator[Catalog]:
    from pyiceberg.catalog.sql import SqlCatalog

    warehouse = root / "sqlite-warehouse"
    warehouse.mkdir(parents=True)
    yield SqlCatalog("bench", uri=f"sqlite:///{root / 'catalog.db'}", warehouse=warehouse.as_uri())


def _as_postgres(args: list[str]) -> list[str]:
    """``args`` run as the ``postgres`` user when we are root (PostgreSQL refuses root);
    ``setpriv`` execs the program, so the child's PID is the program's own."""
    if os.geteuid() != 0:
        return args
    return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--", *args]


def ensure_postgres() -> str | None:
    """None if PostgreSQL is usable, else why not."""
    if pg_bin() is not None:
        return None
    if os.geteuid() != 0:
        return "PostgreSQL is not installed and installing it needs root"
    print("  installing postgresql (apt-get)", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "postgresql"],
    ):
        if subprocess.run(command, env=env, check=False).returncode != 0:
            return f"{' '.join(command)} failed"
    return None if pg_bin() is not None else f"postgresql installed no initdb under {PG_ROOT}"


@contextmanager
def postgres_backend(root: Path) -> Iterator[Catalog]:
    from pyiceberg.catalog.sql import SqlCatalog

    with PostgresProcess(root / "pg") as server:
        warehouse = root / "pg-warehouse"
        warehouse.mkdir()
        uri = f"postgresql+psycopg2://postgres@127.0.0.1:{server.port}/postgres"
        catalog = SqlCatalog("bench", uri=uri, warehouse=warehouse.as_uri())
        try:
            yield catalog
        finally:
            catalog.engine.dispose()


class PostgresProcess(Child):
    """A private PostgreSQL cluster: ``initdb`` in ``data``, the server a child process on
    a free loopback port (trust authentication, user ``postgres``), stopped by PID with a
    fast shutdown (SIGINT), killed if it does not stop in time."""

    def __init__(self, data: Path) -> None:
        programs = pg_bin()
        assert programs is not None, "ensure_postgres() first"
        self.programs = programs
        self.data = data
        self.port = free_port()

    def __enter__(self) -> PostgresProcess:
        self.data.mkdir(parents=True)
        if os.geteuid() == 0:
            shutil.chown(self.data.parent, "postgres")
            shutil.chown(self.data, "postgres")
        initdb = [str(self.programs / "initdb"), "-D", str(self.data), "-A", "trust"]
        subprocess.run(_as_postgres([*initdb, "-U", "postgres"]), check=True, capture_output=True)
        server = [str(self.programs / "postgres"), "-D", str(self.data), "-p", str(self.port)]
        server += ["-k", str(self.data), "-c", "listen_addresses=127.0.0.1"]
        with (self.data.parent / "pg.log").open("ab") as log:
            self.proc = subprocess.Popen(_as_postgres(server), stdout=log, stderr=subprocess.STDOUT)
        try:
            self._wait_ready(30.0)
        except BaseException:
            self.kill()
            raise
        return self

    def _wait_ready(self, timeout: float) -> None:
        ready = [str(self.programs / "pg_isready"), "-q", "-h", "127.0.0.1"]
        ready += ["-p", str(self.port), "-U", "postgres"]
        deadline = time.monotonic() + timeout
        while subprocess.run(ready, check=False).returncode != 0:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited with {self.proc.returncode} (see pg.log)")
            if time.monotonic() > deadline:
                raise TimeoutError(f"postgres not ready on port {self.port} in {timeout} s")
            time.sleep(0.1)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGINT)  # fast shutdown
            with suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=30.0)
        self.kill()


Backend = Callable[[Path], AbstractContextManager[Catalog]]
BACKENDS: dict[str, Backend] = {
    "metastore": metastore_backend,
    "metastore-pinned": metastore_pinned_backend,
    "sql-sqlite": sqlite_backend,
    "sql-postgres": postgres_backend,
}
