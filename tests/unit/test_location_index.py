"""The commit engine keeps table and view locations unique and not nested (``location_index``)."""

from __future__ import annotations

import pytest

from metastore.changes import CreateEntity, DeleteEntity, RenameEntity, UpdateEntity
from metastore.commits import CommitRequest
from metastore.errors import BadRequest
from metastore.keys import EntityKey
from metastore.location_index import record_key
from metastore.locations import normalize
from metastore.persistence.base import Persistence
from metastore.purging import PurgingLocations
from tests.unit.conftest import (
    MAIN,
    Node,
    create_catalog_ref,
    create_request,
    make_node,
    ns_key,
)
from tests.unit.conftest import table_key as _table_key
from tests.unit.conftest import view_key as _view_key

ROOT = "s3://bucket/wh/c"


def table(name: str) -> EntityKey:
    return _table_key(("db",), name)


def view(name: str) -> EntityKey:
    return _view_key(("db",), name)


@pytest.fixture
def db(node: Node) -> Node:
    create_catalog_ref(node.committer)
    node.committer.commit(MAIN, create_request(ns_key("db")))
    return node


def commit(node: Node, *changes: object) -> None:
    node.committer.commit(MAIN, CommitRequest(changes=tuple(changes)))  # type: ignore[arg-type]


def held(node: Node) -> list[str]:
    objects = node.objects()
    ref = node.persistence.get_ref(MAIN)
    assert ref is not None
    index = objects.index(objects.commit(ref.head))
    assert index is not None
    prefix = record_key("").encode()
    return [key[len(prefix) :].decode() for key, _ in index.items(prefix)]


@pytest.mark.parametrize(
    "other",
    [f"{ROOT}/t", f"{ROOT}/t/", f"{ROOT}/x/../t", f"{ROOT}/t/data", ROOT],
    ids=["same", "trailing slash", "dot-dot", "inside", "containing"],
)
def test_a_second_table_or_view_cannot_overlap(db: Node, other: str) -> None:
    commit(db, CreateEntity(table("a"), location=f"{ROOT}/t"))
    for key in (table("b"), view("v")):
        with pytest.raises(BadRequest, match="unique and not nested"):
            commit(db, CreateEntity(key, location=other))
    commit(db, CreateEntity(table("c"), location=f"{ROOT}/t2"))  # a sibling, not a prefix
    assert held(db) == [f"{ROOT}/t", f"{ROOT}/t2"]


def test_a_location_a_running_purge_holds_cannot_be_claimed(persistence: Persistence) -> None:
    """A purge holds its location from before it reads what is held until its last
    deletion: a table created there (or around it, or inside it) meanwhile would get
    files that are going."""
    purging = PurgingLocations()
    node = make_node(persistence, purging=purging)
    create_catalog_ref(node.committer)
    node.committer.commit(MAIN, create_request(ns_key("db")))
    with purging.hold("t1", "c1", normalize(f"{ROOT}/t")):
        for where in (f"{ROOT}/t", f"{ROOT}/t/data", ROOT):
            with pytest.raises(BadRequest, match="being purged now"):
                commit(node, CreateEntity(table("a"), location=where))
        with purging.hold("t1", "other", normalize(f"{ROOT}/x")):  # another catalog's
            commit(node, CreateEntity(table("b"), location=f"{ROOT}/x"))
    commit(node, CreateEntity(table("a"), location=f"{ROOT}/t"))  # done: free again
    assert held(node) == [f"{ROOT}/t", f"{ROOT}/x"]


def test_two_overlapping_creates_in_one_commit_fail_together(db: Node) -> None:
    with pytest.raises(BadRequest):
        commit(
            db,
            CreateEntity(table("a"), location=f"{ROOT}/t"),
            CreateEntity(table("b"), location=f"{ROOT}/t/in"),
        )
    assert held(db) == []


def test_delete_move_and_rename_keep_the_index_true(db: Node) -> None:
    commit(db, CreateEntity(table("a"), location=f"{ROOT}/a"))
    commit(db, RenameEntity(table("a"), table("b")))  # the location goes with the entity
    with pytest.raises(BadRequest):
        commit(db, CreateEntity(table("a"), location=f"{ROOT}/a"))
    commit(db, UpdateEntity(table("b"), location=f"{ROOT}/a/inner"))  # moves inside its own
    assert held(db) == [f"{ROOT}/a/inner"]
    commit(db, CreateEntity(table("a"), location=f"{ROOT}/b"))
    with pytest.raises(BadRequest):
        commit(db, UpdateEntity(table("a"), location=f"{ROOT}/a"))
    commit(db, DeleteEntity(table("b")), CreateEntity(view("v"), location=f"{ROOT}/a"))
    assert held(db) == [f"{ROOT}/a", f"{ROOT}/b"]
    commit(db, DeleteEntity(view("v")), DeleteEntity(table("a")))
    assert held(db) == []


def test_records_are_not_part_of_changes_or_outcome(db: Node) -> None:
    key = table("a")
    request = CommitRequest(changes=(CreateEntity(key, location=f"{ROOT}/a"),))
    outcome = db.committer.commit(MAIN, request)
    assert list(outcome.entities) == [key]
    objects = db.objects()
    assert [c.key for c in objects.commit(outcome.commit_id).changes] == [key.encode()]
