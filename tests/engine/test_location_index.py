"""The commit engine keeps table and view locations unique and not nested (``location_index``)."""

from __future__ import annotations

import pytest

from metastore.engine import dropped
from metastore.engine.commits import CommitRequest
from metastore.engine.location_index import Records, record_key
from metastore.errors import BadRequest, NotFound, ValidationFailed
from metastore.model.changes import (
    CreateEntity,
    DeleteEntity,
    DropEntity,
    PurgeDropped,
    RenameEntity,
    UndropEntity,
    UpdateEntity,
)
from metastore.model.index import IndexView
from metastore.model.keys import EntityKey
from metastore.model.locations import normalize
from metastore.model.records import Entity
from tests.builders import (
    MAIN,
    Node,
    create_catalog_ref,
    create_request,
    ns_key,
)
from tests.builders import table_key as _table_key
from tests.builders import view_key as _view_key

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


def head_index(node: Node) -> IndexView:
    objects = node.objects()
    ref = node.persistence.get_ref(MAIN)
    assert ref is not None
    index = objects.index(objects.commit(ref.head))
    assert index is not None
    return index


def records(node: Node) -> Records:
    return Records(head_index(node), node.objects().entity)


def entity(node: Node, key: EntityKey) -> Entity:
    found = head_index(node).get(key.encode())
    assert found is not None, key
    return node.objects().entity(found[1])


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


def test_a_location_a_purging_record_holds_is_claimed_by_nothing(db: Node) -> None:
    """A drop with purge (or the expiry's purge of a kept one) holds the location in its
    purging record until the purge ends: no table takes it meanwhile, not even one of
    its namespace (which a kept one yields to), nor one around it or inside it; once the
    record is deleted it is free. A purge that a crash cut short so keeps its hold."""
    commit(db, CreateEntity(table("gone"), location=f"{ROOT}/t"))
    gone = entity(db, table("gone"))
    commit(db, DropEntity(table("gone"), "p", purge=True))
    assert entity(db, dropped.purging_key(gone.entity_id)).key == table("gone")
    for where in (f"{ROOT}/t", f"{ROOT}/t/data", ROOT):
        with pytest.raises(BadRequest, match="being purged"):
            commit(db, CreateEntity(table("a"), location=where))
    with pytest.raises(NotFound):  # never undropped
        commit(db, UndropEntity(table("gone"), gone.entity_id))
    commit(db, DeleteEntity(dropped.purging_key(gone.entity_id)))  # the purge ended
    commit(db, CreateEntity(table("a"), location=f"{ROOT}/t"))  # free again
    assert held(db) == [f"{ROOT}/t"]


def test_a_purge_keeps_its_location_when_a_kept_one_yielded_it(db: Node) -> None:
    """What a purge keeps under its location: nothing of its own, but all of it while a
    dropped one kept for undrop yielded it the location (which goes back to that one
    when the purge ends), and what a table inside it holds. The expiry's purge of a kept
    one moves it to its purging record, which a new table of its namespace cannot take."""
    commit(db, CreateEntity(table("t"), location=f"{ROOT}/t"))
    first = entity(db, table("t"))
    commit(db, DropEntity(table("t"), "p"))  # kept; then a register of its metadata
    commit(db, CreateEntity(table("t2"), location=f"{ROOT}/t"))
    second = entity(db, table("t2"))
    commit(db, DropEntity(table("t2"), "p", purge=True))
    location = normalize(f"{ROOT}/t")
    assert records(db).kept_by_purge(location, second.entity_id) == [location.key]
    commit(db, DeleteEntity(dropped.purging_key(second.entity_id)))
    assert records(db).holder(location.key) == first.entity_id  # back to the kept one

    commit(db, PurgeDropped(dropped.record_key(first.entity_id)))  # the expiry's
    assert records(db).kept_by_purge(location, first.entity_id) == []
    with pytest.raises(BadRequest, match="being purged"):
        commit(db, CreateEntity(table("t3"), location=f"{ROOT}/t"))
    with pytest.raises(ValidationFailed):  # only a kept one is moved so
        commit(db, PurgeDropped(dropped.purging_key(first.entity_id)))


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
