"""Wiring of the identity services (principals, tokens) into the node's aiohttp app."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from functools import partial

from aiohttp import web

from metastore.config.server_config import ServerConfig
from metastore.http.typedefs import CONFIG, IDENTITY, METASTORE, PENDING
from metastore.node.bootstrap import bootstrapping
from metastore.security.identity import Identity, IdentitySettings


def settings_of(config: ServerConfig) -> IdentitySettings:
    return IdentitySettings(
        default_tenant=config.default_tenant,
        token_ttl_seconds=config.token_ttl_seconds,
        failures_per_client=config.token_failures_per_client,
        failures_per_address=config.token_failures_per_address,
        failure_window_s=config.token_failure_window_s,
        hash_threads=config.token_hash_threads,
        hash_queue=config.token_hash_queue,
        admins=config.service_admins,
        oidc=config.oidc,
    )


async def identity_ctx(app: web.Application) -> AsyncIterator[None]:
    """The identity services (after the metastore's own contexts, before the APIs'):
    the token signing key and the configured clients are bootstrapped like the
    default catalog (``metastore.node.bootstrap``)."""
    config = app[CONFIG]
    identity = Identity.build(app[METASTORE], settings_of(config))
    app[IDENTITY] = identity
    step = partial(identity.bootstrap, config.clients)
    try:
        async with bootstrapping(
            step, "token signing key", background=config.cluster_mode, pending=app[PENDING]
        ):
            yield
    finally:
        await asyncio.to_thread(identity.hashes.close)
