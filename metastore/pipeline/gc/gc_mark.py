"""The mark phase of garbage collection, as a pure function of one catalog's rows.

What stays (reachable):

- every ref's HEAD and its recent HEADs (a ref reset may move HEAD back to one),
- every commit created inside the history retention window (``?at=`` reads and
  ref resets are promised for that long), whether on a ref's history or not,
- for each of those commits: its index stripes, every object its index names, each
  entity's attachments (Iceberg metadata pieces) and, for the pieces that are log
  pages, the whole chain of older pages they link by ``prev``.

Everything else stored in the catalog is unreachable; it is a *candidate* only if it
was also created before ``mark - grace``: an object written moments ago may belong
to a commit still on its way. Candidates are deleted later, by the node, in a sweep
that spares whatever a commit made since the mark references again.

Tables' metadata files are collected alongside: every table location of a reachable
table entity, and every metadata file a reachable entity names (its current one and
its metadata log), for the warehouse part of the sweep (``gc_files``). A table's past
locations are among them, and a view may stand at one now (a table moved away frees
its location for anything): so every location a reachable view holds is collected too,
and no folder at or around one is listed for orphans. Views' metadata files are not all
named anywhere (a view keeps no log of its files), so listing one would delete them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from metastore.engine.objects import MissingObject
from metastore.iceberg import pieces
from metastore.model.keys import MAIN_REF, Kind
from metastore.model.objtypes import COMMIT, ENTITY, INDEX, METADATA_PIECE
from metastore.model.records import Commit, Entity
from metastore.pipeline.catalog_reader import CatalogRows

LOG_ATTACHMENTS = frozenset((*pieces.TABLE_LAYOUT.logs, *pieces.VIEW_LAYOUT.logs))
Candidate = tuple[str, int, int, int]  # type, id, created_at_us, size in bytes


@dataclass(frozen=True, slots=True)
class MarkTimes:
    """The instants a mark decides by, in microseconds since the epoch."""

    mark_us: int
    grace_us: int
    retention_us: int

    @property
    def created_before_us(self) -> int:
        return self.mark_us - self.grace_us

    @property
    def retained_since_us(self) -> int:
        return self.mark_us - self.retention_us


@dataclass
class CatalogMark:
    tenant: str
    catalog: str
    mark_head: int  # main's HEAD when marked (0: the catalog has no main)
    heads: dict[str, list[int]] = field(default_factory=dict)  # ref -> HEAD, recent HEADs
    objects: int = 0  # stored objects looked at
    reachable: int = 0
    candidates: list[Candidate] = field(default_factory=list)
    candidate_bytes: int = 0
    table_locations: set[str] = field(default_factory=set)
    metadata_files: set[str] = field(default_factory=set)  # referenced by a reachable entity
    view_locations: set[str] = field(default_factory=set)  # of reachable views: never listed
    storage_roots: tuple[str, ...] = ()  # its storage's allowed locations, at main's HEAD


def mark_catalog(rows: CatalogRows, times: MarkTimes) -> CatalogMark:
    """The reachable set and the candidates of one catalog's rows."""
    refs = rows.refs()
    main = next((r for r in refs if r.key.name == MAIN_REF), None)
    mark = CatalogMark(rows.tenant, rows.catalog, main.head if main is not None else 0)
    main_head = rows.commit(main.head) if main is not None else None
    storage = rows.storage(main_head) if main_head is not None else None
    mark.storage_roots = storage.allowed if storage is not None else ()
    walker = _Reach(rows, mark)
    for ref in refs:
        mark.heads[ref.key.name] = [ref.head, *ref.recent]
        for head in (ref.head, *ref.recent):
            walker.commit(head)
    stored = list(rows.persistence.scan_objects(rows.tenant, rows.catalog))
    for obj in stored:
        if obj.key.type == COMMIT.name and obj.created_at_us >= times.retained_since_us:
            walker.commit(obj.key.id)
    mark.objects = len(stored)
    mark.reachable = len(walker.seen)
    for obj in stored:
        if (obj.key.type, obj.key.id) in walker.seen:
            continue
        if obj.created_at_us >= times.created_before_us:
            continue
        mark.candidates.append((obj.key.type, obj.key.id, obj.created_at_us, len(obj.data)))
        mark.candidate_bytes += len(obj.data)
    return mark


class _Reach:
    """Marks objects reachable from commits, each object visited once."""

    def __init__(self, rows: CatalogRows, mark: CatalogMark) -> None:
        self.rows = rows
        self.mark = mark
        self.seen: set[tuple[str, int]] = set()

    def _first(self, type_name: str, obj_id: int) -> bool:
        key = (type_name, obj_id)
        if key in self.seen:
            return False
        self.seen.add(key)
        return True

    def commit(self, commit_id: int) -> None:
        if not commit_id or not self._first(COMMIT.name, commit_id):
            return
        commit: Commit | None = self.rows.commit(commit_id)
        if commit is None:
            return  # dangling: audit reports it, the mark only keeps what exists
        entries: list[tuple[bytes, Any]] = list(commit.index)
        for stripe in commit.stripes:
            if not self._first(INDEX.name, stripe.id):
                continue
            try:
                entries.extend(self.rows.objects.stripe(stripe.id))
            except MissingObject:
                continue
        for _, value in entries:
            if value is not None:
                self.named(*value)

    def named(self, type_name: str, obj_id: int) -> None:
        if not self._first(type_name, obj_id) or type_name != ENTITY.name:
            return
        try:
            entity = self.rows.objects.entity(obj_id)
        except MissingObject:
            return
        self.attachments(entity)

    def attachments(self, entity: Entity) -> None:
        if entity.kind is Kind.TABLE and entity.location:
            self.mark.table_locations.add(entity.location)
        if entity.kind is Kind.VIEW and entity.location:
            self.mark.view_locations.add(entity.location)
        for name, piece_id in entity.attachments.items():
            if name == pieces.CORE:
                self._core(piece_id, entity)
            elif name in LOG_ATTACHMENTS:
                self._pages(piece_id, name == "metadata-log")
            else:
                self._first(METADATA_PIECE.name, piece_id)

    def _core(self, piece_id: int, entity: Entity) -> None:
        if not self._first(METADATA_PIECE.name, piece_id):
            return
        core = self._load(piece_id)
        if not isinstance(core, dict):
            return
        location = core.get(pieces.METADATA_LOCATION)
        if isinstance(location, str):
            self.mark.metadata_files.add(location)
        own_location = core.get("location")
        if isinstance(own_location, str) and entity.kind is Kind.TABLE:
            self.mark.table_locations.add(own_location)
        elif isinstance(own_location, str) and entity.kind is Kind.VIEW:
            self.mark.view_locations.add(own_location)

    def _pages(self, page_id: int, metadata_log: bool) -> None:
        """A log's pages, newest first, linked by ``prev`` (frozen pages are shared)."""
        while page_id and self._first(METADATA_PIECE.name, page_id):
            page = self._load(page_id)
            if not isinstance(page, dict):
                return
            if metadata_log:
                self.mark.metadata_files.update(_metadata_files(page.get("items", ())))
            page_id = int(page.get("prev") or 0)

    def _load(self, piece_id: int) -> Any:
        try:
            return self.rows.piece(piece_id)
        except MissingObject:
            return None


def _metadata_files(items: Iterable[Any]) -> Iterable[str]:
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("metadata-file"), str):
            yield item["metadata-file"]
