"""Read-your-writes across nodes: a commit's consistency token, and waiting for one.

In cluster mode a write is acknowledged by its partition's owner once the owner's
view has applied it; other nodes apply it a moment later. The token names the
point in the log that covers the write (partition, next refs offset), so any
node given it can wait until its own view has reached that point before reading.
Embedded mode has no token: its one store is always current.

A token also names the tenant whose write it covers, as a tag (``TokenScopes``): a
keyed BLAKE2b of the tenant's name, the partition and the offset under a key derived
from the cluster secret, so it carries no tenant's name and cannot be made without
the secret (without one, auth is off and the tag is a plain hash): not for another
tenant, and not for another point of the log either. A made-up offset would make a
node wait its whole bound for nothing, and how long it waited would tell how far the
partition's log (every tenant's writes on it) has come. A request accepts only tokens
of the tenant it acts in, issued by a node: any other is refused (400) before anything
waits, and tells nothing about another tenant.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from contextvars import ContextVar
from dataclasses import dataclass

from metastore.errors import BadRequest

HEADER = "Metastore-Consistency-Token"
_TOKEN = re.compile(r"([0-9]{1,10}):([0-9]{1,20}):([0-9a-f]{16})")
_PERSON = b"ms-consistency"

# Set by the service after a write in the request's task; the HTTP layer puts it on
# the response. A ContextVar because the service must not know about HTTP.
WRITTEN: ContextVar[ConsistencyToken | None] = ContextVar("metastore_written", default=None)


@dataclass(frozen=True, slots=True)
class ConsistencyToken:
    partition: int
    offset: int  # the reader's view must have applied refs[partition] below this
    scope: str  # TokenScopes.of(the tenant whose write it covers)

    def encode(self) -> str:
        return f"{self.partition}:{self.offset}:{self.scope}"

    @classmethod
    def parse(cls, text: str, partitions: int) -> ConsistencyToken:
        match = _TOKEN.fullmatch(text.strip()) if len(text) <= 64 else None
        if match is None:
            raise BadRequest(
                f"malformed {HEADER}: {text[:64]!r} (send back the header a write answered)"
            )
        token = cls(int(match[1]), int(match[2]), match[3])
        if token.partition >= partitions:
            raise BadRequest(f"{HEADER} names partition {token.partition} of {partitions}")
        return token


class TokenScopes:
    """The tag a token carries for its tenant, the same on every node of a cluster."""

    def __init__(self, cluster_secret: str) -> None:
        # a key of its own, derived from the secret (which also keys the nodes' requests)
        secret = cluster_secret.encode()
        self._key = hashlib.sha256(_PERSON + b"\x00" + secret).digest() if secret else b""

    def of(self, tenant: str, partition: int, offset: int) -> str:
        """The tag of a token for ``tenant``'s write at ``partition``:``offset``."""
        signed = f"{partition}:{offset}:{tenant}".encode()
        digest = hashlib.blake2b(signed, digest_size=8, key=self._key, person=_PERSON)
        return digest.hexdigest()

    def token(self, tenant: str, partition: int, offset: int) -> ConsistencyToken:
        return ConsistencyToken(partition, offset, self.of(tenant, partition, offset))

    def check(self, token: ConsistencyToken, tenant: str) -> None:
        """400 unless a node issued ``token`` for a write of ``tenant``."""
        expected = self.of(tenant, token.partition, token.offset)
        if not hmac.compare_digest(token.scope, expected):
            raise BadRequest(
                f"{HEADER} was not issued for a write of tenant {tenant!r}: send a token"
                " only with requests to the tenant whose write answered it, as it came"
            )
