"""Consistency tokens: what a write returns, what a read may send back."""

from __future__ import annotations

import pytest

from metastore.consistency import ConsistencyToken
from metastore.errors import BadRequest


def test_a_token_round_trips() -> None:
    token = ConsistencyToken(11, 123456)
    assert ConsistencyToken.parse(token.encode(), 12) == token


@pytest.mark.parametrize(
    "text", ["", "5", "5:", ":5", "a:1", "1:b", "-1:3", "1:-3", "1:2:3", "12:0", "1" * 70 + ":1"]
)
def test_malformed_or_foreign_tokens_are_bad_requests(text: str) -> None:
    with pytest.raises(BadRequest):
        ConsistencyToken.parse(text, 12)
