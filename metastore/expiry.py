"""Expiring what a node itself writes and nothing references: idempotency records past
their lifetime, dropped tables and views past their catalog's retention, node-id leases
long expired.

An idempotency record only has to outlive a client's retries of one request; past
its lifetime it is deleted in one ordinary commit of its catalog (so it leaves the
index like any dropped entity, and a garbage-collection sweep later removes the
object). A node-id lease whose holder has not renewed it for long is removed by
compare-and-swap on its token, so a node taking the id at the same moment wins
and nothing it holds is ever removed. A dropped table or view (``metastore.dropped``)
past the catalog's ``drop.retention-ms`` is collected the same way as an idempotency
record: its record is deleted in one commit, which also frees its location; the caller
then purges its files, and a later sweep removes its objects.
"""

from __future__ import annotations

from collections.abc import Callable

from metastore import dropped
from metastore.changes import DeleteEntity
from metastore.codec import Codec
from metastore.commits import CommitRequest
from metastore.errors import CommitConflict, ValidationFailed
from metastore.ids import MAX_NODE_ID
from metastore.keys import CATALOG_RECORD, EntityKey, Kind
from metastore.leases import lease_key
from metastore.model import Entity
from metastore.persistence.base import Persistence
from metastore.requirements import AssertVersion
from metastore.service import Metastore

IDEMPOTENCY_PREFIX = "idempotency:"
MAX_PER_COMMIT = 10_000  # records expired per call; call again for more
MIN_LIFETIME_S = 1
COLLECT_ATTEMPTS = 5  # collections of dropped records an undrop can make read again


def expired_records(
    metastore: Metastore, tenant: str, catalog: str, older_than_us: int
) -> list[EntityKey]:
    """The catalog's idempotency records created before ``older_than_us`` (at HEAD)."""
    found: list[EntityKey] = []
    token: str | None = None
    while len(found) < MAX_PER_COMMIT:
        page = metastore.list_entities(
            tenant, catalog, (), Kind.SYSTEM, token, 1000, name_prefix=IDEMPOTENCY_PREFIX
        )
        found += [e.key for e in page.items if e.created_at_us < older_than_us]
        token = page.next_token
        if token is None:
            break
    return found[:MAX_PER_COMMIT]


async def expire_idempotency(
    metastore: Metastore, tenant: str, catalog: str, lifetime_s: int, now_us: int, principal: str
) -> int:
    """Delete the catalog's idempotency records older than ``lifetime_s``, in one commit."""
    if lifetime_s < MIN_LIFETIME_S:
        raise ValidationFailed(f"lifetime-seconds must be at least {MIN_LIFETIME_S}")
    keys = await metastore.read(
        expired_records, metastore, tenant, catalog, now_us - lifetime_s * 1_000_000
    )
    if not keys:
        return 0
    request = CommitRequest(
        changes=tuple(DeleteEntity(k) for k in keys),
        principal=principal,
        operation="expire idempotency records",
    )
    await metastore.commit(tenant, catalog, request)
    return len(keys)


def expired_drops(
    metastore: Metastore, tenant: str, catalog: str, now_us: int
) -> list[dropped.Dropped]:
    """The catalog's dropped tables and views kept longer than its retention (at HEAD)."""
    head = metastore.head(tenant, catalog)
    objects = metastore.objects(tenant, catalog)
    index = objects.index(head)
    assert index is not None
    record = index.get(CATALOG_RECORD.encode())
    properties = objects.entity(record[1]).properties if record is not None else {}
    cutoff_us = now_us - dropped.retention_ms(properties) * 1000
    found = [d for d in dropped.scan(index, objects.entity) if d.dropped_at_us <= cutoff_us]
    return found[:MAX_PER_COMMIT]


async def collect_dropped(
    metastore: Metastore,
    tenant: str,
    catalog: str,
    now_us: int,
    principal: str,
    hold: Callable[[Entity], object] = lambda _: None,
) -> list[Entity]:
    """Delete the dropped tables and views past the catalog's retention in one commit;
    the last versions of those collected (whose files the caller purges). ``hold`` is
    called with each before the commit that lets its location go (the caller's purge
    holds it from then: ``metastore.purging``)."""
    for attempt in range(COLLECT_ATTEMPTS):
        found = await metastore.read(expired_drops, metastore, tenant, catalog, now_us)
        if not found:
            return []
        for drop in found:
            hold(drop.entity)
        request = CommitRequest(
            # each exactly as read: one undropped (and dropped again) meanwhile stays
            requirements=tuple(AssertVersion(d.record, d.entity.version) for d in found),
            changes=tuple(DeleteEntity(d.record) for d in found),
            principal=principal,
            operation="collect dropped",
        )
        try:
            await metastore.commit(tenant, catalog, request)
        except CommitConflict:
            if attempt + 1 == COLLECT_ATTEMPTS:
                raise
            continue  # an undrop won: read again
        return [d.entity for d in found]
    return []


def remove_node_leases(
    persistence: Persistence, codec: Codec, expired_for_s: int, now_us: int
) -> int:
    """Remove node-id leases expired for more than ``expired_for_s`` (blocking)."""
    if expired_for_s < MIN_LIFETIME_S:
        raise ValidationFailed(f"expired-for-seconds must be at least {MIN_LIFETIME_S}")
    cutoff = now_us - expired_for_s * 1_000_000
    removed = 0
    for node_id in range(MAX_NODE_ID + 1):
        key = lease_key(node_id)
        stored = persistence.get_updateable(key)
        if stored is None:
            continue
        if codec.decode("node_lease", stored.data)["leased_until_us"] >= cutoff:
            continue
        if persistence.cas_updateable(key, stored.token, None):  # lost: someone took it
            removed += 1
    return removed
