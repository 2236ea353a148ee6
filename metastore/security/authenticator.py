"""Who is calling: OAuth2 client credentials in, JWTs out, and every bearer token checked.

Issuing (``POST /v1/oauth/tokens``) never tells an unknown client id from a wrong
secret or a disabled principal: each costs one hash (an unknown id is hashed
against a decoy record), answers the same and counts against the same failure
limits. Hashing runs on a bounded thread pool, never on the event loop.

Verifying a token reads the principal's record from this node's view on every
request (``PrincipalDirectory``, a few dict lookups while nothing changed): a
token is refused at once on every node that has applied the commit that
disabled or deleted its principal, or rotated its secret. Those reads, and the
signing keys', are point reads (``Metastore.read_point``): on the event loop while
memory holds them, else in a worker thread. Tokens of an external
identity provider (``metastore.security.oidc``) are told apart by their issuer;
they name a user, refused if the tenant holds a disabled user record of that
name (or a service principal: a provider cannot sign in as one).
"""

from __future__ import annotations

import hmac

import jwt

from metastore.catalog.service import Metastore
from metastore.errors import NoSuchTenant, Unauthorized
from metastore.security.attempts import Attempts
from metastore.security.hashing import HashingBusy, HashPool
from metastore.security.oidc import OidcVerifier
from metastore.security.principal import Principal, parse_principal_id
from metastore.security.principal_records import PrincipalDirectory, PrincipalRecord
from metastore.security.tokens import ISSUER, TokenClaims, TokenSigner

BEARER = "Bearer "


class Authenticator:
    def __init__(
        self,
        metastore: Metastore,
        directory: PrincipalDirectory,
        signer: TokenSigner,
        hashes: HashPool,
        attempts: Attempts,
        admins: frozenset[tuple[str, str]],
        oidc: OidcVerifier | None = None,
    ) -> None:
        self._metastore = metastore
        self._directory = directory
        self._signer = signer
        self._hashes = hashes
        self._attempts = attempts
        self._admins = admins
        self._oidc = oidc
        self._decoy = PrincipalRecord.decoy()

    @property
    def ttl(self) -> int:
        return self._signer.ttl

    def is_service_admin(self, principal: Principal) -> bool:
        """Named in ``METASTORE_AUTH_ADMINS``, of the kind named there (a provider user
        never by a service principal's entry): every privilege in every tenant."""
        return (principal.kind, principal.id) in self._admins

    async def issue(self, client_id: str, secret: str, address: str) -> str:
        """A token for valid client credentials of an enabled service principal.

        ``Unauthorized`` for an unknown id, a wrong secret or a disabled principal
        alike, ``TooManyFailures`` past the failure limits, ``HashingBusy`` when the
        hashing pool is full (nothing checked, nothing counted).
        """
        parsed = parse_principal_id(client_id)  # None: no principal has this id
        # counted per principal: "alice" and "alice@default" are one id, one window
        counted = Principal(*parsed, "service").id if parsed else ""
        attempt = self._attempts.begin(counted, address)
        record = await self._metastore.read_point(self._record, *parsed) if parsed else None
        if record is not None and record.type != "service":
            record = None
        target = record or self._decoy
        try:
            valid = await self._hashes.matches(secret, target.salt, target.hash)
        except HashingBusy:  # nothing was checked: not a failure
            self._attempts.forgive(attempt)
            raise
        if parsed is None or record is None or not valid or record.disabled:
            raise Unauthorized("invalid client credentials")
        self._attempts.forgive(attempt)
        tenant, name = parsed
        principal = Principal(tenant, name, "service")
        return await self._metastore.read_point(self._signer.issue, principal, record.generation)

    async def verify(self, header: str | None) -> Principal:
        """The principal of a valid ``Authorization: Bearer`` header, else 401."""
        if not header or not header.startswith(BEARER):
            raise Unauthorized("a bearer token is required")
        token = header[len(BEARER) :].strip()
        known = self._signer.remembered(token)  # verified before: no JWT parsing again
        if known is not None:
            return await self._metastore.read_point(self._service_principal, known)
        try:  # which verifier: only that one's keys and algorithms are tried
            issuer = jwt.decode(token, options={"verify_signature": False}).get("iss")
        except jwt.PyJWTError:
            raise Unauthorized("invalid bearer token: not a JWT") from None
        if issuer == ISSUER:
            return await self._metastore.read_point(self._service_token, token)
        if self._oidc is not None and issuer == self._oidc.issuer:
            return await self._metastore.read_point(self._user, await self._oidc.verify(token))
        raise Unauthorized("invalid bearer token: unknown issuer")

    def _service_token(self, token: str) -> Principal:
        return self._service_principal(self._signer.verify(token))

    def _service_principal(self, claims: TokenClaims) -> Principal:
        record = self._record(claims.tenant, claims.name)
        if record is None or record.type != "service":
            raise Unauthorized("the bearer token's principal no longer exists")
        if record.disabled:
            raise Unauthorized("the bearer token's principal is disabled")
        if not hmac.compare_digest(claims.generation.encode(), record.generation.encode()):
            raise Unauthorized("the bearer token was revoked: its principal's secret changed")
        return Principal(claims.tenant, claims.name, "service")

    def _user(self, user: Principal) -> Principal:
        try:
            record = self._directory.get(user.tenant, user.name)
        except NoSuchTenant:
            raise Unauthorized(f"the token's tenant does not exist: {user.tenant}") from None
        if record is not None and record.type == "service":
            raise Unauthorized("the token names a service principal, not a user")
        if record is not None and record.disabled:
            raise Unauthorized("the bearer token's principal is disabled")
        return user

    def _record(self, tenant: str, name: str) -> PrincipalRecord | None:
        try:
            return self._directory.get(tenant, name)
        except NoSuchTenant:
            return None
