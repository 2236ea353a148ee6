"""Server-side append rebase (``metastore.commit.rebase-appends``), with real PyIceberg.

Every table here sets ``commit.retry.num-retries=0``, so PyIceberg never retries a
commit on its own: each 409 the node answers reaches the test as a
``CommitFailedException``, and "no client retries" means none was raised.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import BadRequestError, CommitFailedException
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation, Snapshot

from tests.iceberg.conftest import TENANT, Server
from tests.iceberg.support import SCHEMA, Http, assert_error, rows

REBASE = "metastore.commit.rebase-appends"
NO_RETRIES = {"commit.retry.num-retries": "0"}


def _new_catalog(server: Server, properties: dict[str, str]) -> str:
    """A catalog with ``properties`` (``Server.new_catalog`` with properties)."""
    name = f"c{uuid.uuid4().hex[:10]}"
    body: dict[str, object] = {"name": name, "properties": properties}
    if server.storage is not None:
        body["storage"] = {"root": server.warehouse(name).as_uri()}
    reply = requests.post(f"{server.url}/api/v1/tenants/{TENANT}/catalogs", json=body, timeout=30)
    assert reply.status_code == 201, reply.text
    return name


def _table(client: RestCatalog, name: str, **properties: str) -> Table:
    if ("db",) not in client.list_namespaces():
        client.create_namespace(("db",))
    return client.create_table(("db", name), SCHEMA, properties={**NO_RETRIES, **properties})


def _chain(table: Table) -> list[Snapshot]:
    """The current branch's snapshots, oldest first."""
    chain: list[Snapshot] = []
    current = table.current_snapshot()
    while current is not None:
        chain.append(current)
        parent = current.parent_snapshot_id
        current = table.snapshot_by_id(parent) if parent is not None else None
    return chain[::-1]


def _check_chain(table: Table) -> list[Snapshot]:
    """Every snapshot is on the branch, each the child of the one before it in the
    snapshot log, with strictly increasing sequence numbers; returns the chain."""
    chain = _chain(table)
    assert [s.snapshot_id for s in chain] == [e.snapshot_id for e in table.metadata.snapshot_log]
    assert len(chain) == len(table.metadata.snapshots)
    for before, after in itertools.pairwise(chain):
        assert after.parent_snapshot_id == before.snapshot_id
        assert after.sequence_number is not None and before.sequence_number is not None
        assert after.sequence_number > before.sequence_number
    assert chain[-1].sequence_number == table.metadata.last_sequence_number
    return chain


def _ids(table: Table) -> list[int]:
    return sorted(table.scan().to_arrow()["id"].to_pylist())


def _rebased(snapshot: Snapshot) -> bool:
    return "-rebased-" in snapshot.manifest_list


def _failed_commits(url: str) -> float:
    """Commits the node's engine refused (a table commit that lost to another), so far."""
    text = requests.get(f"{url}/metrics", timeout=30).text
    name = 'metastore_commit_duration_seconds_count{outcome="failed"}'
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


@pytest.mark.slow
def test_concurrent_appenders_never_retry(iceberg_server: Server) -> None:
    """8 PyIceberg clients (threads, each its own catalog client) append to one table at
    once: none sees a conflict, every row is present once, the chain is linear and the
    snapshot summaries count the whole table. On one embedded node the commits to the
    table take turns from their first attempt, so none is prepared on a version another
    commit has already replaced: the engine refuses none of them."""
    clients, appends = 8, 3
    failed_before = _failed_commits(iceberg_server.url)
    name = _new_catalog(iceberg_server, {})
    catalog = iceberg_server.client(name)
    _table(catalog, "hot", **{REBASE: "true"})
    start = threading.Barrier(clients)
    errors: list[BaseException] = []

    def writer(index: int) -> None:
        client = iceberg_server.client(name)
        try:
            table = client.load_table(("db", "hot"))  # every client reads the same head
            start.wait(timeout=60)
            for n in range(appends):
                table.append(rows([index * 1000 + n, index * 1000 + n + 500]))
        except BaseException as exc:  # a CommitFailedException is a client retry
            errors.append(exc)
        finally:
            client.close()

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert not any(t.is_alive() for t in threads)
    assert errors == []

    table = catalog.load_table(("db", "hot"))
    expected = sorted(
        i * 1000 + n + k for i in range(clients) for n in range(appends) for k in (0, 500)
    )
    assert _ids(table) == expected  # every row present exactly once
    chain = _check_chain(table)
    assert len(chain) == clients * appends
    assert any(_rebased(s) for s in chain)  # the clients did race, and the server rebased
    # a rebase whose commit then lost to another deleted its manifest list
    metadata = Path(table.location().removeprefix("file://")) / "metadata"
    written = {p.name for p in metadata.iterdir() if "-rebased-" in p.name}
    assert written == {s.manifest_list.rsplit("/", 1)[-1] for s in chain if _rebased(s)}
    for count, snapshot in enumerate(chain, start=1):
        assert snapshot.summary is not None
        assert snapshot.summary.operation == Operation.APPEND
        assert snapshot.summary["total-records"] == str(2 * count)
        assert snapshot.summary["total-data-files"] == str(count)
    if not iceberg_server.node_urls:  # embedded: a commit is read back at once where it landed
        assert _failed_commits(iceberg_server.url) == failed_before
    catalog.close()


def test_stale_append_is_rebased_when_the_catalog_says_so(iceberg_server: Server) -> None:
    """The catalog's setting is its tables' default and a table's own overrides it; a
    stale append on a table with rebase off is the 409 it always was."""
    name = _new_catalog(iceberg_server, {REBASE: "true"})
    client = iceberg_server.client(name)
    _table(client, "by-catalog")
    _table(client, "off", **{REBASE: "false"})
    for table_name, rebased in (("by-catalog", True), ("off", False)):
        stale = client.load_table(("db", table_name))
        stale.append(rows([1]))
        stale_again = client.load_table(("db", table_name))
        client.load_table(("db", table_name)).append(rows([2]))  # another writer, meanwhile
        if not rebased:
            with pytest.raises(CommitFailedException) as refused:
                stale_again.append(rows([3]))
            assert "not rebased" not in str(refused.value)  # exactly as without the feature
            assert _ids(client.load_table(("db", table_name))) == [1, 2]
            continue
        stale_again.append(rows([3]))
        table = client.load_table(("db", table_name))
        assert _ids(table) == [1, 2, 3]
        chain = _check_chain(table)
        assert [_rebased(s) for s in chain] == [False, False, True]
        assert chain[-1].summary is not None and chain[-1].summary["total-records"] == "3"
        assert stale_again.current_snapshot() == chain[-1]  # the client sees its append
    client.close()


def test_rebase_off_by_default(iceberg_server: Server, catalog: RestCatalog) -> None:
    _table(catalog, "plain")
    first = catalog.load_table(("db", "plain"))
    catalog.load_table(("db", "plain")).append(rows([1]))
    with pytest.raises(CommitFailedException, match="created concurrently") as refused:
        first.append(rows([2]))
    assert "not rebased" not in str(refused.value)
    assert _ids(catalog.load_table(("db", "plain"))) == [1]


@pytest.mark.parametrize(
    ("deleted", "operation", "left"), [("id == 1", "overwrite", [2]), ("id <= 2", "delete", [])]
)
def test_no_rebase_over_removed_files(
    iceberg_server: Server, catalog: RestCatalog, deleted: str, operation: str, left: list[int]
) -> None:
    """A snapshot that removed or replaced files since the client read the table: 409,
    naming it, and no rebased manifest list left behind. (PyIceberg's delete of part of
    a file rewrites it: an ``overwrite``; of whole files: a ``delete``.)"""
    _table(catalog, "t", **{REBASE: "true"})
    catalog.load_table(("db", "t")).append(rows([1, 2]))
    stale = catalog.load_table(("db", "t"))
    catalog.load_table(("db", "t")).delete(deleted)
    with pytest.raises(CommitFailedException, match=rf"not rebased: .*\({operation}\)"):
        stale.append(rows([3]))
    table = catalog.load_table(("db", "t"))
    assert _ids(table) == left
    assert table.current_snapshot().summary.operation.value == operation  # type: ignore[union-attr]
    metadata = Path(table.location().removeprefix("file://")) / "metadata"
    assert not [p for p in metadata.iterdir() if "-rebased-" in p.name]


def test_no_rebase_with_other_updates(iceberg_server: Server, catalog: RestCatalog) -> None:
    """An append that also changes properties, or whose table's schema changed since: 409."""
    _table(catalog, "t", **{REBASE: "true"})
    stale = catalog.load_table(("db", "t"))
    catalog.load_table(("db", "t")).append(rows([1]))
    more = pytest.raises(CommitFailedException, match="not rebased: the commit does more")
    with more, stale.transaction() as tx:
        tx.set_properties(owner="me")
        tx.append(rows([2]))
    stale = catalog.load_table(("db", "t"))
    catalog.load_table(("db", "t")).append(rows([3]))
    with catalog.load_table(("db", "t")).update_schema() as update:
        update.add_column("extra", SCHEMA.find_field("id").field_type)
    with pytest.raises(CommitFailedException, match="not rebased: the table's schema changed"):
        stale.append(rows([2]))
    assert _ids(catalog.load_table(("db", "t"))) == [1, 3]


def test_a_rebase_the_tables_settings_forbid_is_a_400(
    iceberg_server: Server, catalog: RestCatalog
) -> None:
    """The rebased manifest list is written with the table's Avro codec: one that is no
    codec was a 500 with a traceback; it is the table's own setting, so a 400."""
    _table(catalog, "t", **{REBASE: "true"})
    stale = catalog.load_table(("db", "t"))
    catalog.load_table(("db", "t")).append(rows([1]))
    with catalog.load_table(("db", "t")).transaction() as tx:
        tx.set_properties({"write.avro.compression-codec": "bogus"})
    with pytest.raises(BadRequestError, match="bogus"):
        stale.append(rows([2]))
    assert _ids(catalog.load_table(("db", "t"))) == [1]


def test_setting_is_true_or_false(iceberg_server: Server, catalog: RestCatalog) -> None:
    base = f"{iceberg_server.url}/api/v1/tenants/{TENANT}/catalogs"
    reply = requests.post(base, json={"name": "bad", "properties": {REBASE: "yes"}}, timeout=30)
    assert_error(reply, 400)
    name = _new_catalog(iceberg_server, {REBASE: "false"})
    for value in ("1", "TRUE", ""):
        reply = requests.post(
            f"{base}/{name}/properties", json={"updates": {REBASE: value}}, timeout=30
        )
        assert_error(reply, 400)
    _table(catalog, "t")
    with pytest.raises(BadRequestError, match=REBASE):
        catalog.create_table(("db", "u"), SCHEMA, properties={REBASE: "on"})
    table = catalog.load_table(("db", "t"))
    with pytest.raises(BadRequestError, match=REBASE), table.transaction() as tx:
        tx.set_properties({REBASE: "True"})
    with table.transaction() as tx:
        tx.set_properties({REBASE: "true"})
    assert catalog.load_table(("db", "t")).properties[REBASE] == "true"


def _stale_commit(
    http: Http, table: Table, name: str, snapshot: dict[str, Any]
) -> requests.Response:
    """A raw append of ``snapshot`` on ``table``'s (stale) head."""
    head = table.metadata.current_snapshot_id
    body = {
        "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": head}],
        "updates": [
            {"action": "add-snapshot", "snapshot": snapshot},
            {
                "action": "set-snapshot-ref",
                "ref-name": "main",
                "type": "branch",
                "snapshot-id": snapshot["snapshot-id"],
            },
        ],
    }
    return http.call("POST", http.table_path(("db",), name), json=body)


def test_hostile_manifest_list_outside_the_table(
    iceberg_server: Server, catalog_name: str, catalog: RestCatalog, tmp_path: Path
) -> None:
    """A stale append whose manifest list lies outside the table is refused (400) before
    the server reads it; one of a version 3 table is not rebased (409)."""
    http = Http(iceberg_server.url, catalog_name)
    _table(catalog, "t", **{REBASE: "true"})
    catalog.load_table(("db", "t")).append(rows([1]))
    stale = catalog.load_table(("db", "t"))
    catalog.load_table(("db", "t")).append(rows([2]))
    head = catalog.load_table(("db", "t"))
    current = head.current_snapshot()
    assert current is not None
    outside = tmp_path / "elsewhere.avro"  # a real manifest list, outside every table
    outside.write_bytes(Path(current.manifest_list.removeprefix("file://")).read_bytes())
    snapshot = {
        "snapshot-id": 4242,
        "parent-snapshot-id": stale.metadata.current_snapshot_id,
        "sequence-number": 2,
        "timestamp-ms": 1,
        "manifest-list": outside.as_uri(),
        "summary": {"operation": "append", "added-records": "1"},
        "schema-id": 0,
    }
    reply = _stale_commit(http, stale, "t", snapshot)
    assert_error(reply, 400)
    assert "manifest list" in reply.json()["error"]["message"]
    assert catalog.load_table(("db", "t")).metadata == head.metadata  # nothing written

    _table(catalog, "v3", **{REBASE: "true", "format-version": "3"})
    stale = catalog.load_table(("db", "v3"))
    lineage = {**snapshot, "parent-snapshot-id": None, "sequence-number": 1}
    lineage |= {"first-row-id": 0, "added-rows": 1, "snapshot-id": 1}
    lineage["manifest-list"] = f"{stale.location()}/metadata/snap-1.avro"
    assert _stale_commit(http, stale, "v3", lineage).status_code == 200
    lineage |= {"snapshot-id": 2, "manifest-list": f"{stale.location()}/metadata/snap-2.avro"}
    reply = _stale_commit(http, stale, "v3", lineage)
    assert_error(reply, 409)
    assert "not rebased: version 3" in reply.json()["error"]["message"]


def test_version_1_table_is_rebased(iceberg_server: Server, catalog: RestCatalog) -> None:
    """Version 1 has no sequence numbers: the rebased list is a version 1 list."""
    _table(catalog, "v1", **{REBASE: "true", "format-version": "1"})
    stale = catalog.load_table(("db", "v1"))
    catalog.load_table(("db", "v1")).append(rows([1]))
    stale.append(rows([2]))
    table = catalog.load_table(("db", "v1"))
    assert table.format_version == 1
    assert _ids(table) == [1, 2]
    chain = _chain(table)
    assert [_rebased(s) for s in chain] == [False, True]
    assert chain[1].parent_snapshot_id == chain[0].snapshot_id
    assert chain[1].summary is not None and chain[1].summary["total-records"] == "2"
