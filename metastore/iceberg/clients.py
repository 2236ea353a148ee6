"""OAuth2 clients as system records of the default tenant, kept equal to the configured list.

Until principals are managed through the API, ``METASTORE_AUTH_CLIENTS`` is the
truth: at startup every listed client's record is created or, if its secret
changed, rewritten, and every record no longer listed is deleted. The records
are written through commits, so in cluster mode they replicate through the
changelog and every node verifies tokens against the same list (which is why
every node must be configured with the same list).

A record holds the secret's PBKDF2 hash, its salt, and a random ``generation``
that is drawn anew whenever the record is created or its secret rotated.
Tokens carry the generation they were issued under; a token whose client
record is gone or has another generation is refused, so removing a client or
rotating its secret revokes every token issued before.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from metastore.changes import CreateEntity, DeleteEntity, UpdateEntity
from metastore.commits import CommitRequest
from metastore.errors import AlreadyExists, CommitConflict, NotFound
from metastore.iceberg.hashing import hash_secret, secret_matches
from metastore.keys import SYSTEM_CATALOG, EntityKey, Kind
from metastore.requirements import AssertVersion, Requirement
from metastore.service import Metastore

CLIENT_PREFIX = "client:"
_MAX_TRIES = 20  # a concurrent writer of the same record (another node starting) moved it


def client_key(client_id: str) -> EntityKey:
    return EntityKey(Kind.SYSTEM, (), CLIENT_PREFIX + client_id)


@dataclass(frozen=True, slots=True)
class ClientRecord:
    salt: bytes
    hash: str
    generation: str

    @classmethod
    def new(cls, secret: str) -> ClientRecord:
        """Hashes: call off the event loop."""
        salt = secrets.token_bytes(16)
        return cls(salt, hash_secret(secret, salt), secrets.token_hex(16))

    @classmethod
    def decoy(cls) -> ClientRecord:
        """Hashed against for unknown ids, so they cost what a real client costs."""
        return cls(secrets.token_bytes(16), secrets.token_hex(32), "")

    @classmethod
    def of(cls, properties: Mapping[str, str]) -> ClientRecord | None:
        """The stored record, or None if it is not one this version wrote."""
        try:
            return cls(
                bytes.fromhex(properties["salt"]), properties["hash"], properties["generation"]
            )
        except (KeyError, ValueError):
            return None

    def properties(self) -> dict[str, str]:
        return {"salt": self.salt.hex(), "hash": self.hash, "generation": self.generation}


class ClientRecords:
    def __init__(self, metastore: Metastore, tenant: str) -> None:
        self._metastore = metastore
        self._tenant = tenant

    def get(self, client_id: str) -> ClientRecord | None:
        try:
            entity = self._metastore.get_entity(self._tenant, SYSTEM_CATALOG, client_key(client_id))
        except NotFound:
            return None
        return ClientRecord.of(entity.properties)

    async def sync(self, clients: Mapping[str, str]) -> None:
        """Make the stored clients exactly ``clients`` (id -> secret)."""
        for client_id, secret in clients.items():
            await self._store(client_id, secret)
        for client_id in [c for c in self._stored_ids() if c not in clients]:
            with contextlib.suppress(NotFound):  # another node removed it first
                await self._commit((), DeleteEntity(client_key(client_id)), "remove client")

    async def _store(self, client_id: str, secret: str) -> None:
        key = client_key(client_id)
        for _ in range(_MAX_TRIES):
            try:
                entity = self._metastore.get_entity(self._tenant, SYSTEM_CATALOG, key)
            except NotFound:
                record = await asyncio.to_thread(ClientRecord.new, secret)
                with contextlib.suppress(AlreadyExists):  # then check what the other wrote
                    await self._commit((), CreateEntity(key, record.properties()), "add client")
                    return
                continue
            stored = ClientRecord.of(entity.properties)
            if stored is not None and await asyncio.to_thread(
                secret_matches, secret, stored.salt, stored.hash
            ):
                return
            record = await asyncio.to_thread(ClientRecord.new, secret)
            update = UpdateEntity(key, record.properties())
            with contextlib.suppress(CommitConflict):  # moved meanwhile: look again
                await self._commit((AssertVersion(key, entity.version),), update, "rotate client")
                return
        raise CommitConflict(f"client {client_id!r} kept changing while being stored")

    def _stored_ids(self) -> Iterator[str]:
        token: str | None = None
        while True:
            page = self._metastore.list_entities(
                self._tenant, SYSTEM_CATALOG, (), Kind.SYSTEM, token, 1000
            )
            for entity in page.items:
                if entity.path[-1].startswith(CLIENT_PREFIX):
                    yield entity.path[-1].removeprefix(CLIENT_PREFIX)
            if not page.next_token:
                return
            token = page.next_token

    async def _commit(
        self,
        requirements: tuple[Requirement, ...],
        change: CreateEntity | UpdateEntity | DeleteEntity,
        operation: str,
    ) -> None:
        request = CommitRequest(requirements, (change,), principal="system", operation=operation)
        await self._metastore.commit(self._tenant, SYSTEM_CATALOG, request)
