"""OAuth2 client credentials (``POST /v1/oauth/tokens``) and bearer-token checks.

Client secrets are stored hashed (PBKDF2-SHA256, per-client salt) as system
records of the default tenant (``metastore.iceberg.clients``); tokens are
HMAC-signed with a key that is itself a system record, so every node verifies
every node's tokens with no shared process state. Both are written through
commits at startup.

Issuing a token never tells an unknown client id from a wrong secret: both
cost one hash (an unknown id is hashed against a decoy record), both answer
the same, and both count against the same failure limits. Hashing runs on a
bounded thread pool, never on the event loop.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Mapping

from metastore.changes import CreateEntity
from metastore.commits import CommitRequest
from metastore.config_rules import CLIENT_ID
from metastore.errors import AlreadyExists, Unauthorized
from metastore.iceberg.attempts import Attempts
from metastore.iceberg.clients import ClientRecord, ClientRecords
from metastore.iceberg.hashing import HashingBusy, HashPool
from metastore.keys import SYSTEM_CATALOG, EntityKey, Kind
from metastore.service import Metastore

SIGNING_KEY = EntityKey(Kind.SYSTEM, (), "token-key")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Authenticator:
    def __init__(
        self,
        metastore: Metastore,
        tenant: str,
        ttl_seconds: int,
        hashes: HashPool,
        attempts: Attempts,
    ) -> None:
        self._metastore = metastore
        self._tenant = tenant
        self._ttl = ttl_seconds
        self._hashes = hashes
        self._attempts = attempts
        self._clients = ClientRecords(metastore, tenant)
        self._decoy = ClientRecord.decoy()

    async def bootstrap(self, clients: Mapping[str, str]) -> None:
        """Create the signing key if absent; make the stored clients the configured ones."""
        with contextlib.suppress(AlreadyExists):
            change = CreateEntity(SIGNING_KEY, {"key": secrets.token_hex(32)})
            request = CommitRequest(
                changes=(change,), principal="system", operation="create token signing key"
            )
            await self._metastore.commit(self._tenant, SYSTEM_CATALOG, request)
        await self._clients.sync(clients)

    def _signing_key(self) -> bytes:
        entity = self._metastore.get_entity(self._tenant, SYSTEM_CATALOG, SIGNING_KEY)
        return bytes.fromhex(entity.properties["key"])

    def _sign(self, payload: str) -> bytes:
        return hmac.new(self._signing_key(), payload.encode(), hashlib.sha256).digest()

    async def issue(self, client_id: str, secret: str, address: str) -> tuple[str, int]:
        """A token for valid client credentials, and its lifetime in seconds.

        ``Unauthorized`` for an unknown id or a wrong secret alike,
        ``TooManyFailures`` past the failure limits, ``HashingBusy`` when the
        hashing pool is full (nothing checked, nothing counted).
        """
        well_formed = CLIENT_ID.fullmatch(client_id) is not None  # else no client has it
        attempt = self._attempts.begin(client_id if well_formed else "", address)
        record = self._clients.get(client_id) if well_formed else None
        target = record or self._decoy
        try:
            valid = await self._hashes.matches(secret, target.salt, target.hash)
        except HashingBusy:  # nothing was checked: not a failure
            self._attempts.forgive(attempt)
            raise
        if record is None or not valid:
            raise Unauthorized("invalid client credentials")
        self._attempts.forgive(attempt)
        claims = {"sub": client_id, "gen": record.generation, "exp": int(time.time()) + self._ttl}
        payload = _b64(json.dumps(claims, separators=(",", ":")).encode())
        return f"{payload}.{_b64(self._sign(payload))}", self._ttl

    def verify(self, header: str | None) -> str:
        """The principal of a valid ``Authorization: Bearer`` header, else 401.

        Valid means: signed by the cluster's key, not expired, and issued to a
        client that is still configured with the same secret (same generation).
        """
        if not header or not header.startswith("Bearer "):
            raise Unauthorized("a bearer token is required")
        token = header[len("Bearer ") :].strip()
        payload, _, signature = token.partition(".")
        try:
            if not hmac.compare_digest(self._sign(payload), _unb64(signature)):
                raise ValueError("bad signature")
            claims = json.loads(_unb64(payload))
            subject, generation, expiry = claims["sub"], claims["gen"], claims["exp"]
        except (ValueError, KeyError, TypeError, UnicodeError):
            raise Unauthorized("invalid bearer token") from None
        if not isinstance(expiry, int) or expiry < time.time():
            raise Unauthorized("the bearer token has expired")
        record = self._clients.get(str(subject))
        if record is None:
            raise Unauthorized("the bearer token's client is no longer configured")
        if not isinstance(generation, str) or not hmac.compare_digest(
            generation.encode(), record.generation.encode()
        ):
            raise Unauthorized("the bearer token was revoked: its client's secret changed")
        return str(subject)
