"""The one normalizer and containment rule for locations (``metastore.model.locations``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from metastore.errors import BadRequest
from metastore.model.locations import catalog_root, check_inside, is_inside, linked_below, normalize
from metastore.pipeline.gc.gc_files import OrphanFile, delete_file, orphan_metadata_files

ROOT = "file:///wh/default/c"


@pytest.mark.parametrize(
    ("given", "normalized"),
    [
        ("file:///wh/default/c/ns/t", "file:///wh/default/c/ns/t"),
        ("file:///wh/default/c/ns/t/", "file:///wh/default/c/ns/t"),
        ("file:///wh//default/./c/ns/x/../t", "file:///wh/default/c/ns/t"),
        ("/wh/default/c/ns/t", "file:///wh/default/c/ns/t"),
        ("file:/wh/default/c/ns/t", "file:///wh/default/c/ns/t"),
        ("FILE:///wh/default/c/t", "file:///wh/default/c/t"),
        ("s3://bucket/wh/a%20b", "s3://bucket/wh/a%20b"),
    ],
)
def test_normalize(given: str, normalized: str) -> None:
    assert str(normalize(given)) == normalized


@pytest.mark.parametrize(
    "given",
    [
        "",
        "relative/path",
        "file:relative",
        "file:///..",
        "file:///wh/%2e%2e/x",
        "file:///wh/%2E%2E/x",
        "file:///wh/%252e%252e/x",
        "file:///wh/a%2Fb",
        "file:///wh/a%5Cb",
        "file:///wh/a%00b",
        "file:///wh/a\\b",
        "file:///wh/a\nb",
        "file:///wh/a?b",
        "file:///wh/a#b",
    ],
)
def test_ambiguous_or_malformed_locations_are_refused(given: str) -> None:
    with pytest.raises(BadRequest):
        normalize(given)


def _refused(given: str, *, file: bool = False) -> bool:
    try:
        normalize(given, file=file)
    except BadRequest:
        return True
    return False


def test_every_control_character_and_the_backslash_are_refused_literal_or_escaped() -> None:
    """The rule, over every code point of the first two planes' worth of text: C0
    controls, DEL, the C1 controls and the backslash are refused, as are ``?`` and
    ``#`` written literally; every other character (``/`` and ``%`` aside, which
    shape the path) passes, in a location and in a file path."""
    refused_set = {chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)]} | {"\\"}
    for code in range(0x3000):
        ch = chr(code)
        if ch in "/%" or 0xD800 <= code < 0xE000:
            continue
        bad = ch in refused_set
        assert _refused(f"file:///wh/a{ch}b") == (bad or ch in "?#"), repr(ch)
        assert _refused(f"file:///wh/a{ch}b", file=True) == (bad or ch in "?#"), repr(ch)
        escaped = "".join(f"%{byte:02X}" for byte in ch.encode())
        assert _refused(f"file:///wh/a{escaped}b", file=True) == bad, repr(ch)


def test_a_kept_reading_is_the_same_whatever_the_name_it_was_asked_under() -> None:
    """Readings are kept by value and kind (file or location): asking under another
    name answers the same, a file path's reading is not taken for a location's, and a
    refusal still names what was asked about."""
    given = "file:///wh/kept/a%2Fb"
    assert str(normalize(given, "table location", file=True)) == given
    assert str(normalize(given, "metadata location", file=True)) == given
    with pytest.raises(BadRequest, match=r"^table location 'file:///wh/kept/a%2Fb' hides"):
        normalize(given, "table location")
    with pytest.raises(BadRequest, match=r"^view location 'file:///wh/kept/a%2Fb' hides"):
        normalize(given, "view location")


@pytest.mark.parametrize(
    ("path", "inside"),
    [
        ("file:///wh/default/c/ns/t", True),
        ("file:///wh/default/c", False),  # the root itself is not inside (strict)
        ("file:///wh/default/c2/t", False),  # a string prefix is not a parent
        ("file:///wh/default/c/../d/t", False),
        ("file:///wh/default/c/ns/../../d/t", False),
        ("file:///wh/default/c/%2e%2e/d", False),
        ("file:///wh/default/c/t/%2e%2e/%2e%2e/d/t", False),  # the decoded reading leaves
        ("file:///wh/default/c/t/region=a%2Fb/f.parquet", True),  # both readings stay inside
        ("file:///wh/default/c/t/x/%2E%2E/f.parquet", True),
        ("file://host/wh/default/c/t", False),
        ("s3://wh/default/c/t", False),
        ("file:///etc/passwd", False),
    ],
)
def test_inside_the_root(path: str, inside: bool) -> None:
    assert is_inside(path, ROOT) is inside


def test_a_location_must_not_be_ambiguous_but_a_file_path_may_be() -> None:
    path = "file:///wh/default/c/t/region=a%2Fb"
    with pytest.raises(BadRequest, match="hides a path separator"):
        normalize(path)
    location = normalize(path, file=True)
    assert str(location) == path
    assert location.key == "file:///wh/default/c/t/region=a/b"
    assert normalize("s3://b/a%20b").key == "s3://b/a b"  # one key for both spellings
    with pytest.raises(BadRequest, match="nests"):
        normalize("file:///wh/%25252525252e", file=True)


def test_check_inside_answers_the_normalized_location_or_400() -> None:
    roots = [ROOT, "s3://bucket/c"]
    assert check_inside("s3://bucket/c//t/", roots, "table location") == "s3://bucket/c/t"
    with pytest.raises(BadRequest, match="table location 'file:///etc' is outside"):
        check_inside("file:///etc", roots, "table location")
    assert check_inside(ROOT, roots, "path", allow_equal=True) == ROOT


def test_symlinks_are_resolved_for_file_locations(tmp_path: Path) -> None:
    root = tmp_path / "wh" / "c"
    (root / "t").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, root / "t" / "link")
    os.symlink(tmp_path, root / "t" / "up")
    link = (root / "t" / "link" / "f").as_uri()
    climbing = (root / "t" / "up").as_uri() + "/../x"
    assert is_inside(link, root.as_uri())  # as text
    assert not is_inside(link, root.as_uri(), resolve=True)
    assert not is_inside(climbing, root.as_uri(), resolve=True)
    assert is_inside((root / "t" / "f").as_uri(), root.as_uri(), resolve=True)


def test_catalog_root() -> None:
    assert catalog_root("file:///wh/", "default", "c") == ROOT


def test_kept_readings_are_the_same_and_refusals_name_what_each_caller_checks() -> None:
    assert normalize("file:///w/a/../b") is normalize("file:///w/a/../b")
    for what in ("table location", "metadata location"):
        with pytest.raises(BadRequest, match=what):
            normalize("s3://b/k?x", what)
    long = "s3://bucket/" + "k" * 2000
    assert str(normalize(long)) == long and normalize(long) is not normalize(long)


def test_a_location_reached_through_a_link_below_its_root_is_linked(tmp_path: Path) -> None:
    """Links at or above the catalog's storage root are the operator's (a mounted
    volume); one below it, in a folder clients write in, makes a table's location
    another folder."""
    real_root = tmp_path / "volume" / "cat"
    (real_root / "ns" / "own").mkdir(parents=True)
    (real_root / "ns" / "victim").mkdir()
    mounted = tmp_path / "mounted"
    mounted.symlink_to(tmp_path / "volume")  # above the root: trusted
    root = f"file://{mounted}/cat"
    assert not linked_below(f"{root}/ns/own", [root])
    assert not linked_below(f"{root}/ns/new/not-made-yet", [root])
    (real_root / "ns" / "own" / "lnk").symlink_to(real_root / "ns" / "victim")
    assert linked_below(f"{root}/ns/own/lnk", [root])
    assert linked_below(f"{root}/ns/own/lnk/below", [root])
    assert linked_below(f"{root}/ns/own/../own/lnk", [root])
    assert not linked_below("s3://bucket/cat/ns/x", ["s3://bucket/cat"])  # object stores
    # outside every root: any link on the path counts
    assert linked_below(f"file://{mounted}/cat/ns/own", [])
    assert not linked_below(f"file://{real_root}/ns/own", [])


def test_the_gc_listing_skips_a_table_folder_that_is_a_link(tmp_path: Path) -> None:
    root = tmp_path / "cat"
    victim = root / "ns" / "victim" / "metadata"
    victim.mkdir(parents=True)
    (victim / "00001-x.metadata.json").write_text("{}")
    os.utime(victim / "00001-x.metadata.json", (1, 1))
    (root / "ns" / "mine").symlink_to(root / "ns" / "victim")
    listing = orphan_metadata_files([f"file://{root}/ns/mine"], [], 10**18, [f"file://{root}"])
    assert listing.orphans == [] and listing.unlisted == 1
    listing = orphan_metadata_files([f"file://{root}/ns/victim"], [], 10**18, [f"file://{root}"])
    assert [o.path.rsplit("/", 1)[1] for o in listing.orphans] == ["00001-x.metadata.json"]


def test_a_tables_past_location_where_a_view_stands_now_is_not_listed(tmp_path: Path) -> None:
    """A table moved away frees its location, and a view may stand there now: the view's
    metadata files are named by nothing a table holds, so its folder is never listed."""
    root = tmp_path / "cat"
    view = root / "ns" / "reports"
    (view / "metadata").mkdir(parents=True)
    (view / "metadata" / "00000-v.metadata.json").write_text("{}")
    os.utime(view / "metadata" / "00000-v.metadata.json", (1, 1))
    past = [f"file://{view}"]
    listing = orphan_metadata_files(past, [], 10**18, [f"file://{root}"])
    assert [o.path.rsplit("/", 1)[1] for o in listing.orphans] == ["00000-v.metadata.json"]
    for spared in (f"file://{view}", f"file://{view}/inner", f"file://{root}/ns"):
        listing = orphan_metadata_files(past, [], 10**18, [f"file://{root}"], spared=[spared])
        assert listing.orphans == [] and listing.unlisted == 1, spared
    elsewhere = [f"file://{root}/ns/other"]
    listing = orphan_metadata_files(past, [], 10**18, [f"file://{root}"], spared=elsewhere)
    assert len(listing.orphans) == 1


def test_the_gc_deletes_only_what_a_listing_finds(tmp_path: Path) -> None:
    """An orphan comes from the mark: the sweep deletes it only if it is a metadata
    file right in its table's ``metadata/`` folder, whatever the mark said."""
    table = tmp_path / "cat" / "ns" / "t"
    (table / "metadata").mkdir(parents=True)
    (table / "data").mkdir()
    kept = [table / "metadata" / "notes.txt", table / "data" / "00001-x.metadata.json"]
    gone = table / "metadata" / "00002-y.metadata.json"
    for path in (*kept, gone):
        path.write_text("{}")
    for path in kept:
        assert not delete_file(OrphanFile(table.as_uri(), path.as_uri(), 0, 2))
        assert path.exists()
    assert delete_file(OrphanFile(table.as_uri(), gone.as_uri(), 0, 2))
    assert not gone.exists()
