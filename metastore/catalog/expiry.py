"""Expiring what a node itself writes and nothing references: idempotency records past
their lifetime, dropped tables and views past their catalog's retention, node-id leases
long expired.

An idempotency record only has to outlive a client's retries of one request; past
its lifetime it is deleted in one ordinary commit of its catalog (so it leaves the
index like any dropped entity, and a garbage-collection sweep later removes the
object). A node-id lease whose holder has not renewed it for long is removed by
compare-and-swap on its token, so a node taking the id at the same moment wins
and nothing it holds is ever removed.

A dropped table or view (``metastore.engine.dropped``) past the catalog's ``drop.retention-ms``
is collected in two steps, so that a crash in between loses no track of its files: one
commit moves every such table with files of its own to its purging record (and deletes
the others' records, views and native tables, which have none); then the caller purges
each one's files and deletes its record (``finish_purge``), which frees its location.
Every purging record the expiry finds is purged so, those a drop's purge or an earlier
expiry left when a crash cut it short included. A later sweep removes their objects.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable

from metastore.catalog.service import Metastore
from metastore.engine import dropped
from metastore.engine.commits import CommitRequest
from metastore.engine.leases import lease_key
from metastore.errors import CommitConflict, MetastoreError, NotFound, ValidationFailed
from metastore.model.changes import DeleteEntity, PurgeDropped
from metastore.model.codec import Codec
from metastore.model.ids import MAX_NODE_ID
from metastore.model.keys import CATALOG_RECORD, EntityKey, Kind
from metastore.model.records import Entity
from metastore.model.requirements import AssertVersion
from metastore.persistence.base import Persistence

log = logging.getLogger(__name__)

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


def purging(metastore: Metastore, tenant: str, catalog: str) -> list[dropped.Dropped]:
    """The catalog's dropped tables whose purge has not ended (at HEAD)."""
    head = metastore.head(tenant, catalog)
    objects = metastore.objects(tenant, catalog)
    index = objects.index(head)
    assert index is not None
    return list(itertools.islice(dropped.scan_purging(index, objects.entity), MAX_PER_COMMIT))


async def collect_dropped(
    metastore: Metastore,
    tenant: str,
    catalog: str,
    now_us: int,
    principal: str,
    has_files: Callable[[Entity], bool],
) -> tuple[int, list[dropped.Dropped]]:
    """Collect the dropped tables and views past the catalog's retention in one commit:
    delete the records of those without files of their own, and move the others to
    their purging records. The number deleted, and every purging record now, whose
    files the caller purges before it deletes each (``finish_purge``)."""
    deleted = 0
    for attempt in range(COLLECT_ATTEMPTS):
        found = await metastore.read(expired_drops, metastore, tenant, catalog, now_us)
        if not found:
            break
        request = CommitRequest(
            # each exactly as read: one undropped (and dropped again) meanwhile stays
            requirements=tuple(AssertVersion(d.record, d.entity.version) for d in found),
            changes=tuple(
                PurgeDropped(d.record) if has_files(d.entity) else DeleteEntity(d.record)
                for d in found
            ),
            principal=principal,
            operation="collect dropped",
        )
        try:
            await metastore.commit(tenant, catalog, request)
        except CommitConflict:
            if attempt + 1 == COLLECT_ATTEMPTS:
                raise
            continue  # an undrop won: read again
        deleted = sum(not has_files(d.entity) for d in found)
        break
    return deleted, await metastore.read(purging, metastore, tenant, catalog)


async def finish_purge(
    metastore: Metastore, tenant: str, catalog: str, record: EntityKey, principal: str
) -> bool:
    """Delete the purging ``record`` of a table whose purge has ended, which frees its
    location. False when it is gone already (another run of the purge finished it) or
    the commit failed: the purge has ended either way, and the record, if it stays, is
    the next expiry's to finish."""
    request = CommitRequest(
        changes=(DeleteEntity(record),), principal=principal, operation="purge ended"
    )
    try:
        await metastore.commit(tenant, catalog, request)
    except NotFound:
        return False
    except MetastoreError as exc:
        log.warning("%s stays for the next expiry: %s", record.name, exc.message)
        return False
    return True


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
