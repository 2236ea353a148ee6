"""Opaque page tokens that pin the snapshot a listing started on.

A token names the commit the first page was read from and the last key
returned, so later pages read the same immutable snapshot (a continuation, not an
offset) no matter what commits in between. A fingerprint of the listing
(catalog, prefix) rejects a token replayed against another listing. Tokens are
not secrets: they carry nothing the caller could not already read, and the
commit is always looked up inside the caller's own tenant and catalog.
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from dataclasses import dataclass

from metastore.errors import InvalidPageToken, ValidationFailed

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
_VERSION = 1


@dataclass(frozen=True, slots=True)
class PageToken:
    commit_id: int
    after: bytes  # last key (or name) returned


def fingerprint(*parts: bytes | str) -> int:
    raw = b"\x00".join(p.encode() if isinstance(p, str) else p for p in parts)
    return zlib.crc32(raw)


def encode_token(token: PageToken, listing: int) -> str:
    payload = {
        "v": _VERSION,
        "c": token.commit_id,
        "k": base64.urlsafe_b64encode(token.after).decode(),
        "f": listing,
    }
    raw = json.dumps(payload, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


# What a token or cursor the node cannot read answers: fixed words, never the parser's
# ("Expecting ',' delimiter: line 1 column 5" says nothing a client can act on, and
# tells it how the token is made)
UNREADABLE_TOKEN = "invalid page token: send back the next-page-token of the previous page as is"


def decode_opaque(text: str) -> dict[str, object] | None:
    """The JSON object inside an opaque token (unpadded URL-safe base64 of its JSON), or
    None if ``text`` is not one."""
    try:
        payload = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (ValueError, binascii.Error, RecursionError):  # JSON's errors are ValueErrors
        return None
    return payload if isinstance(payload, dict) else None


def decode_token(text: str, listing: int) -> PageToken:
    payload = decode_opaque(text)
    if payload is None or payload.get("v") != _VERSION:
        raise InvalidPageToken(UNREADABLE_TOKEN)
    commit_id, after, listed = payload.get("c"), payload.get("k"), payload.get("f")
    if listed != listing:
        raise InvalidPageToken("invalid page token: it belongs to another listing")
    if not isinstance(commit_id, int) or not isinstance(after, str):
        raise InvalidPageToken(UNREADABLE_TOKEN)
    try:
        return PageToken(commit_id, base64.urlsafe_b64decode(after))
    except (ValueError, binascii.Error):
        raise InvalidPageToken(UNREADABLE_TOKEN) from None


def check_page_size(value: int | None) -> int:
    if value is None:
        return DEFAULT_PAGE_SIZE
    if not 1 <= value <= MAX_PAGE_SIZE:
        raise ValidationFailed(f"pageSize must be between 1 and {MAX_PAGE_SIZE}, got {value}")
    return value
