"""Consistency tokens: what a write returns, what a read may send back, and whose it is."""

from __future__ import annotations

import pytest

from metastore.catalog.consistency import ConsistencyToken, TokenScopes
from metastore.errors import BadRequest

SECRET = "a-cluster-secret-of-32-characters!"


def test_a_token_round_trips() -> None:
    token = TokenScopes(SECRET).token("acme", 11, 123456)
    assert ConsistencyToken.parse(token.encode(), 12) == token


@pytest.mark.parametrize(
    "text",
    [
        "",
        "5",
        "5:",
        ":5",
        "a:1",
        "1:b",
        "-1:3",
        "1:-3",
        "1:2",  # a token without a tenant tag (as earlier versions made them)
        "1:2:3",
        "1:2:0123456789abcdeg",
        "1:2:0123456789ABCDEF",
        "1:2:0123456789abcdef:0",
        "²:2:0123456789abcdef",
        "12:0:0123456789abcdef",
        "1" * 70 + ":1",
    ],
)
def test_malformed_or_foreign_tokens_are_bad_requests(text: str) -> None:
    with pytest.raises(BadRequest):
        ConsistencyToken.parse(text, 12)


def test_a_token_is_accepted_for_its_own_tenant_only() -> None:
    scopes = TokenScopes(SECRET)
    token = scopes.token("acme", 3, 7)
    scopes.check(token, "acme")
    with pytest.raises(BadRequest, match="tenant 'beta'") as refused:
        scopes.check(token, "beta")
    assert "acme" not in refused.value.message  # it names no other tenant


def test_the_tag_is_keyed_by_the_cluster_secret() -> None:
    """Without the secret nobody can make a tag for a tenant (nodes with a secret)."""
    assert TokenScopes(SECRET).of("acme", 1, 2) != TokenScopes(SECRET + "x").of("acme", 1, 2)
    assert TokenScopes(SECRET).of("acme", 1, 2) != TokenScopes("").of("acme", 1, 2)
    assert TokenScopes(SECRET).of("acme", 1, 2) == TokenScopes(SECRET).of("acme", 1, 2)
    assert "acme" not in TokenScopes("").of("acme", 1, 2)


def test_a_token_cannot_be_moved_to_another_point_of_the_log() -> None:
    """A made-up offset (or partition) under a real tag would make a node wait its
    whole bound, and how long it waited would tell how far the log had come."""
    scopes = TokenScopes(SECRET)
    token = scopes.token("acme", 3, 7)
    for moved in (ConsistencyToken(3, 10**19, token.scope), ConsistencyToken(2, 7, token.scope)):
        with pytest.raises(BadRequest, match="as it came"):
            scopes.check(moved, "acme")
