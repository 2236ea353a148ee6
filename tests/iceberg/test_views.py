"""Views through PyIceberg and the REST endpoints: create, load, replace, list, rename, drop."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlparse

import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import NoSuchViewError, TableAlreadyExistsError, ViewAlreadyExistsError
from pyiceberg.view.metadata import SQLViewRepresentation, ViewVersion

from tests.iceberg.conftest import Server
from tests.iceberg.support import SCHEMA, Http, assert_error


def _version(sql: str) -> ViewVersion:
    return ViewVersion(
        version_id=1,
        schema_id=0,
        summary={"engine": "test"},
        representations=[SQLViewRepresentation(type="sql", sql=sql, dialect="spark")],
        default_namespace=["db"],
    )


def test_view_lifecycle(iceberg_server: Server, catalog_name: str, catalog: RestCatalog) -> None:
    catalog.create_namespace(("db",))
    catalog.create_table(("db", "t"), SCHEMA)
    view = catalog.create_view(("db", "v"), SCHEMA, _version("SELECT * FROM t"))
    assert view.metadata.current_version_id == 1
    with pytest.raises(ViewAlreadyExistsError):
        catalog.create_view(("db", "v"), SCHEMA, _version("SELECT 1"))
    with pytest.raises((TableAlreadyExistsError, ViewAlreadyExistsError)):
        catalog.create_view(("db", "t"), SCHEMA, _version("SELECT 1"))
    assert catalog.view_exists(("db", "v"))
    assert catalog.list_views(("db",)) == [("db", "v")]
    assert catalog.list_tables(("db",)) == [("db", "t")]
    loaded = catalog.load_view(("db", "v"))
    assert loaded.metadata.versions[0].representations[0].root.sql == "SELECT * FROM t"

    http = Http(iceberg_server.url, catalog_name)
    path = "/namespaces/db/views/v"
    first = http.call("GET", path).json()
    new_version = json.loads(_version("SELECT id FROM t").model_dump_json())
    new_version["schema-id"] = -1
    replace = {
        "requirements": [{"type": "assert-view-uuid", "uuid": first["metadata"]["view-uuid"]}],
        "updates": [
            {"action": "add-schema", "schema": json.loads(SCHEMA.model_dump_json())},
            {"action": "add-view-version", "view-version": new_version},
            {"action": "set-current-view-version", "view-version-id": -1},
            {"action": "set-properties", "updates": {"comment": "ids"}},
        ],
    }
    reply = http.call("POST", path, json=replace)
    assert reply.status_code == 200, reply.text
    replaced = reply.json()["metadata"]
    assert replaced["current-version-id"] == 2
    assert [e["version-id"] for e in replaced["version-log"]] == [1, 2]
    assert replaced["properties"] == {"comment": "ids"}
    written = json.loads(Path(urlparse(reply.json()["metadata-location"]).path).read_text())
    assert written == replaced
    assert catalog.load_view(("db", "v")).metadata.current_version_id == 2

    wrong_uuid = {**replace, "requirements": [{"type": "assert-view-uuid", "uuid": "x"}]}
    assert_error(http.call("POST", path, json=wrong_uuid), 409, "CommitFailedException")
    unknown = {"updates": [{"action": "set-current-view-version", "view-version-id": 99}]}
    assert_error(http.call("POST", path, json=unknown), 400)

    rename = {
        "source": {"namespace": ["db"], "name": "v"},
        "destination": {"namespace": ["db"], "name": "w"},
    }
    assert http.call("POST", "/views/rename", json=rename).status_code == 204
    assert catalog.list_views(("db",)) == [("db", "w")]
    catalog.drop_view(("db", "w"))
    assert not catalog.view_exists(("db", "w"))
    with pytest.raises(NoSuchViewError):
        catalog.load_view(("db", "w"))
