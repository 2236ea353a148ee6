"""``Idempotency-Key``: a retried mutation gets the first outcome, recorded in its commit.

One mechanism for both APIs. The record of a successful mutation is a system
entity of the catalog it changed, created **in the same commit**, so it exists
iff the mutation happened, on every node. A retry finds it and replays the
outcome; a retry racing the first attempt fails on the record's creation (or on
what the first attempt changed) and replays too. Failed requests write nothing,
so they leave no record and may be retried.

A key is scoped to the catalog (of its tenant) the request changes, and bound to
the request and its caller: the record keeps a fingerprint of the method, path,
query and body, and the principal. The same key with another request, or from
another principal, is a 400 and never replays anything, so one caller cannot read
another's outcome by guessing its key.

The native API records the id of the commit and replays the outcome read back
at that commit (``Idempotency.run``); the Iceberg API records its response body
or metadata file (``metastore.iceberg.routes.recorded_answers``).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlencode

from aiohttp import web

from metastore.catalog.service import Metastore
from metastore.engine.commits import CommitOutcome, Record
from metastore.errors import BadRequest, MetastoreError, NotFound
from metastore.http.caller import principal_of
from metastore.http.validation import body_of
from metastore.model.changes import Change, CreateEntity
from metastore.model.keys import EntityKey, Kind
from metastore.model.records import Entity

HEADER = "Idempotency-Key"
_KEY = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
T = TypeVar("T")


def fingerprint(request: web.Request) -> str:
    """What the request is: method, path, query (in a canonical order) and body bytes."""
    digest = hashlib.sha256()
    query = urlencode(sorted(request.query.items()))
    for part in (request.method.encode(), request.path.encode(), query.encode()):
        digest.update(len(part).to_bytes(8, "big") + part)
    digest.update(body_of(request))
    return digest.hexdigest()


def refuse_key(request: web.Request, operation: str) -> None:
    """400 for a key on an operation whose outcome no commit can hold (a ref goes away)."""
    if HEADER in request.headers:
        raise BadRequest(
            f"{HEADER} is not supported on {operation}: it deletes or moves the ref its "
            "record would live in; send the request without it"
        )


@dataclass(frozen=True, slots=True)
class Idempotency:
    """One request's key (None without the header), where its record lives, and whose it is."""

    metastore: Metastore
    tenant: str
    catalog: str
    key: str | None
    request: str  # fingerprint(): a key reused for another request is refused
    principal: str
    operation: str  # method and path, for people reading the record

    @classmethod
    def of(
        cls, request: web.Request, metastore: Metastore, tenant: str, catalog: str
    ) -> Idempotency:
        key = request.headers.get(HEADER)
        if key is not None and not _KEY.fullmatch(key):
            raise BadRequest(f"{HEADER} must be 1-128 characters of A-Z a-z 0-9 . _ : -")
        return cls(
            metastore,
            tenant,
            catalog,
            key,
            fingerprint(request) if key is not None else "",
            principal_of(request),
            f"{request.method} {request.path}",
        )

    @property
    def entity_key(self) -> EntityKey:
        return EntityKey(Kind.SYSTEM, (), f"idempotency:{self.key}")

    def record(self, **outcome: str) -> tuple[Change, ...]:
        """The change that stores this request's outcome (none without a key)."""
        if self.key is None:
            return ()
        binding = {"request": self.request, "principal": self.principal}
        properties = {"operation": self.operation, **binding, **outcome}
        return (CreateEntity(self.entity_key, properties),)

    def stored(self) -> Mapping[str, str] | None:
        """The recorded outcome of this key, if a request with it succeeded; 400 if that
        was another request or another principal's."""
        if self.key is None:
            return None
        try:
            entity = self.metastore.get_entity(self.tenant, self.catalog, self.entity_key)
        except NotFound:  # no record, or no such tenant or catalog (yet)
            return None
        props = entity.properties
        if props.get("request") != self.request or props.get("principal") != self.principal:
            raise BadRequest(f"{HEADER} {self.key!r} was used for another request")
        return props

    # --- the native API: the record names the commit; the outcome is read back there ---

    async def run(
        self,
        attempt: Callable[[Record | None], Awaitable[T]],
        replayed: Callable[[CommitOutcome], T],
    ) -> T:
        """``attempt(record)`` once, or ``replayed(first outcome)`` for a retried key.

        ``attempt`` passes ``record`` as its commit request's ``record``. When the
        attempt fails as a client error (the record exists, or what it would change
        already changed) and the identical request succeeded, that outcome wins.
        """
        if self.key is None:
            return await attempt(None)

        def first() -> T | None:
            outcome = self.outcome()
            return None if outcome is None else replayed(outcome)

        return await once(lambda: attempt(self._record), first)

    def _record(self, commit_id: int) -> Sequence[Change]:
        return self.record(commit=str(commit_id))

    def outcome(self) -> CommitOutcome | None:
        """The outcome of the recorded commit: its changes, read at that commit."""
        props = self.stored()
        if props is None:
            return None
        if "commit" not in props:
            raise BadRequest(f"{HEADER} {self.key!r} was used for another request")
        at = int(props["commit"])
        commit = self.metastore.head(self.tenant, self.catalog, at)
        entities: dict[EntityKey, Entity | None] = {}
        for change in commit.changes:
            key = EntityKey.decode(change.key)
            if key == self.entity_key:
                continue
            entities[key] = (
                None
                if change.action == "DELETE"
                else self.metastore.get_entity(self.tenant, self.catalog, key, at)
            )
        return CommitOutcome(commit.id, commit.seq, entities)


async def once(attempt: Callable[[], Awaitable[T]], first: Callable[[], T | None]) -> T:
    """The first outcome of a keyed request if there is one, else ``attempt()``.

    An attempt that fails as a client error (409, 404, ...) may have lost a race
    to the identical request, which then recorded its outcome: that outcome is the
    answer. Server errors (an unknown outcome, a write to forward) are never masked.
    ``first`` reads the record (and the commit it names) from the store: a thread.
    """
    if (stored := await asyncio.to_thread(first)) is not None:
        return stored
    try:
        return await attempt()
    except MetastoreError as exc:
        if exc.status >= 500 or (stored := await asyncio.to_thread(first)) is None:
            raise
        return stored


def first_entity(outcome: CommitOutcome) -> Entity:
    """The one entity a tenant or catalog operation produced."""
    for entity in outcome.entities.values():
        if entity is not None:
            return entity
    raise AssertionError("the recorded commit produced no entity")
