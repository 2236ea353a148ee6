"""A token verified once is remembered (no JWT parsing on later requests) only while it
could still verify: not past its expiry, and only while its key is in the ring."""

from __future__ import annotations

import time

import pytest

from metastore.security.principal import Principal
from metastore.security.signing import KEEP_RETIRED_S, SigningKeys
from metastore.security.tokens import CLOCK_SKEW_S, TokenClaims, TokenSigner
from metastore.service import Metastore

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
    clock.now += TTL + CLOCK_SKEW_S + 1
    assert tokens.remembered(token) is None  # then verify refuses it in full (PyJWT's clock)


async def test_a_token_whose_key_left_the_ring_is_forgotten(
    signer: tuple[TokenSigner, SigningKeys, Clock],
) -> None:
    tokens, keys, clock = signer
    token = tokens.issue(ANA, "g1")
    tokens.verify(token)
    await keys.rotate("test")  # retired: still verifies its tokens
    assert tokens.remembered(token) == CLAIMS
    clock.now += KEEP_RETIRED_S + 1
    await keys.rotate("test")  # dropped
    assert tokens.remembered(token) is None
