"""Soft drop and undrop in the commit engine (``DropEntity``, ``UndropEntity``,
``metastore.engine.dropped``), on the memory backend: what each commit records, the counts,
which instance an undrop picks, and the location a kept entity holds, yields and takes
back."""

from __future__ import annotations

import pytest

from metastore.engine import dropped
from metastore.engine.commits import CommitOutcome, CommitRequest
from metastore.errors import AlreadyExists, BadRequest, NoSuchNamespace, NoSuchTable, NoSuchView
from metastore.model.changes import DROPPED_BY, CreateEntity, DeleteEntity, DropEntity, UndropEntity
from metastore.model.keys import EntityKey
from metastore.model.records import Commit, Entity
from tests.builders import MAIN, Node, create_catalog_ref, create_request, ns_key
from tests.builders import table_key as _table_key
from tests.builders import view_key as _view_key

ROOT = "s3://bucket/wh/c"
T = _table_key(("db",), "t")


@pytest.fixture
def db(node: Node) -> Node:
    create_catalog_ref(node.committer)
    node.committer.commit(MAIN, create_request(ns_key("db")))
    return node


def commit(node: Node, *changes: object, operation: str = "commit") -> CommitOutcome:
    request = CommitRequest(changes=tuple(changes), operation=operation)  # type: ignore[arg-type]
    return node.committer.commit(MAIN, request)


def head(node: Node) -> Commit:
    ref = node.persistence.get_ref(MAIN)
    assert ref is not None
    return node.objects().commit(ref.head)


def kept(node: Node) -> list[dropped.Dropped]:
    objects = node.objects()
    index = objects.index(head(node))
    assert index is not None
    return list(dropped.scan(index, objects.entity))


def live(node: Node, key: EntityKey) -> Entity | None:
    objects = node.objects()
    index = objects.index(head(node))
    assert index is not None
    value = index.get(key.encode())
    return None if value is None else objects.entity(value[1])


def test_a_drop_moves_the_next_version_to_its_record_and_an_undrop_moves_it_back(
    db: Node,
) -> None:
    created = commit(db, CreateEntity(T, {"a": "1"}, location=f"{ROOT}/t")).entities[T]
    assert created is not None
    counts = head(db).counts
    commit(db, DropEntity(T, "alice"))
    record = dropped.record_key(created.entity_id)
    assert [(c.key, c.action) for c in head(db).changes] == [
        (T.encode(), "DELETE"),
        (record.encode(), "CREATE"),
    ]
    assert live(db, T) is None
    (found,) = kept(db)
    assert found.record == record and found.key == T and found.dropped_by == "alice"
    assert found.entity.version == 2 and found.entity.entity_id == created.entity_id
    assert found.entity.properties == {"a": "1", DROPPED_BY: "alice"}
    assert counts is not None and head(db).counts is not None
    assert head(db).counts.tables == counts.tables - 1  # type: ignore[union-attr]

    restored = commit(db, UndropEntity(T)).entities[T]
    assert [(c.key, c.action) for c in head(db).changes] == [
        (record.encode(), "DELETE"),
        (T.encode(), "CREATE"),
    ]
    assert restored is not None and restored.entity_id == created.entity_id
    assert restored.version == 3 and restored.properties == {"a": "1"}
    assert restored.location == f"{ROOT}/t" and kept(db) == []
    assert head(db).counts == counts
    with pytest.raises(NoSuchTable, match=r"no dropped table db\.t"):
        commit(db, UndropEntity(T))
    with pytest.raises(NoSuchView):
        commit(db, UndropEntity(_view_key(("db",), "t")))


def test_an_undrop_picks_the_one_dropped_last_or_the_one_named_and_never_a_taken_name(
    db: Node,
) -> None:
    first = commit(db, CreateEntity(T, {"n": "1"})).entities[T]
    commit(db, DropEntity(T, "p"))
    second = commit(db, CreateEntity(T, {"n": "2"})).entities[T]
    assert first is not None and second is not None
    with pytest.raises(AlreadyExists):  # the name is taken again
        commit(db, UndropEntity(T, first.entity_id))
    commit(db, DropEntity(T, "p"))
    assert len(kept(db)) == 2
    with pytest.raises(NoSuchTable):  # an id that is not a dropped instance of this name
        commit(db, UndropEntity(_table_key(("db",), "other"), first.entity_id))
    assert commit(db, UndropEntity(T)).entities[T].properties == {"n": "2"}  # type: ignore[union-attr]
    commit(db, DropEntity(T, "p"))
    picked = commit(db, UndropEntity(T, first.entity_id)).entities[T]
    assert picked is not None and picked.properties == {"n": "1"}
    assert [d.entity.entity_id for d in kept(db)] == [second.entity_id]


def test_a_kept_location_yields_to_a_live_one_and_is_taken_back_when_free(
    db: Node,
) -> None:
    commit(db, CreateEntity(T, location=f"{ROOT}/t"))
    commit(db, DropEntity(T, "p"))
    with pytest.raises(BadRequest):  # nesting in a kept location is still refused...
        commit(db, CreateEntity(_table_key(("db",), "in"), location=f"{ROOT}/t/in"))
    other = _table_key(("db",), "u")
    commit(db, CreateEntity(other, location=f"{ROOT}/t"))  # ...but it yields to a live one
    with pytest.raises(AlreadyExists, match="was taken by another table"):
        commit(db, UndropEntity(T))
    commit(db, DropEntity(other, "p"))
    with pytest.raises(AlreadyExists):  # held by the other kept one now
        commit(db, UndropEntity(T))
    commit(db, UndropEntity(other))
    commit(db, CreateEntity(_table_key(("db",), "v"), location=f"{ROOT}/v"))
    with pytest.raises(BadRequest):  # the live one holds it again
        commit(db, CreateEntity(_table_key(("db",), "w"), location=f"{ROOT}/t"))


def test_a_kept_location_yields_only_within_its_namespace(db: Node) -> None:
    """Whoever may create a table elsewhere in the catalog does not get a dropped table's
    files (and credentials for them) by naming its location: only a table of its own
    namespace takes it, which needs the privilege an undrop needs."""
    commit(db, CreateEntity(ns_key("scratch")))
    commit(db, CreateEntity(T, location=f"{ROOT}/t"))
    commit(db, DropEntity(T, "p"))
    for name in (_table_key(("scratch",), "grab"), _view_key(("db",), "t")):
        with pytest.raises(BadRequest, match=r"of the dropped table db\.t, kept for undrop"):
            commit(db, CreateEntity(name, location=f"{ROOT}/t"))
    assert live(db, T) is None and len(kept(db)) == 1
    other = _table_key(("db",), "t2")  # its namespace: drop, then register under a new name
    assert commit(db, CreateEntity(other, location=f"{ROOT}/t")).entities[other] is not None
    with pytest.raises(AlreadyExists, match="was taken by another table"):
        commit(db, UndropEntity(T))


def test_kept_tables_hold_up_no_namespace_drop_and_cannot_come_back_without_it(
    db: Node,
) -> None:
    commit(db, CreateEntity(T))
    commit(db, DropEntity(T, "p"))
    commit(db, DeleteEntity(ns_key("db")))  # nothing live inside: it may go
    with pytest.raises(NoSuchNamespace):
        commit(db, UndropEntity(T))
    assert len(kept(db)) == 1
