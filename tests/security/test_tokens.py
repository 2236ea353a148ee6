"""A token verified once is remembered (no JWT parsing on later requests) until it expires;
its key stays in the ring at least that long, whatever rotations happen meanwhile."""

from __future__ import annotations

import time

import pytest

from metastore.catalog.service import Metastore
from metastore.security.principal import Principal
from metastore.security.signing import KEEP_RETIRED_S, SigningKeys
from metastore.security.tokens import TokenClaims, TokenSigner

TTL = 600


class Clock:
    """Starts at the real time: PyJWT checks ``iat`` and ``exp`` against it."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def signer(service: Metastore) -> tuple[TokenSigner, SigningKeys, Clock]:
    clock = Clock()
    await service.create_tenant("default", {}, "test")
    keys = SigningKeys(service, "default", clock)
    await keys.ensure()
    return TokenSigner(keys, TTL, clock), keys, clock


ANA = Principal("default", "ana", "service")
CLAIMS = TokenClaims("default", "ana", "g1")


async def test_a_verified_token_is_remembered_until_it_expires(
    signer: tuple[TokenSigner, SigningKeys, Clock],
) -> None:
    tokens, _, clock = signer
    token = tokens.issue(ANA, "g1")
    assert tokens.remembered(token) is None  # never verified here yet
    assert tokens.verify(token) == CLAIMS
    assert tokens.remembered(token) == CLAIMS
    clock.now += TTL
    assert tokens.remembered(token) is None  # verify decides (the skew grace needs the key)


async def test_no_rotation_drops_a_key_before_its_remembered_tokens_expire(
    signer: tuple[TokenSigner, SigningKeys, Clock],
) -> None:
    tokens, keys, clock = signer
    token = tokens.issue(ANA, "g1")
    tokens.verify(token)
    kid = keys.ring().current
    await keys.rotate("test")  # retired: still verifies its tokens
    for _ in range(3):  # rotations while the token lives keep its key
        clock.now += TTL / 3 - 1
        await keys.rotate("test")
        assert kid in keys.ring().keys
        assert tokens.remembered(token) == CLAIMS
    clock.now += KEEP_RETIRED_S
    assert tokens.remembered(token) is None
    await keys.rotate("test")
    assert kid not in keys.ring().keys
