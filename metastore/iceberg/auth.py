"""OAuth2 client credentials (``POST /v1/oauth/tokens``) and bearer-token checks.

Client secrets are stored hashed (PBKDF2-SHA256, per-client salt) as system
records of the default tenant; tokens are HMAC-signed with a key that is itself
a system record, so every node verifies every node's tokens with no shared
process state. Both are written through commits at startup.
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

from metastore.changes import CreateEntity, UpdateEntity
from metastore.commits import CommitRequest
from metastore.errors import AlreadyExists, NotFound, Unauthorized
from metastore.keys import SYSTEM_CATALOG, EntityKey, Kind
from metastore.service import Metastore

_ITERATIONS = 60_000
SIGNING_KEY = EntityKey(Kind.SYSTEM, (), "token-key")


def client_key(client_id: str) -> EntityKey:
    return EntityKey(Kind.SYSTEM, (), f"client:{client_id}")


def hash_secret(secret: str, salt: bytes, iterations: int = _ITERATIONS) -> str:
    return hashlib.pbkdf2_hmac("sha256", secret.encode(), salt, iterations).hex()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Authenticator:
    def __init__(self, metastore: Metastore, tenant: str, ttl_seconds: int) -> None:
        self._metastore = metastore
        self._tenant = tenant
        self._ttl = ttl_seconds

    async def bootstrap(self, clients: Mapping[str, str]) -> None:
        """Create the signing key if absent; store every configured client's hashed secret."""
        with contextlib.suppress(AlreadyExists):
            change = CreateEntity(SIGNING_KEY, {"key": secrets.token_hex(32)})
            await self._commit(change, "create token signing key")
        for client_id, secret in clients.items():
            salt = secrets.token_bytes(16)
            props = {"salt": salt.hex(), "hash": hash_secret(secret, salt)}
            try:
                record = self._record(client_key(client_id))
            except NotFound:
                with contextlib.suppress(AlreadyExists):
                    await self._commit(CreateEntity(client_key(client_id), props), "add client")
                continue
            if not self._matches(record, secret):
                await self._commit(UpdateEntity(client_key(client_id), props), "rotate client")

    async def _commit(self, change: CreateEntity | UpdateEntity, operation: str) -> None:
        request = CommitRequest(changes=(change,), principal="system", operation=operation)
        await self._metastore.commit(self._tenant, SYSTEM_CATALOG, request)

    def _record(self, key: EntityKey) -> Mapping[str, str]:
        return self._metastore.get_entity(self._tenant, SYSTEM_CATALOG, key).properties

    @staticmethod
    def _matches(record: Mapping[str, str], secret: str) -> bool:
        expected = hash_secret(secret, bytes.fromhex(record["salt"]))
        return hmac.compare_digest(expected, record["hash"])

    def _signing_key(self) -> bytes:
        return bytes.fromhex(self._record(SIGNING_KEY)["key"])

    def issue(self, client_id: str, secret: str) -> tuple[str, int]:
        """A token for valid client credentials, and its lifetime in seconds."""
        try:
            record = self._record(client_key(client_id))
        except NotFound:
            raise Unauthorized("invalid client credentials") from None
        if not self._matches(record, secret):
            raise Unauthorized("invalid client credentials")
        claims = {"sub": client_id, "exp": int(time.time()) + self._ttl}
        payload = _b64(json.dumps(claims, separators=(",", ":")).encode())
        signature = hmac.new(self._signing_key(), payload.encode(), hashlib.sha256).digest()
        return f"{payload}.{_b64(signature)}", self._ttl

    def verify(self, header: str | None) -> str:
        """The principal of a valid ``Authorization: Bearer`` header, else 401."""
        if not header or not header.startswith("Bearer "):
            raise Unauthorized("a bearer token is required")
        token = header[len("Bearer ") :].strip()
        payload, _, signature = token.partition(".")
        try:
            expected = hmac.new(self._signing_key(), payload.encode(), hashlib.sha256).digest()
            if not hmac.compare_digest(expected, _unb64(signature)):
                raise ValueError("bad signature")
            claims = json.loads(_unb64(payload))
            subject, expiry = claims["sub"], claims["exp"]
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            raise Unauthorized("invalid bearer token") from None
        if not isinstance(expiry, int) or expiry < time.time():
            raise Unauthorized("the bearer token has expired")
        return str(subject)
