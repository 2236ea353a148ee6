"""Sorted SST files: what a rebuild task writes, and their ingestion into a new view.

RocksDB builds a database fastest from files it did not have to write itself: a
task writes its partition's keys, sorted, into one SST file (``SstFileWriter``,
no write-ahead log, no memtable, no compaction), and the driver hands every file
to RocksDB in one call (``ingest_external_file``), which moves them into the
database's directory as they are. The files of different partitions may
interleave in key order (their keys never collide: a catalog lives in one
partition), so RocksDB places them in level 0 and compacts them later, like any
write.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from rocksdict import IngestExternalFileOptions, Options, Rdict, SstFileWriter


def write_sst(path: Path, rows: Iterable[tuple[bytes, bytes]]) -> int:
    """Write ``rows`` (strictly ascending keys) to a new SST file at ``path``; the
    number of rows. No file is left for no rows (RocksDB refuses an empty one)."""
    writer: SstFileWriter | None = None
    count = 0
    try:
        for key, value in rows:
            if writer is None:
                path.parent.mkdir(parents=True, exist_ok=True)
                writer = SstFileWriter(Options(raw_mode=True))
                writer.open(str(path))
            writer[key] = value
            count += 1
        if writer is not None:
            writer.finish()
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return count


def ingest(database: Path, files: Sequence[Path]) -> None:
    """Move ``files`` into the (closed, existing) RocksDB database at ``database``."""
    if not files:
        return
    options = IngestExternalFileOptions()
    options.set_move_files(True)  # a rename on the same file system, else a copy
    db = Rdict(str(database), Options(raw_mode=True))
    try:
        db.ingest_external_file([str(f) for f in files], options)
    finally:
        db.close()
