"""The view reducer on plain metadata: each update's rule, purity, and the injected time."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import TypeAdapter

from metastore.errors import BadRequest, ValidationFailed
from metastore.iceberg.view_updates import ViewUpdate, apply_view_updates

UPDATES = TypeAdapter(list[ViewUpdate])  # parsed as a request body's updates are
T0 = 1_700_000_000_000
NOW = 1_767_225_600_000  # the time the caller injects
UUID = "0f6c9e5e-6d1e-4f4b-9f38-1d2a3b4c5d6e"


def _schema(*names: str) -> dict[str, Any]:
    fields = [
        {"id": i, "name": name, "type": "long", "required": False}
        for i, name in enumerate(names, 1)
    ]
    return {"type": "struct", "fields": fields, "identifier-field-ids": []}  # as stored


def _version(sql: str, schema_id: int, version_id: int = 1, at: int = T0) -> dict[str, Any]:
    return {
        "version-id": version_id,
        "schema-id": schema_id,
        "timestamp-ms": at,
        "summary": {"engine": "test"},
        "representations": [{"type": "sql", "sql": sql, "dialect": "spark"}],
        "default-namespace": ["db"],
    }


def _metadata() -> dict[str, Any]:
    """A view as ``Views.create`` makes it: one schema, one version."""
    return {
        "view-uuid": UUID,
        "format-version": 1,
        "location": "file:///w/db/v",
        "current-version-id": 1,
        "versions": [_version("SELECT id FROM t", 0)],
        "version-log": [{"timestamp-ms": T0, "version-id": 1}],
        "schemas": [{**_schema("id"), "schema-id": 0}],
        "properties": {"owner": "ann", "comment": "old"},
    }


def _apply(metadata: dict[str, Any], updates: list[dict[str, Any]], now: int = NOW) -> Any:
    return apply_view_updates(metadata, UPDATES.validate_python(updates), now)


REPLACE: list[dict[str, Any]] = [  # what an engine sends to replace a view's query
    {"action": "add-schema", "schema": {**_schema("id", "name"), "schema-id": 7}},
    {"action": "add-view-version", "view-version": _version("SELECT id, name FROM t", -1, 99)},
    {"action": "set-current-view-version", "view-version-id": -1},
    {"action": "set-properties", "updates": {"comment": "new"}},
    {"action": "remove-properties", "removals": ["owner"]},
]


def test_a_replace_adds_a_schema_and_a_version_and_logs_it_at_the_injected_time() -> None:
    new = _apply(_metadata(), REPLACE)
    assert [s["schema-id"] for s in new["schemas"]] == [0, 1]  # the next id, not the client's
    assert new["versions"][1]["version-id"] == 2
    assert new["versions"][1]["schema-id"] == 1  # -1: the schema added last
    assert new["current-version-id"] == 2
    assert new["version-log"] == [
        {"timestamp-ms": T0, "version-id": 1},
        {"timestamp-ms": NOW, "version-id": 2},
    ]
    assert new["properties"] == {"comment": "new"}


def test_does_not_mutate_its_input() -> None:
    metadata = _metadata()
    before = copy.deepcopy(metadata)
    new = _apply(metadata, [*REPLACE, {"action": "set-location", "location": "file:///w/x"}])
    assert metadata == before
    assert new is not metadata
    assert new["location"] == "file:///w/x"
    assert new["versions"] is not metadata["versions"]
    unchanged = _apply(metadata, [])
    assert unchanged == metadata and unchanged is not metadata  # a new dict even so
    unchanged["properties"] = {}
    assert metadata == before


def test_the_same_updates_at_the_same_time_give_the_same_metadata() -> None:
    assert _apply(_metadata(), REPLACE) == _apply(_metadata(), REPLACE)
    later = _apply(_metadata(), REPLACE, now=NOW + 1)
    assert later["version-log"][-1] == {"timestamp-ms": NOW + 1, "version-id": 2}


def test_applying_a_commits_updates_to_its_own_result_changes_nothing() -> None:
    once = _apply(_metadata(), REPLACE)
    assert _apply(once, REPLACE, now=NOW + 5_000) == once


def test_identical_schema_and_version_are_reused_not_added() -> None:
    updates: list[dict[str, Any]] = [
        {"action": "add-schema", "schema": {**_schema("id"), "schema-id": 3}},
        # the current version again, with another id and time: the same version
        {"action": "add-view-version", "view-version": _version("SELECT id FROM t", -1, 5, NOW)},
        {"action": "set-current-view-version", "view-version-id": -1},
    ]
    assert _apply(_metadata(), updates) == _metadata()  # current already: no log entry


def test_setting_an_older_version_current_appends_to_the_log() -> None:
    two = _apply(_metadata(), REPLACE)
    back = _apply(two, [{"action": "set-current-view-version", "view-version-id": 1}], NOW + 1)
    assert back["current-version-id"] == 1
    assert back["version-log"][-1] == {"timestamp-ms": NOW + 1, "version-id": 1}


@pytest.mark.parametrize(
    ("updates", "message"),
    [
        (
            [{"action": "add-view-version", "view-version": _version("SELECT 1", -1)}],
            "none was added",
        ),
        ([{"action": "add-view-version", "view-version": _version("SELECT 1", 4)}], "schema 4"),
        ([{"action": "set-current-view-version", "view-version-id": -1}], "needs an added"),
        ([{"action": "set-current-view-version", "view-version-id": 9}], "unknown view version"),
        ([{"action": "assign-uuid", "uuid": "11111111-2222-3333-4444-555555555555"}], "uuid"),
        ([{"action": "upgrade-format-version", "format-version": 2}], "format version 2"),
    ],
)
def test_an_update_that_cannot_apply_is_a_bad_request(
    updates: list[dict[str, Any]], message: str
) -> None:
    metadata = _metadata()
    with pytest.raises(BadRequest, match=message):
        _apply(metadata, updates)
    assert metadata == _metadata()


def test_the_views_own_uuid_and_format_version_are_accepted() -> None:
    updates: list[dict[str, Any]] = [
        {"action": "assign-uuid", "uuid": UUID},
        {"action": "upgrade-format-version", "format-version": 1},
    ]
    assert _apply(_metadata(), updates) == _metadata()


def test_metadata_that_is_not_a_valid_view_is_refused() -> None:
    broken = {**_metadata(), "format-version": "one"}
    with pytest.raises(ValidationFailed):
        _apply(broken, [])
