"""Preconditions as data: each ``Assert...`` validates against the state being committed.

They are re-checked on every attempt of a commit (after a lost CAS the state may
have moved), so a requirement that held when the client read the state but no
longer holds becomes a ``CommitConflict`` (409), never a silent overwrite.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from metastore.errors import CommitConflict
from metastore.model.keys import EntityKey
from metastore.model.records import Entity


class StateView(Protocol):
    def get(self, key: EntityKey) -> Entity | None: ...

    def has_children(self, namespace: tuple[str, ...]) -> bool: ...


@dataclass(frozen=True, slots=True)
class AssertExists:
    key: EntityKey

    def validate(self, state: StateView) -> None:
        if state.get(self.key) is None:
            raise CommitConflict(
                f"requirement failed: {self.key.kind.label} {_n(self.key)} does not exist"
            )


@dataclass(frozen=True, slots=True)
class AssertNotExists:
    key: EntityKey

    def validate(self, state: StateView) -> None:
        if state.get(self.key) is not None:
            raise CommitConflict(f"requirement failed: {self.key.kind.label} {_n(self.key)} exists")


@dataclass(frozen=True, slots=True)
class AssertVersion:
    """The entity is at exactly ``version`` (optimistic concurrency on one entity)."""

    key: EntityKey
    version: int

    def validate(self, state: StateView) -> None:
        current = state.get(self.key)
        if current is None:
            raise CommitConflict(
                f"requirement failed: {self.key.kind.label} {_n(self.key)} does not exist"
            )
        if current.version != self.version:
            raise CommitConflict(
                f"requirement failed: {self.key.kind.label} {_n(self.key)} is at version "
                f"{current.version}, expected {self.version}"
            )


@dataclass(frozen=True, slots=True)
class AssertEntityId:
    """The name still denotes the same entity (not dropped and re-created)."""

    key: EntityKey
    entity_id: int

    def validate(self, state: StateView) -> None:
        current = state.get(self.key)
        if current is None or current.entity_id != self.entity_id:
            raise CommitConflict(
                f"requirement failed: {self.key.kind.label} {_n(self.key)} "
                f"is not entity {self.entity_id}"
            )


@dataclass(frozen=True, slots=True)
class AssertEmpty:
    """Nothing lives directly inside ``namespace`` (() = the catalog root)."""

    namespace: tuple[str, ...]

    def validate(self, state: StateView) -> None:
        if state.has_children(self.namespace):
            where = ".".join(self.namespace) or "the catalog"
            raise CommitConflict(f"requirement failed: {where} is not empty")


@dataclass(frozen=True, slots=True)
class AssertStill:
    """A fact outside the store that must still hold when the commit is built in its
    catalog's lane: ``check`` raises (nothing is written) when it does not. Blocking I/O
    in the lane's thread: only for rare requests (a register's metadata file)."""

    check: Callable[[], None]

    def validate(self, state: StateView) -> None:
        self.check()


Requirement = (
    AssertExists | AssertNotExists | AssertVersion | AssertEntityId | AssertEmpty | AssertStill
)


def _n(key: EntityKey) -> str:
    return key.display()
