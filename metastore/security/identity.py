"""The node's identity services, built from its settings, and their startup step."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from metastore.catalog.service import Metastore
from metastore.security.attempts import Attempts, FailureWindow
from metastore.security.authenticator import Authenticator
from metastore.security.hashing import HashPool
from metastore.security.oidc import OidcSettings, OidcVerifier
from metastore.security.principal_records import PrincipalDirectory
from metastore.security.principals import Principals
from metastore.security.signing import SigningKeys
from metastore.security.tokens import TokenSigner


@dataclass(frozen=True, slots=True)
class IdentitySettings:
    default_tenant: str
    token_ttl_seconds: int
    failures_per_client: int
    failures_per_address: int
    failure_window_s: float
    hash_threads: int
    hash_queue: int
    admins: frozenset[tuple[str, str]]  # (kind, principal id)
    oidc: OidcSettings | None


@dataclass(frozen=True, slots=True)
class Identity:
    auth: Authenticator
    principals: Principals
    keys: SigningKeys
    hashes: HashPool
    default_tenant: str

    @classmethod
    def build(cls, metastore: Metastore, settings: IdentitySettings) -> Identity:
        hashes = HashPool(settings.hash_threads, settings.hash_queue)
        attempts = Attempts(
            FailureWindow(settings.failures_per_client, settings.failure_window_s),
            FailureWindow(settings.failures_per_address, settings.failure_window_s),
        )
        keys = SigningKeys(metastore, settings.default_tenant)
        auth = Authenticator(
            metastore,
            PrincipalDirectory(metastore),
            TokenSigner(keys, settings.token_ttl_seconds),
            hashes,
            attempts,
            settings.admins,
            OidcVerifier.of(settings.oidc) if settings.oidc is not None else None,
        )
        return cls(auth, Principals(metastore), keys, hashes, settings.default_tenant)

    async def bootstrap(self, clients: Mapping[str, str]) -> None:
        """The signing key if there is none; client records of earlier versions turned into
        principals; the configured clients that do not exist yet created."""
        await self.keys.ensure()
        await self.principals.migrate_clients(self.default_tenant)
        await self.principals.seed(self.default_tenant, clients)
