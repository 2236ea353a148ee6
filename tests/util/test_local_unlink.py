"""Local deletions below a folder opened once, following no link below it: whatever is
swapped in meanwhile, nothing outside the folder is deleted."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from metastore.util.local_unlink import LinkOnTheWay, LocalRoot


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    table = tmp_path / "wh" / "ns" / "t"
    (table / "data" / "part=1").mkdir(parents=True)
    (table / "data" / "part=1" / "f.parquet").write_bytes(b"own")
    victim = tmp_path / "wh" / "ns" / "v" / "data"
    victim.mkdir(parents=True)
    (victim / "f.parquet").write_bytes(b"victim")
    return table, victim


def test_a_file_below_the_folder_is_deleted_once(tmp_path: Path) -> None:
    table, _ = _tree(tmp_path)
    target = table / "data" / "part=1" / "f.parquet"
    with LocalRoot(str(table)) as root:
        assert root.unlink(str(target)) is True
        assert not target.exists()
        assert root.unlink(str(target)) is False  # gone already


def test_a_folder_on_the_way_swapped_for_a_link_refuses_the_deletion(tmp_path: Path) -> None:
    table, victim = _tree(tmp_path)
    with LocalRoot(str(table)) as root:
        (table / "data" / "part=1" / "f.parquet").unlink()
        (table / "data" / "part=1").rmdir()
        (table / "data" / "part=1").symlink_to(victim)  # after the folder was opened
        with pytest.raises(LinkOnTheWay):
            root.unlink(str(table / "data" / "part=1" / "f.parquet"))
    assert (victim / "f.parquet").read_bytes() == b"victim"


def test_a_link_in_the_last_place_is_removed_itself(tmp_path: Path) -> None:
    table, victim = _tree(tmp_path)
    link = table / "data" / "link.parquet"
    link.symlink_to(victim / "f.parquet")
    with LocalRoot(str(table)) as root:
        assert root.unlink(str(link)) is True
    assert not os.path.lexists(link)
    assert (victim / "f.parquet").read_bytes() == b"victim"


def test_the_folder_itself_swapped_after_it_was_opened_is_not_followed(tmp_path: Path) -> None:
    table, victim = _tree(tmp_path)
    moved = tmp_path / "wh" / "ns" / "moved"
    with LocalRoot(str(table)) as root:
        table.rename(moved)
        table.symlink_to(victim.parent)  # the table's path now leads to the victim's
        (victim.parent / "data" / "part=1").mkdir()
        (victim.parent / "data" / "part=1" / "f.parquet").write_bytes(b"victim's too")
        assert root.unlink(str(table / "data" / "part=1" / "f.parquet")) is True
    assert not (moved / "data" / "part=1" / "f.parquet").exists()  # the one opened
    assert (victim / "part=1" / "f.parquet").read_bytes() == b"victim's too"


@pytest.mark.parametrize("below", ["../v/data/f.parquet", "data/../../v/data/f.parquet", ""])
def test_a_path_not_below_the_folder_is_refused(tmp_path: Path, below: str) -> None:
    table, victim = _tree(tmp_path)
    with LocalRoot(str(table)) as root, pytest.raises(ValueError, match="not below"):
        root.unlink(os.path.join(str(table), below))
    assert (victim / "f.parquet").exists()


def test_a_folder_that_is_not_there_has_nothing_to_delete(tmp_path: Path) -> None:
    with LocalRoot(str(tmp_path / "never")) as root:
        assert root.unlink(str(tmp_path / "never" / "f.parquet")) is False
