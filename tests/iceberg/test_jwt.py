"""Issued tokens are standard JWTs, and only well-formed, unexpired ones signed with the
cluster's key ring pass. The refusals are checked with tokens made from the node's real
key ring (read from its stopped data directory), so each one differs from an accepted
token in exactly the property under test."""

from __future__ import annotations

import base64
import json
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog

from harness.node import NodeProcess
from harness.process import free_port
from metastore.security.principal_records import principal_key
from metastore.security.signing import KeyRing
from metastore.security.tokens import ISSUER
from tests.iceberg.test_auth import ALICE, TOKENS, clients, node, token_of
from tests.security.stores import offline_store

TTL = 600


def whoami(url: str, token: str) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"}
    return requests.get(url + "/api/v1/whoami", headers=headers, timeout=60)


def b64(data: dict[str, Any]) -> str:
    raw = json.dumps(data, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


class Forger:
    """Tokens made with the node's own key ring, like the node makes them."""

    def __init__(self, ring: KeyRing, generation: str) -> None:
        self.ring = ring
        self.generation = generation

    def claims(self, **changes: Any) -> dict[str, Any]:
        now = int(time.time())
        claims = {
            "sub": "alice",
            "tnt": "default",
            "gen": self.generation,
            "iss": ISSUER,
            "aud": ISSUER,
            "iat": now,
            "exp": now + TTL,
        }
        claims.update(changes)
        return {k: v for k, v in claims.items() if v is not None}

    def token(self, *, key: bytes | None = None, kid: str | None = None, **changes: Any) -> str:
        kid = kid or self.ring.current
        secret = key if key is not None else self.ring.keys[self.ring.current]
        return jwt.encode(self.claims(**changes), secret, algorithm="HS256", headers={"kid": kid})


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NodeProcess, Forger, str]]:
    """A node, a forger holding its key ring, and a token the node issued to alice."""
    root = tmp_path_factory.mktemp("jwt")
    env = {
        "METASTORE_AUTH_CLIENTS": clients(ALICE),
        "METASTORE_AUTH_ADMINS": ALICE[0],  # may do anything: only her token is in question
        "METASTORE_TOKEN_TTL_SECONDS": str(TTL),
    }
    port = free_port()
    with node(root, env, port) as process:
        issued = token_of(process.url, *ALICE)
    with offline_store(root / "data") as store:
        ring = store.key_ring()
    forger = Forger(ring, jwt.decode(issued, options={"verify_signature": False})["gen"])
    with node(root, env, port) as process:
        yield process, forger, issued


def test_an_issued_token_is_a_standard_jwt(signed: tuple[NodeProcess, Forger, str]) -> None:
    process, forger, issued = signed
    header = jwt.get_unverified_header(issued)
    assert header["alg"] == "HS256" and header["kid"] == forger.ring.current, header
    key = forger.ring.keys[header["kid"]]
    claims = jwt.decode(issued, key, algorithms=["HS256"], audience=ISSUER, issuer=ISSUER)
    assert claims["sub"] == "alice" and claims["tnt"] == "default", claims
    assert claims["exp"] - claims["iat"] == TTL, claims
    reply = requests.post(
        process.url + TOKENS,
        data={"grant_type": "client_credentials", "client_id": ALICE[0], "client_secret": ALICE[1]},
        timeout=60,
    )
    assert reply.json()["expires_in"] == TTL, reply.text


def test_a_token_made_with_the_ring_like_the_node_makes_it_is_accepted(
    signed: tuple[NodeProcess, Forger, str],
) -> None:
    """The control for every refusal below: the forger makes what the node accepts."""
    process, forger, _ = signed
    reply = whoami(process.url, forger.token())
    assert reply.status_code == 200, reply.text
    assert reply.json()["id"] == "alice"


def hs512(claims: dict[str, Any], key: bytes, kid: str) -> str:
    with warnings.catch_warnings():  # the key is short for HS512; only the algorithm matters
        warnings.simplefilter("ignore", jwt.warnings.InsecureKeyLengthWarning)
        return jwt.encode(claims, key, algorithm="HS512", headers={"kid": kid})


def refusals(forger: Forger, issued: str) -> dict[str, str]:
    now = int(time.time())
    header, payload, signature = issued.split(".")
    claims = jwt.decode(issued, options={"verify_signature": False})
    kid = forger.ring.current
    return {
        "expired": forger.token(iat=now - 2 * TTL, exp=now - 120),
        "issued in the future": forger.token(iat=now + 600, exp=now + 1200),
        "not yet valid": forger.token(nbf=now + 600),
        "another audience": forger.token(aud="someone-else"),
        "another issuer": forger.token(iss="https://issuer.example"),
        "no expiry": forger.token(exp=None),
        "no generation": forger.token(gen=None),
        "a generation of the past": forger.token(gen="0" * 32),
        "another tenant's name": forger.token(tnt="nowhere"),
        "an unknown principal": forger.token(sub="mallory"),
        "another key, same kid": forger.token(key=b"k" * 32),
        "an unknown kid": forger.token(kid="feedfacefeedface"),
        "alg none": b64({"alg": "none", "typ": "JWT", "kid": kid}) + "." + payload + ".",
        "HS512 with the ring's key": hs512(forger.claims(), forger.ring.keys[kid], kid),
        "a changed subject": f"{header}.{b64({**claims, 'sub': 'root'})}.{signature}",
        "a cut signature": f"{header}.{payload}.{signature[:-4]}",
        "not a JWT": "opaque-token",
        "empty": "",
    }


def test_every_other_token_is_refused_with_401(signed: tuple[NodeProcess, Forger, str]) -> None:
    process, forger, issued = signed
    for what, token in refusals(forger, issued).items():
        reply = whoami(process.url, token)
        assert reply.status_code == 401, f"{what}: {reply.text}"
        assert reply.json()["error"]["type"] == "NotAuthorizedException", f"{what}: {reply.text}"
    assert whoami(process.url, issued).status_code == 200


def test_pyiceberg_gets_and_uses_a_jwt(signed: tuple[NodeProcess, Forger, str]) -> None:
    process, _, _ = signed
    catalog = RestCatalog(
        "jwt",
        uri=process.url,
        credential=clients(ALICE),
        **{"oauth2-server-uri": process.url + TOKENS},
    )
    name = f"ns_{int(time.time_ns())}"
    catalog.create_namespace((name,))
    assert (name,) in catalog.list_namespaces()
    catalog.close()


def test_the_data_directory_keeps_no_secret_in_the_clear(
    tmp_path: Path,
) -> None:
    with node(tmp_path, {"METASTORE_AUTH_CLIENTS": clients(ALICE)}) as process:
        token_of(process.url, *ALICE)
    with offline_store(tmp_path / "data") as store:
        entity = store.metastore.get_entity("default", "", principal_key("alice"))
    assert ALICE[1] not in json.dumps(dict(entity.properties))
    assert set(entity.properties) == {
        "type",
        "disabled",
        "created-by",
        "salt",
        "hash",
        "generation",
    }, entity.properties
