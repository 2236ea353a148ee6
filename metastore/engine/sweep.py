"""The sweep of garbage collection: deleting marked objects as a commit.

A mark (a batch job) finds the objects of a catalog that nothing reached at the
catalog's HEAD then, ``mark_head``, and its recent HEADs. Between the mark and the
sweep, commits go on, and metadata pieces are content-addressed: a commit that
"adds" a piece already stored does not write it again, so a piece unreachable at
the mark can be referenced again before the sweep. Deleting it would break a live
table.

So a sweep is itself a commit on the catalog's ref, made by the commit engine in
the ref's lane like every other commit. ``SweepPlan.plan`` runs inside the engine,
against the HEAD the sweep commit is built on: it walks from that HEAD and from
each of the ref's recent HEADs back to the mark's HEAD and spares every candidate
that those newer commits reference (the commits, their index stripes, the entity
objects of their changes, those entities' attachments and the older log pages
those link by ``prev``). The deletions are
written with the sweep commit, in the same atomic write as its HEAD
compare-and-swap (``Persistence.write(..., deletes=...)``):

- a commit written before the sweep moved HEAD, so the sweep loses its CAS and is
  planned again on the fresh HEAD, where it sees the new reference;
- a commit prepared before the sweep and written after it loses its own CAS and is
  redone on the fresh state;
- a commit written after the sweep passes every object it references to ``write``,
  and the write's existence check, made at write time under the store's lock (or
  by the partition's owner, which writes every object it is given), finds the
  piece gone and writes it again. (An Iceberg commit leaves out pieces its table's
  current entity already references; its requirements pin that entity, whose
  pieces are either reachable at the mark or spared here.)

A HEAD that does not descend from the mark's HEAD (a ref reset) is walked back to
the first commit on the mark's HEAD's own history: the mark reached that commit's
objects through the ref's recent HEADs, and everything newer is spared.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from metastore.engine.objects import MissingObject, Objects
from metastore.errors import NoSuchCommit, ValidationFailed
from metastore.model.keys import ObjKey
from metastore.model.objtypes import COMMIT, ENTITY, INDEX, METADATA_PIECE, default_registry
from metastore.model.records import Commit

MAX_CANDIDATES = 10_000  # per sweep commit; a job sends its candidates in batches
_TYPES = default_registry()


@dataclass(frozen=True, slots=True)
class SweepResult:
    deleted: int
    spared: int  # referenced again by a commit newer than the mark
    missing: int  # candidates not stored any more
    commit_id: int  # 0 for a dry run (no commit)


@dataclass(slots=True)
class SweepCounts:
    """What this node's sweeps deleted and spared since it started (``/metrics``)."""

    deleted: int = 0
    spared: int = 0

    def add(self, result: SweepResult) -> None:
        self.deleted += result.deleted
        self.spared += result.spared


def check_candidates(tenant: str, catalog: str, candidates: Iterable[ObjKey]) -> tuple[ObjKey, ...]:
    """The candidates, each an immutable object of this catalog (else ``ValidationFailed``)."""
    checked: dict[ObjKey, None] = {}
    for key in candidates:
        if (key.tenant, key.catalog) != (tenant, catalog):
            raise ValidationFailed(f"candidate {key} is not an object of catalog {catalog!r}")
        if key.type not in _TYPES or _TYPES.get(key.type).mutable:
            raise ValidationFailed(f"candidate type {key.type!r} is not an immutable object type")
        if not 0 <= key.id < 1 << 64:
            raise ValidationFailed(f"candidate id {key.id} is out of range")
        checked[key] = None
    if len(checked) > MAX_CANDIDATES:
        raise ValidationFailed(f"at most {MAX_CANDIDATES} candidates per sweep")
    return tuple(checked)


class SweepPlan:
    """What a sweep commit deletes, decided against the HEAD it is built on.

    ``present`` tells which keys are stored (read at planning time: only sweeps
    delete, and they are serialized by the ref's CAS), so a candidate already gone
    is not counted as deleted. Each ``plan`` (one per attempt of the commit) leaves
    its counts in ``spared`` and ``missing``; the written attempt is the last.
    """

    def __init__(
        self,
        mark_head: int,
        candidates: tuple[ObjKey, ...],
        present: Callable[[Sequence[ObjKey]], list[bool]],
    ) -> None:
        self.mark_head = mark_head
        self.candidates = candidates
        self._present = present
        self.spared = 0  # referenced again by a commit newer than the mark
        self.missing = 0  # not stored (an earlier sweep took them)

    def plan(self, objects: Objects, head: Commit, recent: Sequence[int]) -> tuple[ObjKey, ...]:
        """The stored candidates no commit newer than the mark's HEAD references.

        ``head`` is the commit the sweep builds on, ``recent`` the ref's recent HEADs.
        """
        try:
            mark = objects.commit(self.mark_head)
        except NoSuchCommit:
            raise ValidationFailed(
                f"mark-head {self.mark_head} is not a commit of catalog {objects.catalog!r}"
            ) from None
        walk = _Walk(objects, mark)
        for root in dict.fromkeys((head.id, *recent)):
            walk.back_from(root)
        unreferenced = [key for key in self.candidates if key not in walk.protected]
        self.spared = len(self.candidates) - len(unreferenced)
        stored = self._present(unreferenced) if unreferenced else []
        deletes = tuple(key for key, here in zip(unreferenced, stored, strict=True) if here)
        self.missing = len(unreferenced) - len(deletes)
        return deletes


class _Walk:
    """Commits newer than the mark's HEAD and the objects they reference."""

    def __init__(self, objects: Objects, mark: Commit) -> None:
        self._objects = objects
        self._mark = mark
        self._history: dict[int, int] = {mark.seq: mark.id}  # seq -> id on the mark's chain
        self._oldest = mark
        self._truncated = False  # an ancestor of the mark's HEAD is gone (collected)
        self._seen: set[int] = set()
        self.protected: set[ObjKey] = set()

    def back_from(self, commit_id: int) -> None:
        """Protect what the commits from ``commit_id`` (a HEAD or a recent HEAD, which
        must exist) back to the mark's history reference. A parent that is gone was
        collected by an earlier sweep: it was history past the retention window, never
        newer than a mark, so nothing live lies beyond it."""
        commit_id_now: int = commit_id
        while commit_id_now and commit_id_now not in self._seen:
            self._seen.add(commit_id_now)
            try:
                commit = self._objects.commit(commit_id_now)
            except NoSuchCommit:
                if commit_id_now == commit_id:
                    raise  # a root: the ref names it, so the store is damaged
                return
            if self._on_mark_history(commit):
                return  # the mark reached it (its HEAD, or through the recent HEADs)
            self._protect(commit)
            commit_id_now = commit.parent

    def _on_mark_history(self, commit: Commit) -> bool:
        """``commit`` is the mark's HEAD or one of its ancestors."""
        if commit.seq > self._mark.seq:
            return False
        while self._oldest.seq > commit.seq and self._oldest.parent and not self._truncated:
            try:
                self._oldest = self._objects.commit(self._oldest.parent)
            except NoSuchCommit:  # collected: the mark's known history ends here, and a
                self._truncated = True  # commit below it is walked (and protected) instead
                break
            self._history[self._oldest.seq] = self._oldest.id
        return self._history.get(commit.seq) == commit.id

    def _protect(self, commit: Commit) -> None:
        key = self._objects.key
        self.protected.add(key(COMMIT.name, commit.id))
        self.protected.update(key(INDEX.name, stripe.id) for stripe in commit.stripes)
        index = self._objects.index(commit)
        if index is None:
            return
        for change in commit.changes:
            value = index.get(change.key)
            if value is None:
                continue  # deleted by this commit
            type_name, obj_id = value
            self.protected.add(key(type_name, obj_id))
            if type_name != ENTITY.name:
                continue
            try:
                entity = self._objects.entity(obj_id)
            except MissingObject:
                continue  # nothing to spare: audit reports the damage
            for piece in entity.attachments.values():
                self._protect_piece(piece)

    def _protect_piece(self, piece_id: int) -> None:
        """A piece, and for a log's page every older page it links by ``prev``: frozen
        pages are shared, so a table registered again between mark and sweep can link
        pages the mark found unreachable. A page already protected ends the walk (its
        older pages were protected with it)."""
        key = self._objects.key
        while piece_id and key(METADATA_PIECE.name, piece_id) not in self.protected:
            self.protected.add(key(METADATA_PIECE.name, piece_id))
            value = self._objects.piece(piece_id)
            if not (isinstance(value, dict) and value.keys() == {"prev", "items"}):
                return  # not a page (or missing: audit reports it)
            piece_id = int(value["prev"] or 0)
