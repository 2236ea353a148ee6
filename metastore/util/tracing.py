"""W3C Trace Context: the ``traceparent`` header a request brings, and the one a node sends on.

A client (or a proxy, or another node) may name the trace its request belongs to:
``traceparent: 00-<trace-id: 32 hex>-<parent-id: 16 hex>-<flags: 2 hex>``. The node
keeps the trace id, names its own handling of the request with a fresh span id,
logs both with every line of the request, and sends ``traceparent`` with its own
span as the parent on the write it forwards to a partition's owner, so the owner's
lines carry the same trace id. A header that does not parse is ignored (a fresh
trace starts), never an error: tracing must not turn a good request into a bad one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from random import getrandbits

HEADER = "traceparent"

# version 00 is exactly four fields; a later version may append more after a '-'
_TRACEPARENT = re.compile(
    r"^(?P<version>[0-9a-f]{2})-(?P<trace>[0-9a-f]{32})-(?P<parent>[0-9a-f]{16})"
    r"-(?P<flags>[0-9a-f]{2})(?P<rest>-.*)?$"
)
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16


@dataclass(frozen=True, slots=True)
class TraceContext:
    """One node's span of a trace: the trace, this span, the caller's span (if any)."""

    trace_id: str
    span_id: str
    parent_id: str | None = None
    flags: str = "00"

    @classmethod
    def parse(cls, header: str | None) -> TraceContext | None:
        """A new span under the caller's ``traceparent``; None if it is absent or malformed
        (unknown version ff, all-zero ids, wrong lengths, upper-case hex, extra fields on
        version 00)."""
        if header is None or len(header) > 512:
            return None
        match = _TRACEPARENT.match(header.strip())
        if match is None:
            return None
        version, trace, parent = match["version"], match["trace"], match["parent"]
        if version == "ff" or (version == "00" and match["rest"] is not None):
            return None
        if trace == _ZERO_TRACE or parent == _ZERO_SPAN:
            return None
        return cls(trace, _span_id(), parent, match["flags"])

    @classmethod
    def start(cls) -> TraceContext:
        """A new trace, started here (not sampled: the flags say only what the caller said)."""
        return cls(f"{getrandbits(127) + 1:032x}", _span_id())

    def header(self) -> str:
        """``traceparent`` for a call made within this span (this span is its parent)."""
        return f"00-{self.trace_id}-{self.span_id}-{self.flags}"


def _span_id() -> str:
    """Random, never all zeros. Trace and span ids name, they do not protect: Python's
    fast generator is enough (W3C asks for randomness, not secrecy) and costs no system
    call per request."""
    return f"{getrandbits(63) + 1:016x}"
