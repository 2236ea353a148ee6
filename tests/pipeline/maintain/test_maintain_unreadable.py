"""``metastore maintain`` when a client-written manifest list or manifest cannot be
read: the run ends with the file named and exit 1, never a Spark traceback; while a
live snapshot's file is unreadable nothing is deleted anywhere (what it references is
unknown), and once it is readable again the next run deletes as before. Files are
read within ``METASTORE_MAX_METADATA_FILE_BYTES``: a FIFO or an oversized file is
refused before it is read.

Before, one table's missing manifest list ended every run of the store, whatever its
scope, in a ``Py4JJavaError``; a FIFO held a Spark task forever.

A node of its own: maintain reads every table of the store, so these tables would
stop the other modules' runs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyiceberg.table import Table
from pyspark.sql import SparkSession

from tests.pipeline.maintain.test_maintain import (
    AGE,
    Lake,
    appended,
    ids,
    local,
    make_old,
    rows,
    running_lake,
    snapshot_files,
)

SMALL = 64 * 1024  # the bound of these runs, the least the setting takes


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    with running_lake(tmp_path_factory.mktemp("maintain-unreadable")) as lake:
        yield lake


def aged_table(lake: Lake, catalog: str) -> Table:
    """Two appends and an overwrite, every snapshot but the current one older than the
    table's maximum age, each file old enough to be an orphan once unreferenced."""
    client = lake.catalog(catalog)
    client.create_namespace("ns")
    table = appended(client, "ns.t", 2, **{AGE: "1"})
    table.overwrite(rows(9))
    loaded: Table = client.load_table("ns.t")
    for path in local(loaded.metadata.location).rglob("*"):
        make_old(path)
    return loaded


def test_an_unreadable_live_manifest_list_stops_deletion_until_it_is_readable(
    lake: Lake, spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = aged_table(lake, "good")
    before = snapshot_files(good)
    orphan = local(good.metadata.location) / "data" / "orphan.parquet"
    orphan.write_bytes(b"old and unreferenced")
    make_old(orphan)
    other = lake.catalog("other")
    other.create_namespace("ns")
    victim = appended(other, "ns.t", 1)
    manifest_list = local(victim.metadata.snapshots[-1].manifest_list)
    aside = manifest_list.with_name("aside.avro")
    manifest_list.rename(aside)
    try:  # another catalog's table: maintain reads every table of the store
        ran = lake.maintain(spark, tmp_path / "blocked", "--catalog", "good")
    finally:
        aside.rename(manifest_list)
    err = capsys.readouterr().err
    assert ran.status == 1, ran.stdout
    summary = ran.summary
    assert summary["unreadable"] == 1 and summary["deletion_blocked"] is True
    # the expiry itself is a commit, not a deletion: all but the current snapshot
    assert summary["snapshots_expired"] == len(good.metadata.snapshots) - 1 >= 2
    assert summary["files_deleted"] == 0 and summary["orphans_deleted"] == 0
    assert f"maintain: unreadable: file://{manifest_list} (a live snapshot needs it)" in err
    assert "FileNotFoundError" in err and "no file was deleted" in err
    assert "Traceback" not in err and "Py4J" not in err
    assert all(p.exists() for p in before) and orphan.exists()
    assert "no file deleted" in ran.stdout

    ran = lake.maintain(spark, tmp_path / "after", "--catalog", "good")
    assert ran.status == 0, ran.stdout
    assert ran.summary["unreadable"] == 0 and ran.summary["deletion_blocked"] is False
    # the expired snapshots' files are orphans now, old enough to go
    after = lake.clients["good"].load_table("ns.t")
    needed = snapshot_files(after)
    assert not orphan.exists()
    assert not any(p.exists() for p in before - needed)
    assert all(p.exists() for p in needed)
    assert ids(after) == [9]
    assert ids(lake.clients["other"].load_table("ns.t")) == [0]


@pytest.mark.parametrize("kind", ["fifo", "oversized"])
def test_a_manifest_is_read_within_the_bound(
    lake: Lake,
    spark: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
) -> None:
    monkeypatch.setenv("METASTORE_MAX_METADATA_FILE_BYTES", str(SMALL))
    client = lake.catalog(f"bound-{kind}")
    client.create_namespace("ns")
    table = appended(client, "ns.t", 1)
    manifest = local(table.inspect.manifests()["path"][0].as_py())
    manifest.unlink()
    if kind == "fifo":
        os.mkfifo(manifest)  # a reader would wait for a writer forever
    else:
        with manifest.open("wb") as sparse:
            sparse.truncate(3 * 1024**3)
    try:
        ran = lake.maintain(spark, tmp_path, "--catalog", f"bound-{kind}")
    finally:
        manifest.unlink()  # the other tests' runs read every table of the store
        client.purge_table("ns.t")
    err = capsys.readouterr().err
    assert ran.status == 1, ran.stdout
    assert ran.summary["unreadable"] == 1 and ran.summary["deletion_blocked"] is True
    line = next(x for x in err.splitlines() if x.startswith("maintain: unreadable: "))
    assert f"file://{manifest} (a live snapshot needs it): BadRequest: manifest " in line
    if kind == "fifo":
        assert "is not a regular file" in line
    else:
        assert f"is larger than {SMALL:,} bytes (METASTORE_MAX_METADATA_FILE_BYTES)" in line


def test_an_unreadable_expired_manifest_list_is_reported_and_deletion_goes_on(
    lake: Lake, spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = aged_table(lake, "expiring")
    first = local(table.metadata.snapshots[0].manifest_list)
    first.write_bytes(b"not avro")
    make_old(first)
    ran = lake.maintain(spark, tmp_path, "--catalog", "expiring")
    err = capsys.readouterr().err
    assert ran.status == 1, ran.stdout
    assert ran.summary["unreadable"] == 1 and ran.summary["deletion_blocked"] is False
    assert ran.summary["files_deleted"] > 0
    assert f"maintain: unreadable: file://{first} (an expired snapshot's): " in err
    assert not first.exists()  # an expired snapshot's list, itself unneeded
    assert ids(lake.clients["expiring"].load_table("ns.t")) == [9]


def test_a_bad_bound_is_one_line_and_exit_2(
    lake: Lake,
    spark: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("METASTORE_MAX_METADATA_FILE_BYTES", "64MiB")
    ran = lake.maintain(spark, tmp_path, "--catalog", "good")
    assert ran.status == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        "metastore maintain: METASTORE_MAX_METADATA_FILE_BYTES: cannot parse '64MiB' as int"
    )
