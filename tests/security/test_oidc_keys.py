"""The identity provider's key cache on an injected clock and loader: when it reads the
JWKS again, and what it does while the provider is unreachable."""

from __future__ import annotations

import json

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from metastore.errors import ServiceUnavailable, Unauthorized
from metastore.security.oidc import JwksCache, claim, parse_jwks, roles_of


def rsa_jwk(kid: str) -> dict[str, object]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    return {**json.loads(RSAAlgorithm.to_jwk(key)), "kid": kid, "use": "sig"}


def ec_jwk(kid: str) -> dict[str, object]:
    key = ec.generate_private_key(ec.SECP256R1()).public_key()
    return {**json.loads(ECAlgorithm.to_jwk(key)), "kid": kid}


class Provider:
    """What the JWKS endpoint serves now, and how often it was asked."""

    def __init__(self, *keys: dict[str, object]) -> None:
        self.keys = list(keys)
        self.reads = 0
        self.down = False

    def __call__(self) -> bytes:
        self.reads += 1
        if self.down:
            raise OSError("connection refused")
        return json.dumps({"keys": self.keys}).encode()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_an_unknown_kid_reads_again_at_most_once_per_interval() -> None:
    provider, clock = Provider(rsa_jwk("a")), Clock()
    cache = JwksCache(provider, "test", min_refresh_s=30, max_age_s=900, clock=clock)
    assert (await cache.key("a")).key_id == "a"
    for _ in range(5):
        with pytest.raises(Unauthorized):
            await cache.key("b")
    assert provider.reads == 1  # read at the first use, then held back by the interval
    provider.keys.append(ec_jwk("b"))
    clock.now += 30
    assert (await cache.key("b")).algorithm_name == "ES256"
    assert provider.reads == 2


async def test_old_keys_are_read_again_and_kept_while_the_provider_is_down() -> None:
    provider, clock = Provider(rsa_jwk("a")), Clock()
    cache = JwksCache(provider, "test", min_refresh_s=0, max_age_s=60, clock=clock)
    await cache.key("a")
    provider.down = True
    clock.now += 61
    assert (await cache.key("a")).key_id == "a"  # stale but usable
    assert provider.reads == 2
    empty = JwksCache(Provider(), "test", 0, 60, clock=clock)
    with pytest.raises(ServiceUnavailable):
        await empty.key("a")  # a JWKS with no usable key is no keys at all


async def test_a_provider_down_from_the_start_is_asked_once_per_interval() -> None:
    provider, clock = Provider(rsa_jwk("a")), Clock()
    provider.down = True
    cache = JwksCache(provider, "test", min_refresh_s=30, max_age_s=900, clock=clock)
    for _ in range(3):
        with pytest.raises(ServiceUnavailable):
            await cache.key("a")
    assert provider.reads == 1
    provider.down = False
    clock.now += 30
    assert (await cache.key("a")).key_id == "a"
    assert provider.reads == 2


async def test_a_token_without_kid_uses_the_only_key() -> None:
    cache = JwksCache(Provider(rsa_jwk("only")), "test", 0, 60, clock=Clock())
    assert (await cache.key(None)).key_id == "only"
    two = JwksCache(Provider(rsa_jwk("a"), rsa_jwk("b")), "test", 0, 60, clock=Clock())
    with pytest.raises(Unauthorized):
        await two.key(None)


def test_only_signing_keys_of_accepted_algorithms_are_kept() -> None:
    p384 = ec.generate_private_key(ec.SECP384R1()).public_key()
    keys = [
        rsa_jwk("rs"),
        ec_jwk("es"),
        {**rsa_jwk("enc"), "use": "enc"},
        {**json.loads(ECAlgorithm.to_jwk(p384)), "kid": "es384"},
        {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},
    ]
    assert set(parse_jwks(json.dumps({"keys": keys}).encode())) == {"rs", "es"}
    for bad in (b"{}", b"[]", b"not json", json.dumps({"keys": keys[2:]}).encode()):
        with pytest.raises(ValueError):
            parse_jwks(bad)


def test_claims_by_dotted_path_and_roles_from_lists_or_strings() -> None:
    claims = {"sub": "u1", "realm_access": {"roles": ["reader", "bad role", 7, "writer"]}}
    assert claim(claims, "sub") == "u1"
    assert claim(claims, "realm_access.roles") == ["reader", "bad role", 7, "writer"]
    assert claim(claims, "realm_access.missing.deeper") is None
    assert roles_of(claim(claims, "realm_access.roles")) == ["reader", "writer"]
    assert roles_of("reader writer") == ["reader", "writer"]
    assert roles_of({"reader": True}) == [] and roles_of(None) == []
