"""``metastore audit`` on real stores: clean when healthy, every kind of dangling
reference reported when planted through the persistence API (and, for a metadata
file, removed from the warehouse)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField
from pyspark.sql import SparkSession

from harness.node import NodeProcess
from metastore.catalog.service import catalog_ref, tenant_ref
from metastore.model.codec import default_codec
from metastore.model.index import StripeRef
from metastore.model.keys import CATALOG_RECORD, SYSTEM_CATALOG, EntityKey, Kind, ObjKey
from metastore.model.objtypes import COMMIT, ENTITY
from metastore.model.records import Commit, Entity
from metastore.persistence.base import Ref, RefUpdate, StoredObject
from metastore.persistence.rocksdb import RocksDBPersistence
from tests.pipeline.conftest import run_job
from tests.pipeline.support import Http

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))
CATALOGS = ("head", "parent", "stripe", "entity", "attachment", "metadata")


def populate(http: Http, tenant: str, catalogs: tuple[str, ...]) -> None:
    """A tenant whose catalogs each hold a namespace, a native table and an Iceberg table."""
    http.ok("POST", "/api/v1/tenants", {"name": tenant})
    for name in catalogs:
        http.ok("POST", f"/api/v1/tenants/{tenant}/catalogs", {"name": name})
        base = f"/api/v1/tenants/{tenant}/catalogs/{name}"
        http.ok("POST", f"{base}/namespaces", {"namespace": ["ns"]})
        http.ok("POST", f"{base}/namespaces/ns/tables", {"name": "native"})
        client = RestCatalog("t", uri=http.url, warehouse=f"{tenant}/{name}")
        client.create_table(("ns", "ice"), SCHEMA)


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    root = tmp_path_factory.mktemp("healthy")
    with NodeProcess(root / "data", log_path=root / "node.log") as node:
        populate(Http(node.url), "acme", ("sales", "ops"))
        yield node


def test_a_healthy_running_node_audits_clean(
    spark: SparkSession, healthy: NodeProcess, tmp_path: Path
) -> None:
    ran = run_job(spark, "audit", "--url", healthy.url, "--out", str(tmp_path), "--json")
    assert ran.status == 0, ran.stdout
    summary = ran.summary
    assert summary["dangling"] == 0
    report = json.loads(Path(summary["report"]).read_text())
    assert report["findings"] == [] and report["catalogs"] >= 3  # default, sales, ops
    assert summary["objects"] > 0 and summary["records"] > 0
    assert "nothing dangles" in ran.stdout
    assert spark.read.parquet(str(tmp_path / "findings.parquet")).count() == 0
    # the job took a checkpoint and deleted it when done
    admin = Http(healthy.url)
    assert admin.ok("GET", "/api/v1/admin/checkpoints")["checkpoints"] == []


def test_one_catalog_of_one_tenant(
    spark: SparkSession, healthy: NodeProcess, tmp_path: Path
) -> None:
    ran = run_job(
        spark, "audit", "--url", healthy.url, "--tenant", "acme", "--catalog", "sales",
        "--out", str(tmp_path), "--json",
    )  # fmt: skip
    assert ran.status == 0, ran.stdout
    assert ran.summary["catalogs"] == 1 and ran.summary["dangling"] == 0


# --- planted damage -------------------------------------------------------------------


class Planter:
    """Damage written through the persistence API into a stopped node's store."""

    def __init__(self, store: RocksDBPersistence, tenant: str) -> None:
        self.store = store
        self.tenant = tenant
        self.codec = default_codec()
        self.next_id = 1 << 60

    def fresh_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def head(self, catalog: str) -> tuple[Ref, Commit]:
        ref = self.store.get_ref(catalog_ref(self.tenant, catalog))
        assert ref is not None
        (stored,) = self.store.get_objects([ObjKey(self.tenant, catalog, COMMIT.name, ref.head)])
        assert stored is not None
        return ref, Commit.decode(self.codec, ref.head, stored.data)

    def commit(self, catalog: str, commit: Commit, *extra: StoredObject) -> int:
        """Store ``commit`` (and ``extra``) and move the catalog's HEAD to it."""
        ref, _ = self.head(catalog)
        key = ObjKey(self.tenant, catalog, COMMIT.name, commit.id)
        stored = StoredObject(key, commit.encode(self.codec), 1)
        self.move(catalog, ref, commit.id, stored, *extra)
        return commit.id

    def move(self, catalog: str, ref: Ref, head: int, *objects: StoredObject) -> None:
        update = RefUpdate(ref.key, ref.head, ref.advanced(head, ref.created_at_us + 1))
        self.store.write(list(objects), update)

    def next_commit(self, catalog: str, **changes: Any) -> Commit:
        _, head = self.head(catalog)
        base = {"id": self.fresh_id(), "parent": head.id, "seq": head.seq + 1}
        return replace(head, **(base | changes))


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A stopped node's store with one kind of damage per catalog of tenant ``dmg``, and
    tenant ``gone`` deleted under its catalog ``left`` (the tenant-delete race)."""
    root = tmp_path_factory.mktemp("planted")
    with NodeProcess(root / "data", log_path=root / "node.log") as node:
        http = Http(node.url)
        populate(http, "dmg", CATALOGS)
        http.ok("POST", "/api/v1/tenants", {"name": "gone"})
        http.ok("POST", "/api/v1/tenants/gone/catalogs", {"name": "left"})
        client = RestCatalog("t", uri=node.url, warehouse="dmg/metadata")
        metadata_file = client.load_table(("ns", "ice")).metadata_location
    store = RocksDBPersistence(root / "data" / "rocksdb")
    planter = Planter(store, "dmg")
    expect: dict[str, Any] = {}
    try:
        # a HEAD naming a commit that is not there
        ref, _ = planter.head("head")
        expect["missing-head"] = planter.fresh_id()
        planter.move("head", ref, expect["missing-head"])
        # a commit whose parent is not there
        expect["missing-parent"] = planter.fresh_id()
        planter.commit("parent", planter.next_commit("parent", parent=expect["missing-parent"]))
        # a commit whose index spills into a stripe that is not there
        _, head = planter.head("stripe")
        stripe = replace(head.stripes[0], id=planter.fresh_id()) if head.stripes else None
        missing_stripe = stripe or StripeRef(b"\x00", b"\xff", planter.fresh_id())
        planter.commit("stripe", planter.next_commit("stripe", stripes=(missing_stripe,)))
        expect["missing-stripe"] = missing_stripe.id
        # an index entry naming an entity object that is not there
        _, head = planter.head("entity")
        key = EntityKey(Kind.TABLE, ("ns",), "ghost").encode()
        index = tuple(sorted((*head.index, (key, (ENTITY.name, planter.fresh_id())))))
        expect["missing-entity"] = index[[k for k, _ in index].index(key)][1][1]
        planter.commit("entity", planter.next_commit("entity", index=index))
        # an entity whose attachment (a piece of Iceberg metadata) is not there
        _, head = planter.head("attachment")
        entity = Entity(
            planter.fresh_id(), Kind.TABLE, ("ns", "broken"), {}, None, 1, 1, 1,
            {"core": planter.fresh_id()},
        )  # fmt: skip
        stored = StoredObject(
            ObjKey("dmg", "attachment", ENTITY.name, entity.entity_id),
            entity.encode(planter.codec),
            1,
        )
        key = entity.key.encode()
        index = tuple(sorted((*head.index, (key, (ENTITY.name, entity.entity_id)))))
        planter.commit("attachment", planter.next_commit("attachment", index=index), stored)
        expect["missing-attachment"] = entity.attachments["core"]
        # the tenant ref gone, its catalog left behind
        gone = store.get_ref(tenant_ref("gone"))
        assert gone is not None
        store.write([], RefUpdate(gone.key, gone.head, None))
        assert store.get_ref(catalog_ref("gone", "left")) is not None
        assert store.get_ref(tenant_ref("gone")) is None and SYSTEM_CATALOG == ""
        assert CATALOG_RECORD.kind is Kind.SYSTEM
    finally:
        store.close()
    # the current metadata file of an Iceberg table removed from the warehouse
    path = Path(metadata_file.removeprefix("file://"))
    path.unlink()
    expect["missing-metadata-file"] = metadata_file
    return {"store": root / "data" / "rocksdb", "expect": expect}


def test_every_kind_of_dangling_reference_is_reported(
    spark: SparkSession, planted: dict[str, Any], tmp_path: Path
) -> None:
    ran = run_job(
        spark, "audit", "--data-dir", str(planted["store"]), "--out", str(tmp_path), "--json"
    )
    assert ran.status == 1, ran.stdout
    report = json.loads(Path(ran.summary["report"]).read_text())
    findings = report["findings"]
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for finding in findings:
        by_kind.setdefault(finding["kind"], []).append(finding)
    expect = planted["expect"]
    catalog_of = {
        "missing-head": "head",
        "missing-parent": "parent",
        "missing-stripe": "stripe",
        "missing-entity": "entity",
        "missing-attachment": "attachment",
        "missing-metadata-file": "metadata",
    }
    for kind, catalog in catalog_of.items():
        mine = [f for f in by_kind.get(kind, []) if (f["tenant"], f["catalog"]) == ("dmg", catalog)]
        assert mine, f"{kind} not reported: {findings}"
        if kind == "missing-metadata-file":
            assert mine[0]["detail"] == expect[kind] and mine[0]["entity"] == "ns.ice"
        else:
            assert str(expect[kind]) in {f["object_id"] for f in mine}, mine
    orphans = by_kind.get("orphan-catalog", [])
    assert [(f["tenant"], f["catalog"]) for f in orphans] == [("gone", "left")]
    # only the damaged catalogs have findings
    assert {(f["tenant"], f["catalog"]) for f in findings} == {
        ("dmg", c) for c in catalog_of.values()
    } | {("gone", "left")}
    assert ran.summary["dangling"] == len(findings)
    frame = spark.read.parquet(str(tmp_path / "findings.parquet"))
    assert frame.count() == len(findings)
    assert "missing-head" in ran.stdout and "orphan-catalog" in ran.stdout
