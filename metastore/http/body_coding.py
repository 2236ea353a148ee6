"""Request bodies sent compressed (``Content-Encoding: gzip`` or ``deflate``), decoded
within the body limit.

The node reads a body as the client sent it and decodes it here, never in aiohttp's
parser (``auto_decompress`` is off, ``metastore.node.server``). Left to the parser, a
body was inflated as it arrived, on the event loop, before any limit applied to what
it became: 1 MB of gzip inflates to 1 GiB, and aiohttp, reading the rest of a body it
had refused at the limit before closing, inflated all of it: 0.8 s of the node's CPU
for one request any client may send. Here the limit bounds the sent bytes (aiohttp's
``client_max_size``) and, separately, what they inflate to: inflating stops one byte
past it, so a body costs at most ``max_body_bytes`` of output whatever it claims.

Only gzip (``x-gzip``) and deflate are decoded: the codings every HTTP client offers
and the standard library inflates. Any other is a 415 naming them (``Accept-Encoding``).
A ``Content-Encoding`` listing several codings was applied in that order; they are
undone in reverse, each within the limit.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

from metastore.errors import BadRequest, PayloadTooLarge, UnsupportedCoding

ACCEPTED = "gzip, deflate"  # the Accept-Encoding of a 415
_GZIP = 16 + zlib.MAX_WBITS  # a gzip header and trailer
_ZLIB = zlib.MAX_WBITS  # deflate as HTTP names it: a zlib stream
_RAW = -zlib.MAX_WBITS  # deflate as some clients send it: the bare stream
IDENTITY = "identity"


def codings(headers: Iterable[str]) -> list[str]:
    """The codings ``Content-Encoding`` headers name, in the order they were applied."""
    named = (c.strip().lower() for header in headers for c in header.split(","))
    return [c for c in named if c and c != IDENTITY]


def decode(body: bytes, applied: list[str], limit: int) -> bytes:
    """``body`` with ``applied`` undone; PayloadTooLarge past ``limit`` bytes of output."""
    for coding in reversed(applied):
        if coding in ("gzip", "x-gzip"):
            body = _inflate(body, coding, _GZIP, limit)
        elif coding == "deflate":
            body = _inflate(body, coding, _ZLIB if _is_zlib(body) else _RAW, limit)
        else:
            raise UnsupportedCoding(
                f"content coding {coding[:64]!r} is not supported: send the body as "
                f"{ACCEPTED} or unencoded"
            )
    return body


def _is_zlib(data: bytes) -> bool:
    """Whether ``data`` opens with a zlib header (method 8, a valid check value)."""
    return len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0


def _inflate(data: bytes, coding: str, wbits: int, limit: int) -> bytes:
    """``data`` inflated, member after member for gzip, never past ``limit`` + 1 bytes."""
    out = bytearray()
    while True:
        inflater = zlib.decompressobj(wbits)
        try:
            out += inflater.decompress(data, limit + 1 - len(out))
        except zlib.error:  # zlib's words ("Error -3 ... incorrect header check") tell no fix
            raise BadRequest(
                f"the request body is not valid {coding}: it does not decompress"
            ) from None
        if len(out) > limit:
            raise PayloadTooLarge(
                f"request body exceeds the limit of {limit} bytes once decoded ({coding})"
            )
        if not inflater.eof:
            raise BadRequest(f"the request body is not valid {coding}: it ends early")
        data = inflater.unused_data
        if not data:
            return bytes(out)
        if wbits != _GZIP:  # a gzip body may hold several members; a zlib stream is one
            raise BadRequest(f"the request body is not valid {coding}: bytes after its end")
