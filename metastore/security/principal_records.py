"""Principals as data: the record of one principal in its tenant's system catalog.

A principal of tenant T is the system entity ``principal:<name>`` of T's system
catalog, so it is created, changed and deleted by commits (with history) and
reaches every node through the changelog like any other entity. Its properties
are strings:

- ``type``: ``service`` (OAuth2 client credentials) or ``user`` (signs in at an
  external identity provider; its record exists to disable it);
- ``salt``, ``hash`` (PBKDF2 of the client secret) and ``generation`` (random,
  drawn anew whenever the secret is set or the principal disabled): service
  principals only. A token carries the generation it was issued under, so a
  new generation revokes every earlier token;
- ``disabled``: ``true`` or ``false``;
- ``created-by``: the id of the principal that created it.

``PrincipalDirectory`` answers "what is the record of this principal now" from
the node's own view, once per request, so it must be cheap: it remembers the
records it read per tenant for as long as that tenant's system catalog HEAD
stays where it was, and forgets them all when the HEAD moves (a commit that
disabled a principal is seen by the next request that node serves).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

from metastore.catalog.service import Metastore
from metastore.errors import NotFound
from metastore.model.keys import SYSTEM_CATALOG, EntityKey, Kind
from metastore.security.hashing import hash_secret

PRINCIPAL_PREFIX = "principal:"
RecordType = Literal["service", "user"]
RECORD_TYPES: tuple[RecordType, ...] = ("service", "user")
_MAX_CACHED = 10_000  # records remembered per tenant (and tenants) before starting over


def principal_key(name: str) -> EntityKey:
    return EntityKey(Kind.SYSTEM, (), PRINCIPAL_PREFIX + name)


@dataclass(frozen=True, slots=True)
class PrincipalRecord:
    name: str
    type: RecordType
    disabled: bool = False
    created_by: str = "system"
    salt: bytes = b""
    hash: str = ""
    generation: str = ""

    @classmethod
    def service(cls, name: str, secret: str, created_by: str) -> PrincipalRecord:
        """A new service principal with ``secret`` (hashes: call off the event loop)."""
        return cls(name, "service", created_by=created_by).with_secret(secret)

    @classmethod
    def user(cls, name: str, created_by: str) -> PrincipalRecord:
        return cls(name, "user", created_by=created_by)

    @classmethod
    def decoy(cls) -> PrincipalRecord:
        """Hashed against for unknown client ids, so they cost what a real one costs."""
        return cls("", "service", salt=secrets.token_bytes(16), hash=secrets.token_hex(32))

    @classmethod
    def of(cls, name: str, properties: Mapping[str, str]) -> PrincipalRecord | None:
        """The stored record, or None if it is not one this version wrote."""
        kind = properties.get("type")
        disabled = properties.get("disabled", "false")
        if kind not in RECORD_TYPES or disabled not in ("true", "false"):
            return None
        record = cls(
            name,
            "service" if kind == "service" else "user",
            disabled == "true",
            properties.get("created-by", ""),
        )
        if record.type == "user":
            return record
        try:
            salt = bytes.fromhex(properties["salt"])
            return replace(
                record, salt=salt, hash=properties["hash"], generation=properties["generation"]
            )
        except (KeyError, ValueError):
            return None

    def properties(self) -> dict[str, str]:
        props = {
            "type": self.type,
            "disabled": "true" if self.disabled else "false",
            "created-by": self.created_by,
        }
        if self.type == "service":
            props |= {"salt": self.salt.hex(), "hash": self.hash, "generation": self.generation}
        return props

    def with_secret(self, secret: str) -> PrincipalRecord:
        """This principal with a new secret and so a new generation (hashes: off the loop)."""
        salt = secrets.token_bytes(16)
        return replace(
            self, salt=salt, hash=hash_secret(secret, salt), generation=secrets.token_hex(16)
        )

    def with_disabled(self, disabled: bool) -> PrincipalRecord:
        """Disabling draws a new generation: tokens issued before stay revoked after an enable."""
        generation = secrets.token_hex(16) if disabled and self.type == "service" else None
        return replace(self, disabled=disabled, generation=generation or self.generation)


class PrincipalDirectory:
    """The current record of a principal as this node's view has it (see the module doc)."""

    def __init__(self, metastore: Metastore) -> None:
        self._metastore = metastore
        self._seen: dict[str, tuple[int, dict[str, PrincipalRecord | None]]] = {}

    def get(self, tenant: str, name: str) -> PrincipalRecord | None:
        """The record of ``name`` in ``tenant``; ``NoSuchTenant`` if there is no such tenant."""
        head = self._metastore.get_ref(tenant, SYSTEM_CATALOG).head
        seen = self._seen.get(tenant)
        if seen is None or seen[0] != head:
            if len(self._seen) >= _MAX_CACHED:
                self._seen.clear()
            seen = self._seen[tenant] = (head, {})
        records = seen[1]
        if name in records:
            return records[name]
        try:
            entity = self._metastore.get_entity(tenant, SYSTEM_CATALOG, principal_key(name), head)
        except NotFound:
            record = None
        else:
            record = PrincipalRecord.of(name, entity.properties)
        if len(records) >= _MAX_CACHED:
            records.clear()
        records[name] = record
        return record
