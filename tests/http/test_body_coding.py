"""Request body codings: what is decoded, what is refused, and that a bomb is never
inflated past the limit (its memory is measured, not its time)."""

from __future__ import annotations

import gzip
import tracemalloc
import zlib

import pytest

from metastore.errors import BadRequest, PayloadTooLarge, UnsupportedCoding
from metastore.http.body_coding import codings, decode

LIMIT = 1 << 20
BODY = b'{"namespace": ["x"]}'


def test_codings_are_listed_in_the_order_applied_without_identity() -> None:
    assert codings(["gzip"]) == ["gzip"]
    assert codings(["identity"]) == []
    assert codings(["Deflate , GZIP", "identity, br"]) == ["deflate", "gzip", "br"]
    assert codings([",, ,"]) == []


def test_several_codings_are_undone_in_reverse() -> None:
    sent = gzip.compress(zlib.compress(BODY))  # deflate first, then gzip
    assert decode(sent, ["deflate", "gzip"], LIMIT) == BODY
    with pytest.raises(BadRequest):
        decode(sent, ["gzip", "deflate"], LIMIT)


def test_a_body_of_exactly_the_limit_is_taken_and_one_byte_more_is_not() -> None:
    assert decode(gzip.compress(b"a" * LIMIT), ["gzip"], LIMIT) == b"a" * LIMIT
    with pytest.raises(PayloadTooLarge):
        decode(gzip.compress(b"a" * (LIMIT + 1)), ["gzip"], LIMIT)


def test_gzip_members_share_one_limit() -> None:
    half = gzip.compress(b"a" * (LIMIT // 2 + 1))
    with pytest.raises(PayloadTooLarge):
        decode(half + half, ["gzip"], LIMIT)


def test_an_unknown_coding_is_refused_before_any_work() -> None:
    with pytest.raises(UnsupportedCoding, match="'compress'"):
        decode(BODY, ["compress"], LIMIT)


def test_a_bomb_is_inflated_no_further_than_the_limit() -> None:
    """256 MiB of spaces in 255 KiB: the decoder's peak memory stays near the limit."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = b"".join(packer.compress(b" " * (1 << 20)) for _ in range(256)) + packer.flush()
    tracemalloc.start()
    try:
        with pytest.raises(PayloadTooLarge):
            decode(bomb, ["gzip"], LIMIT)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * LIMIT, f"peaked at {peak:,} bytes decoding a {len(bomb):,}-byte bomb"
