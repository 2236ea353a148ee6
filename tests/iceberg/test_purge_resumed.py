"""A purge that a crash cuts short is finished later, and loses track of no file.

The drop's commit moves a purged table to its purging record, which holds the location
until the purge has ended (``metastore.engine.dropped``); the catalog's next expiry (the last
step of every ``metastore gc`` run) purges every such record again. A purge deletes a
file only after every file it references (``metastore.iceberg.purge``), so the second
run still reaches every file left. Before, a node killed in the middle of a purge left
the rest of the table's files for good: the drop had committed, and nothing looked
below the location of a table that no longer existed.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlparse

import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import BadRequestError, NoSuchTableError
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.table import Table

from harness.node import NodeProcess
from harness.s3 import KEYS, S3Process
from metastore.iceberg.purge import Purge
from metastore.util.local_unlink import LocalRoot
from tests.iceberg.support import SCHEMA, SECRETS_ENV, TENANT, S3Lake, rows


class Crash(BaseException):
    """The process dying mid-purge: nothing in the purge catches it."""


class DiesAfter(PyArrowFileIO):
    """A local FileIO, and the folder a purge deletes below (``local_unlink``), whose
    process dies after ``deletions`` deletions through either."""

    def __init__(self, deletions: int) -> None:
        super().__init__()
        self.left = deletions

    def itself(self, _: str) -> FileIO:
        return self

    def root(self, path: str) -> LocalRoot:
        return _DyingRoot(path, self)

    def dying(self) -> None:
        if self.left == 0:
            raise Crash
        self.left -= 1

    def delete(self, location: object) -> None:
        self.dying()
        super().delete(location)  # type: ignore[arg-type]


class _DyingRoot(LocalRoot):
    def __init__(self, path: str, process: DiesAfter) -> None:
        super().__init__(path)
        self._process = process

    def unlink(self, path: str) -> bool:
        self._process.dying()
        return super().unlink(path)


def _files(location: str) -> set[Path]:
    return {p for p in Path(urlparse(location).path).rglob("*") if p.is_file()}


def _table(catalog: RestCatalog, name: str) -> Table:
    """A table of three appends and a delete: data files, manifests (one rewritten),
    manifest lists and metadata files."""
    table = catalog.create_table(("db", name), SCHEMA)
    for i in range(3):
        table.append(rows([i]))
    table.delete("id == 0")
    return catalog.load_table(("db", name))


def test_a_purge_run_again_after_any_number_of_deletions_deletes_every_file(
    catalog: RestCatalog,
) -> None:
    """Cut a purge short after each number of deletions in turn and run it again from
    the same metadata (as the expiry does, from the table's stored metadata): every
    file is gone, and none is a failure. With manifest lists deleted before the files
    they name, as before, the second run could not read them and left their manifests
    and data files."""
    catalog.create_namespace(("db",))
    count = len(_files(_table(catalog, "sample").metadata.location))
    for cut in range(count):
        table = _table(catalog, f"t{cut}")
        before = _files(table.metadata.location)
        assert len(before) == count
        dying = DiesAfter(cut)
        with pytest.raises(Crash):
            Purge(table.metadata, table.metadata_location, (), dying.itself, local=dying.root).run()
        assert len(_files(table.metadata.location)) == count - cut
        again = Purge(table.metadata, table.metadata_location, (), lambda _: PyArrowFileIO())
        report = again.run()
        assert _files(table.metadata.location) == set(), cut
        assert (report.failed, report.deleted) == (0, count - cut), (cut, report)


@pytest.fixture
def lake_root(tmp_path: Path) -> Path:
    return tmp_path


def _node(root: Path) -> NodeProcess:
    env = {SECRETS_ENV: json.dumps(KEYS.io_properties())}
    return NodeProcess(root / "data", log_path=root / "node.log", env=env)


def _objects(s3: S3Process, bucket: str, prefix: str) -> set[str]:
    """The objects under ``prefix`` (not the empty folder markers a deletion leaves)."""
    return {k for k in s3.keys_in(bucket, prefix) if not k.endswith("/")}


@pytest.mark.slow
def test_a_purge_cut_short_by_a_crash_is_finished_by_the_expiry(
    s3_server: S3Process, lake_root: Path
) -> None:
    """Kill the node (SIGSTOP as the first file goes, then SIGKILL) while it purges a
    table in an S3 bucket; start it again on the same data. The table is gone and its
    location stays held (a create there is a 400); the catalog's expiry finishes the
    purge: every object of the table is deleted, and the location is free."""
    bucket = s3_server.make_bucket(f"purge-{uuid.uuid4().hex[:12]}")
    first = _node(lake_root).start()
    try:
        name, prefix = S3Lake(first, s3_server, bucket).new_catalog()
        catalog = S3Lake(first, s3_server, bucket).client(name)
        catalog.create_namespace(("db",))
        table = catalog.create_table(("db", "big"), SCHEMA)
        for i in range(12):
            table.append(rows([i]))
        table = catalog.load_table(("db", "big"))
        location = table.metadata.location
        mine = f"{prefix}/db/big/"
        objects = _objects(s3_server, bucket, mine)
        metadata_key = urlparse(table.metadata_location).path.lstrip("/")
        failed: list[BaseException] = []

        def purge() -> None:
            try:
                requests.delete(
                    f"{first.url}/v1/{name}/namespaces/db/tables/big?purgeRequested=true",
                    timeout=60,
                )
            except requests.RequestException as exc:  # the node is killed under it
                failed.append(exc)

        dropping = threading.Thread(target=purge, daemon=True)
        dropping.start()
        deadline = time.monotonic() + 60
        while _objects(s3_server, bucket, mine) == objects:  # until its first deletion
            assert time.monotonic() < deadline, "the purge never began"
            assert dropping.is_alive(), "the drop ended before a deletion was seen"
        os.kill(first.pid, signal.SIGSTOP)  # the purge stops where it is
    finally:
        first.kill()
    left = _objects(s3_server, bucket, mine)
    assert metadata_key in left and 0 < len(left) < len(objects), (len(left), len(objects))

    second = _node(lake_root).start()
    try:
        catalog = S3Lake(second, s3_server, bucket).client(name)
        with pytest.raises(NoSuchTableError):
            catalog.load_table(("db", "big"))
        with pytest.raises(BadRequestError, match="being purged"):
            catalog.create_table(("db", "other"), SCHEMA, location=location)
        native = f"{second.url}/api/v1/tenants/{TENANT}/catalogs/{name}"
        listed = requests.get(f"{native}/namespaces/db/tables?include-dropped=true", timeout=30)
        assert listed.json()["dropped"] == []  # nothing to undrop
        expired = requests.post(f"{native}/gc/expire", json={}, timeout=120)
        assert expired.status_code == 200, expired.text
        assert expired.json()["collected"] == 1
        assert _objects(s3_server, bucket, mine) == set()
        assert requests.post(f"{native}/gc/expire", json={}, timeout=60).json()["collected"] == 0
        again = catalog.create_table(("db", "other"), SCHEMA, location=location)
        again.append(rows([7]))
        assert again.scan().to_arrow()["id"].to_pylist() == [7]
    finally:
        second.stop()
    assert "Traceback" not in (lake_root / "node.log").read_text(errors="replace")
