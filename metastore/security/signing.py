"""The cluster's token signing keys: one record of the default tenant's system catalog.

Every node signs and verifies the tokens it issues with keys it reads from its
own view, so a token issued by one node is good on every node without shared
process state. The record ``token-keys`` holds every key still in use
(``key:<kid>``, 32 random bytes as hex), which one signs new tokens
(``current``), and when each earlier one stopped signing (``retired:<kid>``,
Unix seconds). Rotating draws a new current key in one commit; a retired key
still verifies the tokens it signed until no token it signed can be unexpired
(``KEEP_RETIRED_S``, the longest lifetime a node may give a token), and the first
rotation after that removes it. So a rotation needs no downtime and revokes
nothing; to revoke a principal's tokens, rotate its secret or disable it.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from metastore.catalog.service import Metastore
from metastore.engine.commits import CommitRequest, Record
from metastore.errors import AlreadyExists
from metastore.model.changes import Change, CreateEntity, DeleteEntity, UpdateEntity
from metastore.model.keys import SYSTEM_CATALOG, EntityKey, Kind
from metastore.model.requirements import AssertVersion

TOKEN_KEYS = EntityKey(Kind.SYSTEM, (), "token-keys")
LEGACY_KEY = EntityKey(Kind.SYSTEM, (), "token-key")  # the single key of earlier versions
KEEP_RETIRED_S = 86_400  # the longest token lifetime a node may be configured with
_KEY, _RETIRED = "key:", "retired:"


@dataclass(frozen=True, slots=True)
class KeyRing:
    current: str  # the kid that signs new tokens
    keys: Mapping[str, bytes]  # every kid still accepted -> its secret
    retired: Mapping[str, int]  # kid -> when it stopped signing (Unix seconds)

    @classmethod
    def new(cls) -> KeyRing:
        kid = secrets.token_hex(8)
        return cls(kid, {kid: secrets.token_bytes(32)}, {})

    @classmethod
    def of(cls, properties: Mapping[str, str]) -> KeyRing:
        keys = {
            name.removeprefix(_KEY): bytes.fromhex(value)
            for name, value in properties.items()
            if name.startswith(_KEY)
        }
        retired = {
            name.removeprefix(_RETIRED): int(value)
            for name, value in properties.items()
            if name.startswith(_RETIRED)
        }
        current = properties["current"]
        if current not in keys:
            raise ValueError(f"the current token key {current!r} is not in the record")
        return cls(current, keys, retired)

    def properties(self) -> dict[str, str]:
        props = {"current": self.current}
        props |= {_KEY + kid: key.hex() for kid, key in self.keys.items()}
        props |= {_RETIRED + kid: str(at) for kid, at in self.retired.items()}
        return props

    def rotated(self, now: int) -> tuple[KeyRing, tuple[str, ...]]:
        """The ring with a new current key, and the property names of the keys it dropped."""
        fresh = KeyRing.new()
        retired = {**self.retired, self.current: now}
        dropped = {kid for kid, at in retired.items() if at + KEEP_RETIRED_S < now}
        keys = {kid: key for kid, key in self.keys.items() if kid not in dropped}
        ring = KeyRing(
            fresh.current,
            keys | dict(fresh.keys),
            {kid: at for kid, at in retired.items() if kid not in dropped},
        )
        removals = tuple(f"{prefix}{kid}" for kid in sorted(dropped) for prefix in (_KEY, _RETIRED))
        return ring, removals


class SigningKeys:
    """The key ring of one deployment, read from the view (parsed once per version)."""

    def __init__(
        self, metastore: Metastore, tenant: str, clock: Callable[[], float] = time.time
    ) -> None:
        self._metastore = metastore
        self._tenant = tenant
        self._clock = clock
        self._parsed: tuple[tuple[int, int], KeyRing] | None = None

    def ring(self) -> KeyRing:
        """``NotFound`` until the record exists (a node still starting)."""
        entity = self._metastore.get_entity(self._tenant, SYSTEM_CATALOG, TOKEN_KEYS)
        version = (entity.entity_id, entity.version)
        if self._parsed is None or self._parsed[0] != version:
            self._parsed = (version, KeyRing.of(entity.properties))
        return self._parsed[1]

    async def ensure(self) -> None:
        """Create the ring if there is none (and drop a key of an earlier version)."""
        if await self._exists(TOKEN_KEYS):
            return
        changes: list[Change] = [CreateEntity(TOKEN_KEYS, KeyRing.new().properties())]
        if await self._exists(LEGACY_KEY):
            changes.append(DeleteEntity(LEGACY_KEY))
        request = CommitRequest(
            changes=tuple(changes),
            principal="system",
            operation="create token signing key",
        )
        with contextlib.suppress(AlreadyExists):  # another node's bootstrap was first
            await self._metastore.commit(self._tenant, SYSTEM_CATALOG, request)

    async def _exists(self, key: EntityKey) -> bool:
        metastore = self._metastore
        return await metastore.read_point(metastore.has_entity, self._tenant, SYSTEM_CATALOG, key)

    async def rotate(
        self, principal: str, record: Record | None = None
    ) -> tuple[str, tuple[str, ...]]:
        """A new current key; returns its kid and the kids dropped. 409 if the ring
        changed meanwhile (another rotation)."""
        entity = await self._metastore.read_point(
            self._metastore.get_entity, self._tenant, SYSTEM_CATALOG, TOKEN_KEYS
        )
        ring, removals = KeyRing.of(entity.properties).rotated(int(self._clock()))
        request = CommitRequest(
            requirements=(AssertVersion(TOKEN_KEYS, entity.version),),
            changes=(UpdateEntity(TOKEN_KEYS, ring.properties(), removals),),
            principal=principal,
            operation="rotate token signing key",
            record=record,
        )
        await self._metastore.commit(self._tenant, SYSTEM_CATALOG, request)
        dropped = tuple(r.removeprefix(_KEY) for r in removals if r.startswith(_KEY))
        return ring.current, dropped
