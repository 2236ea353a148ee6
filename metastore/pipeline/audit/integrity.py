"""Referential integrity of one catalog, as pure checks over its rows.

What must resolve, and the finding when it does not:

- every ref's HEAD (``missing-head``) and recent HEADs (``missing-recent-head``);
- every commit's parent, back to the root (``missing-parent``), except the
  parents of commits older than the catalog's last garbage collection (a commit
  with operation ``gc``): ``metastore gc`` deletes history past its retention window;
- every index stripe a commit references (``missing-stripe``) and every object its
  index names (``missing-entity``);
- every attachment of every entity an index names (``missing-attachment``: the
  pieces of Iceberg metadata), and at a HEAD the whole assembled metadata;
- every live table's current metadata file in the warehouse
  (``missing-metadata-file``; checked through the catalog's storage, with
  PyIceberg's FileIO);
- every catalog's tenant (``orphan-catalog``: the tenant-delete race can leave a
  catalog whose tenant ref is gone), decided over all catalogs by ``orphans``.

A catalog's commits share most of their index, so stripes and entities are checked
once each by id however many commits name them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from metastore.engine.objects import MissingObject
from metastore.model.keys import EntityKey, Kind
from metastore.model.objtypes import COMMIT, ENTITY, INDEX, METADATA_PIECE
from metastore.model.records import Commit
from metastore.pipeline.catalog_reader import CatalogRows
from metastore.storage.settings import Storage

FindingKind = Literal[
    "missing-head",
    "missing-recent-head",
    "missing-parent",
    "missing-stripe",
    "missing-entity",
    "missing-attachment",
    "missing-metadata-file",
    "orphan-catalog",
]
FINDING_KINDS: tuple[FindingKind, ...] = FindingKind.__args__  # type: ignore[attr-defined]
GC = "gc"  # the operation of a garbage collection's sweep commit
# (metadata location, the catalog's storage) -> the file exists; None: cannot tell
FileCheck = Callable[[str, Storage | None], bool | None]


@dataclass(frozen=True, slots=True)
class Finding:
    kind: FindingKind
    tenant: str
    catalog: str
    ref: str = ""
    commit_id: int | None = None
    object_type: str | None = None
    object_id: int | None = None
    entity: str | None = None  # the entity's path, dotted
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        for key in ("commit_id", "object_id"):  # 64-bit ids: strings, as in the APIs
            if body[key] is not None:
                body[key] = str(body[key])
        return body


@dataclass
class CatalogAudit:
    tenant: str
    catalog: str
    has_main: bool
    objects: int = 0  # objects checked
    findings: list[Finding] = field(default_factory=list)
    unchecked_files: int = 0  # metadata files the job could not look at (no credentials)


def audit_catalog(rows: CatalogRows, file_exists: FileCheck) -> CatalogAudit:
    audit = CatalogAudit(rows.tenant, rows.catalog, rows.main() is not None)
    stripes: set[int] = set()
    named: set[tuple[str, int]] = set()
    commits: dict[int, tuple[str, Commit]] = {}  # every commit reached, with a ref's name

    def found(kind: FindingKind, **where: Any) -> None:
        audit.findings.append(Finding(kind, rows.tenant, rows.catalog, **where))

    for ref in rows.refs():
        name = ref.key.name
        for position, head in enumerate((ref.head, *ref.recent)):
            if rows.commit(head) is None:
                kind: FindingKind = "missing-head" if position == 0 else "missing-recent-head"
                found(kind, ref=name, commit_id=head, object_type=COMMIT.name, object_id=head)
                continue
            for commit in rows.history(head):
                if commit.id in commits:
                    break
                commits[commit.id] = (name, commit)
                audit.objects += 1
                if commit.parent and rows.commit(commit.parent) is None:
                    found(
                        "missing-parent",
                        ref=name,
                        commit_id=commit.id,
                        object_type=COMMIT.name,
                        object_id=commit.parent,
                    )
    for name, commit in commits.values():
        entries: list[tuple[bytes, Any]] = list(commit.index)
        for stripe in commit.stripes:
            if stripe.id in stripes:
                continue
            stripes.add(stripe.id)
            audit.objects += 1
            if not rows.exists(INDEX.name, stripe.id):
                found(
                    "missing-stripe",
                    ref=name,
                    commit_id=commit.id,
                    object_type=INDEX.name,
                    object_id=stripe.id,
                )
                continue
            entries.extend(rows.objects.stripe(stripe.id))
        for raw_key, value in entries:
            if value is None or value in named:
                continue
            named.add(value)
            _check_entity(rows, audit, found, name, commit.id, raw_key, value)
    collected = max((c.created_at_us for _, c in commits.values() if c.operation == GC), default=0)
    audit.findings = [
        f
        for f in audit.findings
        if not (
            f.kind == "missing-parent"
            and f.commit_id is not None
            and commits[f.commit_id][1].created_at_us < collected
        )
    ]
    for ref in rows.refs():
        current = rows.commit(ref.head)
        if current is not None:
            _check_head(rows, audit, found, ref.key.name, current, file_exists)
    return audit


def _check_entity(
    rows: CatalogRows,
    audit: CatalogAudit,
    found: Callable[..., None],
    ref: str,
    commit_id: int,
    raw_key: bytes,
    value: tuple[str, int],
) -> None:
    type_name, obj_id = value
    audit.objects += 1
    where = {"ref": ref, "commit_id": commit_id, "entity": EntityKey.decode(raw_key).display()}
    if not rows.exists(type_name, obj_id):
        found("missing-entity", object_type=type_name, object_id=obj_id, **where)
        return
    if type_name != ENTITY.name:
        return
    for name, piece in rows.objects.entity(obj_id).attachments.items():
        audit.objects += 1
        if not rows.exists(METADATA_PIECE.name, piece):
            found(
                "missing-attachment",
                object_type=METADATA_PIECE.name,
                object_id=piece,
                detail=f"attachment {name!r} of entity object {obj_id}",
                **where,
            )


def _check_head(
    rows: CatalogRows,
    audit: CatalogAudit,
    found: Callable[..., None],
    ref: str,
    head: Commit,
    file_exists: FileCheck,
) -> None:
    """At a HEAD: the assembled Iceberg metadata of every live table and view, and every
    live table's metadata file in the warehouse."""
    storage: Storage | None = None
    try:
        storage = rows.storage(head)
        live = list(rows.live(head))
    except MissingObject:
        return  # the missing stripe or entity is reported already
    for key, entity in live:
        if key.kind not in (Kind.TABLE, Kind.VIEW):
            continue
        where = {"ref": ref, "commit_id": head.id, "entity": key.display()}
        try:
            assembled = rows.iceberg(entity)
        except MissingObject as exc:
            if not any(f.entity == key.display() for f in audit.findings):
                found("missing-attachment", detail=exc.message, **where)
            continue
        if assembled is None or key.kind is not Kind.TABLE:
            continue
        location = assembled[1]
        if location is None:
            continue
        exists = file_exists(location, storage)
        if exists is None:
            audit.unchecked_files += 1
        elif not exists:
            found("missing-metadata-file", detail=location, **where)


def orphans(audits: Iterable[CatalogAudit]) -> list[Finding]:
    """Catalogs whose tenant is gone (a tenant's own records are catalog "")."""
    listed = list(audits)
    tenants = {a.tenant for a in listed if a.catalog == "" and a.has_main}
    return [
        Finding(
            "orphan-catalog",
            a.tenant,
            a.catalog,
            ref="main",
            detail=f"catalog {a.catalog!r} has a ref but tenant {a.tenant!r} has none",
        )
        for a in listed
        if a.catalog != "" and a.has_main and a.tenant not in tenants
    ]
