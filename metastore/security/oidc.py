"""Bearer tokens of an external OpenID Connect provider: users signed in elsewhere.

A token is accepted when it is a JWT signed RS256 or ES256 by a key of the
provider's JWKS (named by the header's ``kid``; a key whose own algorithm is
another is refused, so an HS256 token "signed" with a public key, or ``none``,
never passes), its ``iss`` is the configured issuer, its ``aud`` holds the
configured audience, and it is within ``exp`` / ``nbf`` give or take the
configured leeway. One claim names the principal (``sub`` by default), another,
optionally, its roles; both may be dotted paths into nested claims
(``realm_access.roles``). Every user belongs to one configured tenant.

The JWKS comes from a URL or a file, read in a worker thread (never on the event
loop) and kept: it is read again when it is older than ``max_age_s``, or when a
token names a kid it does not hold (a provider rotating its keys publishes the
new one first) but not more often than every ``min_refresh_s``, so tokens with
made-up kids cannot make the node hammer the provider. While the provider is
unreachable the keys already read stay in use; a node that never read them answers
503 and asks again at most every ``min_refresh_s``.
"""

from __future__ import annotations

import asyncio
import logging
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jwt

from metastore.errors import InvalidName, ServiceUnavailable, Unauthorized
from metastore.model.names import SYSTEM_NAME, check_system_name
from metastore.security.principal import RESERVED_NAMES, Principal
from metastore.util.setting_rules import ConfigError, check_claim, check_url
from metastore.util.small_files import NotSmallFile, read_small_file

log = logging.getLogger(__name__)

ALGORITHMS = ("RS256", "ES256")
MAX_JWKS_BYTES = 1024 * 1024
FETCH_TIMEOUT_S = 10.0
_ENV = "METASTORE_OIDC_"
Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class OidcSettings:
    """The provider's settings, checked when built (``ConfigError`` names the setting)."""

    issuer: str
    audience: str
    jwks_url: str = ""
    jwks_file: str = ""
    principal_claim: str = "sub"
    roles_claim: str = ""
    tenant: str = "default"
    leeway_s: float = 60.0
    min_refresh_s: float = 30.0
    max_age_s: float = 900.0

    def __post_init__(self) -> None:
        if not self.issuer:
            raise ConfigError(
                "oidc_issuer", f"not set; an identity provider needs it ({_ENV}ISSUER)"
            )
        check_url("oidc_issuer", self.issuer)
        if not self.audience:
            raise ConfigError(
                "oidc_audience", f"not set; an identity provider needs it ({_ENV}AUDIENCE)"
            )
        if any(c.isspace() or ord(c) < 32 for c in self.audience):
            raise ConfigError("oidc_audience", "must have no spaces or control characters")
        if bool(self.jwks_url) == bool(self.jwks_file):
            raise ConfigError(
                "oidc_jwks_url",
                f"set exactly one of {_ENV}JWKS_URL and {_ENV}JWKS_FILE (where the keys are)",
            )
        if self.jwks_url:
            check_url("oidc_jwks_url", self.jwks_url)
        else:
            try:
                parse_jwks(read_small_file(self.jwks_file, MAX_JWKS_BYTES))
            except OSError as exc:
                raise ConfigError("oidc_jwks_file", f"cannot read it: {exc.strerror}") from None
            except NotSmallFile as exc:
                raise ConfigError("oidc_jwks_file", f"{self.jwks_file} {exc}") from None
            except ValueError as exc:
                raise ConfigError("oidc_jwks_file", str(exc)) from None
        check_claim("oidc_principal_claim", self.principal_claim)
        if self.roles_claim:
            check_claim("oidc_roles_claim", self.roles_claim)
        try:
            check_system_name("tenant", self.tenant)
        except InvalidName as exc:
            raise ConfigError("oidc_tenant", exc.message) from None

    def load(self) -> bytes:
        """The JWKS document (blocking: call in a worker thread)."""
        if self.jwks_file:
            return read_small_file(self.jwks_file, MAX_JWKS_BYTES)
        request = urllib.request.Request(self.jwks_url, headers={"Accept": "application/json"})
        with urllib.request.urlopen(request, timeout=FETCH_TIMEOUT_S) as reply:
            data: bytes = reply.read(MAX_JWKS_BYTES + 1)
        return data

    @property
    def source(self) -> str:
        return self.jwks_url or self.jwks_file


def parse_jwks(data: bytes) -> dict[str | None, jwt.PyJWK]:
    """kid -> key of the signing keys of a JWKS that use an accepted algorithm."""
    if len(data) > MAX_JWKS_BYTES:
        raise ValueError(f"the JWKS is larger than {MAX_JWKS_BYTES} bytes")
    try:
        keys = jwt.PyJWKSet.from_json(data.decode()).keys
    except (jwt.PyJWTError, ValueError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a JWKS with a usable key: {exc}") from None
    usable = {
        key.key_id: key
        for key in keys
        if key.algorithm_name in ALGORITHMS and key.public_key_use in (None, "sig")
    }
    if not usable:
        raise ValueError(f"the JWKS has no signing key for {' or '.join(ALGORITHMS)}")
    return usable


class JwksCache:
    """The provider's keys, read in a worker thread and kept (see the module doc)."""

    def __init__(
        self,
        load: Callable[[], bytes],
        source: str,
        min_refresh_s: float,
        max_age_s: float,
        clock: Clock = time.monotonic,
    ) -> None:
        self._load = load
        self._source = source
        self._min_refresh_s = min_refresh_s
        self._max_age_s = max_age_s
        self._clock = clock
        self._keys: dict[str | None, jwt.PyJWK] | None = None
        self._read_at = -float("inf")  # the last attempt, successful or not
        self._lock = asyncio.Lock()
        self.fetches = 0

    async def key(self, kid: str | None) -> jwt.PyJWK:
        """The key named ``kid`` (None: the token names none; fine if there is one key),
        else 401."""
        if self._keys is None or self._clock() - self._read_at >= self._max_age_s:
            # stale keys: read again (max_age_s apart); none yet: at first use, then as
            # for an unknown kid, so a provider that is down is not asked on every request
            never = self._read_at == -float("inf")
            await self._refresh(self._read_at, force=self._keys is not None or never)
        if self._keys is None:
            raise ServiceUnavailable("the identity provider's keys cannot be read; retry later")
        key = self._find(kid)
        if key is None:  # perhaps a new key of the provider: read again (rate-limited)
            await self._refresh(self._read_at, force=False)
            key = self._find(kid)
        if key is None:
            raise Unauthorized("invalid bearer token: unknown signing key")
        return key

    def _find(self, kid: str | None) -> jwt.PyJWK | None:
        keys = self._keys or {}
        if kid is None and len(keys) == 1:
            return next(iter(keys.values()))
        return keys.get(kid)

    async def _refresh(self, seen: float, *, force: bool) -> None:
        async with self._lock:
            if self._read_at != seen:  # another request read the keys meanwhile
                return
            if not force and self._clock() - self._read_at < self._min_refresh_s:
                return
            self._read_at = self._clock()
            self.fetches += 1
            try:
                self._keys = await asyncio.to_thread(lambda: parse_jwks(self._load()))
            except (OSError, ValueError) as exc:  # URLError is an OSError
                log.warning(
                    "cannot read the identity provider's keys from %s: %s", self._source, exc
                )


class OidcVerifier:
    def __init__(self, settings: OidcSettings, keys: JwksCache) -> None:
        self.settings = settings
        self._keys = keys

    @classmethod
    def of(cls, settings: OidcSettings) -> OidcVerifier:
        cache = JwksCache(
            settings.load, settings.source, settings.min_refresh_s, settings.max_age_s
        )
        return cls(settings, cache)

    @property
    def issuer(self) -> str:
        return self.settings.issuer

    async def verify(self, token: str) -> Principal:
        """The user a valid token of the provider names, else 401."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise Unauthorized("invalid bearer token") from None
        algorithm, kid = header.get("alg"), header.get("kid")
        if algorithm not in ALGORITHMS:
            raise Unauthorized(f"invalid bearer token: algorithm {algorithm!r} is not accepted")
        key = await self._keys.key(kid if isinstance(kid, str) else None)
        if key.algorithm_name != algorithm:
            raise Unauthorized("invalid bearer token: the key is not for that algorithm")
        settings = self.settings
        try:
            claims = jwt.decode(
                token,
                key.key,
                algorithms=[algorithm],
                audience=settings.audience,
                issuer=settings.issuer,
                leeway=settings.leeway_s,
                options={"require": ["iss", "aud", "exp"]},
            )
        except jwt.ExpiredSignatureError:
            raise Unauthorized("the bearer token has expired") from None
        except jwt.PyJWTError as exc:
            raise Unauthorized(f"invalid bearer token: {exc}") from None
        name = claim(claims, settings.principal_claim)
        if not isinstance(name, str) or not SYSTEM_NAME.fullmatch(name) or name in RESERVED_NAMES:
            raise Unauthorized(
                f"the token's {settings.principal_claim} claim is not a principal name"
                " (1-128 of A-Z a-z 0-9 _ . - starting with a letter or digit)"
            )
        roles = roles_of(claim(claims, settings.roles_claim)) if settings.roles_claim else ()
        return Principal(settings.tenant, name, "user", frozenset(roles))


def claim(claims: Mapping[str, Any], path: str) -> Any:
    """The claim at a dotted ``path`` (None where it is missing)."""
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def roles_of(value: Any) -> list[str]:
    """Role names from a list of strings or a space-separated string; others are left out
    (a role name the grants could never hold gives nothing, so dropping it denies nothing)."""
    items = value.split() if isinstance(value, str) else value
    if not isinstance(items, list):
        return []
    return [r for r in items if isinstance(r, str) and SYSTEM_NAME.fullmatch(r)]
