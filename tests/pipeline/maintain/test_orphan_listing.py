"""The orphan pass's listing of a local table folder: regular files only, never
through a symbolic link, so links a client planted (back to the folder, out to the
machine's root) neither widen the listing nor make it endless.

Before, pyarrow's recursive listing followed links: two links back to the folder made
it exponential (still running after 30 s for 3 files) and a link to ``/`` listed the
whole machine.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from pyarrow import fs

from metastore.pipeline.maintain.orphans import Root, list_root, walk_regular_files


def tree(root: Path) -> dict[str, int]:
    """Three regular files (path -> size) below ``root``."""
    files = {
        root / "data" / "a.parquet": 11,
        root / "data" / "part=1" / "b.parquet": 22,
        root / "metadata" / "00000-x.metadata.json": 33,
    }
    for path, size in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * size)
    return {str(p): size for p, size in files.items()}


def test_links_are_not_followed_and_only_regular_files_are_listed(tmp_path: Path) -> None:
    root = tmp_path / "table"
    files = tree(root)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "secret.parquet").write_bytes(b"not the table's")
    (root / "data" / "loop").symlink_to(root)
    (root / "data" / "part=1" / "loop2").symlink_to(root)
    (root / "data" / "out").symlink_to(outside)
    (root / "data" / "machine").symlink_to("/")
    (root / "data" / "file-link.parquet").symlink_to(outside / "secret.parquet")
    os.mkfifo(root / "data" / "fifo.parquet")

    walked = {path: size for path, size, _ in walk_regular_files(str(root))}
    assert walked == files

    now_ms = int(time.time() * 1000)
    listed = list(list_root(Root(root.as_uri(), {}), now_ms + 60_000))
    assert {row[1] for row in listed} == {f"file://{p}" for p in files}
    assert all(row[0] == root.as_uri() and row[3] == files[row[1][7:]] for row in listed)
    assert all(abs(row[4] - now_ms) < 60_000 for row in listed)
    assert list(list_root(Root(root.as_uri(), {}), now_ms - 60_000)) == []  # all too young


def test_the_walk_lists_what_pyarrow_lists_where_there_are_no_links(tmp_path: Path) -> None:
    root = tmp_path / "table"
    tree(root)
    old = time.time() - 3600
    os.utime(root / "data" / "a.parquet", (old, old))
    selector = fs.FileSelector(str(root), recursive=True)
    theirs = {
        (i.path, i.size, int(i.mtime.timestamp() * 1000))
        for i in fs.LocalFileSystem().get_file_info(selector)
        if i.type == fs.FileType.File
    }
    assert set(walk_regular_files(str(root))) == theirs


def test_a_root_that_is_not_there_lists_nothing(tmp_path: Path) -> None:
    assert list(walk_regular_files(str(tmp_path / "missing"))) == []
    assert list(list_root(Root((tmp_path / "missing").as_uri(), {}), 2**62)) == []
