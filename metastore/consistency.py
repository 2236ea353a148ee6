"""Read-your-writes across nodes: a commit's consistency token, and waiting for one.

In cluster mode a write is acknowledged by its partition's owner once the owner's
view has applied it; other nodes apply it a moment later. The token names the
point in the log that covers the write (partition, next refs offset), so any
node given it can wait until its own view has reached that point before reading.
Embedded mode has no token: its one store is always current.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

from metastore.errors import BadRequest

HEADER = "Metastore-Consistency-Token"

# Set by the service after a write in the request's task; the HTTP layer puts it on
# the response. A ContextVar because the service must not know about HTTP.
WRITTEN: ContextVar[ConsistencyToken | None] = ContextVar("metastore_written", default=None)


@dataclass(frozen=True, slots=True)
class ConsistencyToken:
    partition: int
    offset: int  # the reader's view must have applied refs[partition] below this

    def encode(self) -> str:
        return f"{self.partition}:{self.offset}"

    @classmethod
    def parse(cls, text: str, partitions: int) -> ConsistencyToken:
        head, sep, tail = text.strip().partition(":")
        if not sep or not head.isdigit() or not tail.isdigit() or len(text) > 64:
            raise BadRequest(f"malformed {HEADER}: {text[:64]!r} (expected <partition>:<offset>)")
        token = cls(int(head), int(tail))
        if token.partition >= partitions:
            raise BadRequest(f"{HEADER} names partition {token.partition} of {partitions}")
        return token
