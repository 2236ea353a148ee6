"""The tokens this service issues: standard JWTs (HS256) signed with the cluster's keys.

Claims: ``sub`` (principal name), ``tnt`` (its tenant), ``gen`` (the generation
of its record when the token was issued), ``iss`` and ``aud`` (``ISSUER``: tokens
of this service only), ``iat`` and ``exp``; the header's ``kid`` names the key of
the ring (``metastore.security.signing``) that signed it. Any JWT library reads
them; only a node holding the ring can make one. HS256 is the only algorithm
accepted here, whatever the header says (no ``none``, no public-key confusion).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import jwt

from metastore.errors import NotFound, ServiceUnavailable, Unauthorized
from metastore.security.principal import Principal
from metastore.security.signing import KeyRing, SigningKeys

ISSUER = "urn:metastore"
ALGORITHM = "HS256"
CLOCK_SKEW_S = 30  # nodes' clocks may differ this much (as for node signatures)
_REQUIRED = ["sub", "tnt", "gen", "iss", "aud", "iat", "exp"]
_MAX_REMEMBERED = 10_000  # verified tokens remembered, before starting over


@dataclass(frozen=True, slots=True)
class TokenClaims:
    tenant: str
    name: str
    generation: str


class TokenSigner:
    def __init__(
        self, keys: SigningKeys, ttl_seconds: int, clock: Callable[[], float] = time.time
    ) -> None:
        self._keys = keys
        self.ttl = ttl_seconds
        self._clock = clock
        self._verified: dict[str, tuple[TokenClaims, float]] = {}  # token -> (claims, exp)

    def issue(self, principal: Principal, generation: str) -> str:
        ring = self._ring()
        now = int(self._clock())
        claims = {
            "sub": principal.name,
            "tnt": principal.tenant,
            "gen": generation,
            "iss": ISSUER,
            "aud": ISSUER,
            "iat": now,
            "exp": now + self.ttl,
        }
        key = ring.keys[ring.current]
        return jwt.encode(claims, key, algorithm=ALGORITHM, headers={"kid": ring.current})

    def verify(self, token: str) -> TokenClaims:
        """The claims of a token this deployment signed and that has not expired, else 401."""
        try:
            kid = jwt.get_unverified_header(token).get("kid")
        except jwt.PyJWTError:
            raise Unauthorized("invalid bearer token") from None
        key = self._ring().keys.get(kid) if isinstance(kid, str) else None
        if key is None:
            raise Unauthorized("invalid bearer token: unknown signing key")
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[ALGORITHM],
                audience=ISSUER,
                issuer=ISSUER,
                leeway=CLOCK_SKEW_S,
                options={"require": _REQUIRED},
            )
        except jwt.ExpiredSignatureError:
            raise Unauthorized("the bearer token has expired") from None
        except jwt.PyJWTError:
            raise Unauthorized("invalid bearer token") from None
        subject, tenant, generation = claims["sub"], claims["tnt"], claims["gen"]
        if not all(isinstance(v, str) for v in (subject, tenant, generation)):
            raise Unauthorized("invalid bearer token")
        verified = TokenClaims(tenant, subject, generation)
        if len(self._verified) >= _MAX_REMEMBERED:
            self._verified.clear()
        self._verified[token] = (verified, float(claims["exp"]))
        return verified

    def remembered(self, token: str) -> TokenClaims | None:
        """The claims of a token ``verify`` accepted before, until its ``exp``; else None
        (verify it in full: the clock-skew grace after ``exp`` needs the key).

        A client sends the same token on every call until it expires: parsing and
        checking the JWT once is enough, since nothing in it can change. What can change,
        the principal's record, is checked by the caller on every request. The key need
        not be looked up again: a rotation drops a key only once everything it signed has
        expired (``signing.KEEP_RETIRED_S`` is the longest token lifetime), and a
        rotation revokes nothing.
        """
        found = self._verified.get(token)
        if found is None:
            return None
        claims, expiry = found
        if self._clock() >= expiry:
            del self._verified[token]
            return None
        return claims

    def _ring(self) -> KeyRing:
        try:
            return self._keys.ring()
        except NotFound:  # cluster mode: the owner has not written the ring yet
            raise ServiceUnavailable("the token signing key is not there yet; retry") from None
