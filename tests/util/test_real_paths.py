"""A path's real path resolved by the kernel answers as ``os.path.realpath`` does
(``metastore.util.real_paths``): over a tree of folders, files and symlinks of every kind,
for paths that exist, that do not yet, and that cannot."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from metastore.util import real_paths
from metastore.util.real_paths import real_path


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """Folders, a file, and symlinks: to a folder (absolute and relative), up and out of
    the tree, to a file, dangling, chained, and in a loop."""
    root = tmp_path / "root"
    (root / "wh" / "t" / "metadata").mkdir(parents=True)
    (root / "wh" / "t" / "metadata" / "v1.json").write_text("{}")
    (tmp_path / "outside" / "data").mkdir(parents=True)
    (root / "wh" / "abs").symlink_to(tmp_path / "outside")
    (root / "wh" / "rel").symlink_to("t/metadata")
    (root / "wh" / "up").symlink_to("../..")
    (root / "wh" / "file").symlink_to("t/metadata/v1.json")
    (root / "wh" / "dangling").symlink_to("nowhere/at/all")
    (root / "wh" / "chain").symlink_to("rel")
    (root / "wh" / "loop1").symlink_to("loop2")
    (root / "wh" / "loop2").symlink_to("loop1")
    return root


TAILS = (
    "",
    "/",
    "/wh",
    "/wh/t/metadata",
    "/wh/t/metadata/",
    "/wh/t/metadata/v1.json",
    "/wh/t/metadata/v1.json/under-a-file",
    "/wh/t/metadata/new.json",
    "/wh/t/new/deeper/new.json",
    "/wh/abs",
    "/wh/abs/data",
    "/wh/abs/data/new.json",
    "/wh/abs/missing/new.json",
    "/wh/rel",
    "/wh/rel/v1.json",
    "/wh/rel/new.json",
    "/wh/up",
    "/wh/up/outside/data",
    "/wh/up/outside/new",
    "/wh/file",
    "/wh/dangling",
    "/wh/dangling/new.json",
    "/wh/chain/v1.json",
    "/wh/loop1",
    "/wh/loop1/new.json",
    "/wh/./t//metadata",
    "/wh/t/../t/metadata/new.json",
    "/wh/missing/../t",
    "/wh/rel/../metadata",
)


@pytest.mark.parametrize("tail", TAILS)
def test_the_answer_is_os_path_realpaths(tree: Path, tail: str) -> None:
    path = f"{tree}{tail}"
    assert real_path(path) == os.path.realpath(path)


def test_every_pair_of_segments_answers_as_realpath(tree: Path) -> None:
    """Each name of the tree followed by each name (or a new one): symlinks met halfway,
    after a missing segment, after a file."""
    names = ["wh", "t", "metadata", "v1.json", "abs", "rel", "up", "file", "dangling"]
    names += ["chain", "loop1", "outside", "data", "new", "..", "."]
    for first, second, third in itertools.product(names, names, ["", "x.json"]):
        path = f"{tree}/wh/{first}/{second}" + (f"/{third}" if third else "")
        assert real_path(path) == os.path.realpath(path), path


def test_a_relative_path_or_no_kernel_naming_takes_realpath(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tree)
    assert real_path("wh/rel/v1.json") == os.path.realpath("wh/rel/v1.json")
    monkeypatch.setattr(real_paths, "_O_PATH", 0)
    assert real_path(f"{tree}/wh/abs/data") == os.path.realpath(f"{tree}/wh/abs/data")


def test_a_file_deleted_while_open_is_not_named_by_the_kernel(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel's name for an unlinked file ends in " (deleted)": never an answer."""
    path = f"{tree}/wh/t/metadata/v1.json"
    readlink = os.readlink

    def named_deleted(link: str) -> str:
        return f"{path} (deleted)" if link.startswith("/proc/self/fd/") else readlink(link)

    monkeypatch.setattr(os, "readlink", named_deleted)
    assert real_path(path) == os.path.realpath(path)
