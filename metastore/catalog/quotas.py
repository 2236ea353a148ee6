"""Per-tenant quotas: how fast a tenant may send requests and how much it may hold.

A tenant's quota is its tenant record's ``quota.*`` properties over the node's
defaults (``METASTORE_QUOTA_*``); ``0`` means no limit:

- ``quota.requests-per-second`` (a number) and ``quota.burst`` (whole requests; 0 =
  one second's worth): a token bucket per tenant on each node (``metastore.catalog.rate``);
- ``quota.max-namespaces``, ``quota.max-tables``, ``quota.max-views``: live entities
  of those kinds in all the tenant's catalogs together.

The keys are reserved: a tenant properties update that names one is checked here
(values, no unknown ``quota.*`` key) and only a service admin may make it, so a
tenant's own admin cannot raise its own quota.

Entity limits are checked inside the commit that grows a count
(``metastore.engine.commits.EntityLimits``), on the catalog's exact count of that commit
plus the other catalogs' counts at their HEADs as this node reads them. Within one
catalog that is exact under any concurrency (the count is part of the commit's
state). A tenant's catalogs are separate refs with no common commit, so commits
landing in different catalogs of one tenant at the same moment (in a cluster:
within the time the node needs to apply the others' commits) each see the others'
counts from before: together they may pass a limit by what they create, at most
one commit per other catalog in flight. A commit that only removes entities is
never refused, so a tenant over a lowered quota can always shrink.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace

from metastore.catalog.service import tenant_ref
from metastore.engine.objects import CatalogObjects
from metastore.errors import BadRequest, TooManyRequests
from metastore.model.counts import COUNTED, Counts, count
from metastore.model.keys import MAIN_REF, SYSTEM_CATALOG, TENANT_RECORD, Kind
from metastore.persistence.base import Persistence

PREFIX = "quota."
RATE, BURST = "quota.requests-per-second", "quota.burst"
MAX_NAMESPACES, MAX_TABLES, MAX_VIEWS = (
    "quota.max-namespaces",
    "quota.max-tables",
    "quota.max-views",
)
_LIMIT_KEYS = {Kind.NAMESPACE: MAX_NAMESPACES, Kind.TABLE: MAX_TABLES, Kind.VIEW: MAX_VIEWS}
MAX_RATE = 1_000_000.0
MAX_COUNT = 1_000_000_000_000
# An entity quota lifts only when something is dropped or the quota is raised; clients
# that back off on 429 are asked to wait this long before they try again.
ENTITY_RETRY_AFTER_S = 60


@dataclass(frozen=True, slots=True)
class Quota:
    requests_per_second: float = 0.0
    burst: int = 0
    max_namespaces: int = 0
    max_tables: int = 0
    max_views: int = 0

    @property
    def capacity(self) -> float:
        """The most requests at once: ``burst``, else one second's worth (at least 1)."""
        return float(self.burst) if self.burst else max(1.0, self.requests_per_second)

    def limit(self, kind: Kind) -> int:
        return {
            Kind.NAMESPACE: self.max_namespaces,
            Kind.TABLE: self.max_tables,
            Kind.VIEW: self.max_views,
        }[kind]

    def over(self, properties: Mapping[str, str]) -> Quota:
        """This quota with a tenant's ``quota.*`` properties in its place (a value that
        is not valid, e.g. set before the keys were reserved, is left out)."""
        changes: dict[str, float | int] = {}
        for field, key in _FIELDS.items():
            raw = properties.get(key)
            if raw is not None:
                try:
                    changes[field] = parse_value(key, raw)
                except BadRequest:
                    continue
        return replace(self, **changes)  # type: ignore[arg-type]


_FIELDS = {
    "requests_per_second": RATE,
    "burst": BURST,
    "max_namespaces": MAX_NAMESPACES,
    "max_tables": MAX_TABLES,
    "max_views": MAX_VIEWS,
}
assert set(_FIELDS) == {f.name for f in fields(Quota)}
KEYS = frozenset(_FIELDS.values())


def parse_value(key: str, raw: str) -> float | int:
    """A quota property's value (400 if it is not one)."""
    if key == RATE:
        try:
            rate = float(raw)
        except ValueError:
            rate = math.nan
        if not (math.isfinite(rate) and 0 <= rate <= MAX_RATE) or raw != raw.strip():
            raise BadRequest(
                f"{key} must be a number from 0 (no limit) to {MAX_RATE:g}, got {raw!r}"
            )
        return rate
    top = MAX_RATE if key == BURST else MAX_COUNT
    if not (raw.isascii() and raw.isdigit()) or int(raw) > top:
        raise BadRequest(f"{key} must be a whole number from 0 (no limit) to {top:g}, got {raw!r}")
    return int(raw)


def names_quota(updates: Mapping[str, str], removals: Sequence[str]) -> bool:
    """True iff a properties change touches a reserved ``quota.*`` key."""
    return any(key.startswith(PREFIX) for key in (*updates, *removals))


def check_properties(updates: Mapping[str, str], removals: Sequence[str]) -> None:
    """400 for an unknown ``quota.*`` key or a value that is not a quota."""
    for key in (*updates, *removals):
        if key.startswith(PREFIX) and key not in KEYS:
            raise BadRequest(f"unknown quota {key!r}: the quotas are {', '.join(sorted(KEYS))}")
    for key, value in updates.items():
        if key in KEYS:
            parse_value(key, value)


Objects = Callable[[str, str], CatalogObjects]  # (tenant, catalog) -> its objects


class TenantQuotas:
    """Each tenant's quota as this node reads it, re-read when the tenant's record moves
    (one ref read per call; thread-safe: the commit engine asks from its threads).

    ``fresh`` answers from memory what ``of`` read less than ``FRESH_S`` ago: the
    request-rate check runs on every request, on the event loop, and a store read
    there would cost a thread hand-off each time. A commit of this node to a tenant's
    own records ``forget``s its entry, so a changed quota applies here at once; one
    changed through another node applies here within ``FRESH_S``.
    """

    FRESH_S = 1.0

    def __init__(
        self,
        persistence: Persistence,
        objects: Objects,
        defaults: Quota,
        max_tenants: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._persistence = persistence
        self._objects = objects
        self.defaults = defaults
        self._max = max_tenants
        self._clock = clock
        self._known: OrderedDict[str, tuple[int, Quota]] = OrderedDict()
        self._read_at: dict[str, tuple[float, Quota | None]] = {}
        self._lock = threading.Lock()

    def fresh(self, tenant: str) -> tuple[bool, Quota | None]:
        """``(True, quota)`` when ``of`` read the tenant's quota (None: no such tenant)
        less than ``FRESH_S`` ago, else ``(False, None)``; never touches the store."""
        found = self._read_at.get(tenant)
        if found is not None and self._clock() - found[0] < self.FRESH_S:
            return True, found[1]
        return False, None

    def forget(self, tenant: str) -> None:
        """The tenant's records changed: its next ``fresh`` misses."""
        self._read_at.pop(tenant, None)

    def of(self, tenant: str) -> Quota | None:
        """The tenant's quota; None if there is no such tenant."""
        read_at = self._clock()
        quota = self._read(tenant)
        with self._lock:
            if tenant not in self._read_at and len(self._read_at) >= self._max:
                self._read_at.pop(next(iter(self._read_at)))
            self._read_at[tenant] = (read_at, quota)
        return quota

    def _read(self, tenant: str) -> Quota | None:
        ref = self._persistence.get_ref(tenant_ref(tenant))
        if ref is None:
            return None
        with self._lock:
            known = self._known.get(tenant)
            if known is not None and known[0] == ref.head:
                self._known.move_to_end(tenant)
                return known[1]
        objects = self._objects(tenant, SYSTEM_CATALOG)
        index = objects.index(objects.commit(ref.head))
        value = index.get(TENANT_RECORD.encode()) if index is not None else None
        properties = objects.entity(value[1]).properties if value is not None else {}
        quota = self.defaults.over(properties)
        with self._lock:
            self._known[tenant] = (ref.head, quota)
            self._known.move_to_end(tenant)
            while len(self._known) > self._max:
                self._known.popitem(last=False)
        return quota


class TenantEntityLimits:
    """``metastore.engine.commits.EntityLimits`` over the tenants' quotas: the catalog's counts
    after the commit plus its tenant's other catalogs' counts at their HEADs."""

    def __init__(self, persistence: Persistence, objects: Objects, quotas: TenantQuotas) -> None:
        self._persistence = persistence
        self._objects = objects
        self._quotas = quotas
        self._counted: dict[tuple[str, str, int], Counts] = {}  # HEADs without counts
        self._lock = threading.Lock()

    def check(self, tenant: str, catalog: str, counts: Counts, grown: frozenset[Kind]) -> None:
        quota = self._quotas.of(tenant)
        limited = [k for k in COUNTED if k in grown and quota is not None and quota.limit(k)]
        if quota is None or not limited:
            return
        others = self.others(tenant, catalog)
        for kind in limited:
            held = counts.of(kind) + others.of(kind)
            if held > quota.limit(kind):
                raise TooManyRequests(
                    f"tenant {tenant!r} may hold at most {quota.limit(kind)} {kind.label}s"
                    f" ({_LIMIT_KEYS[kind]}); this would make {held}: drop some, or ask a"
                    " service admin to raise the quota",
                    ENTITY_RETRY_AFTER_S,
                )

    def others(self, tenant: str, catalog: str) -> Counts:
        """The summed counts of the tenant's catalogs but ``catalog``, at their HEADs."""
        total = Counts()
        for ref in self._persistence.scan_refs(tenant):
            name = ref.key.catalog
            if not name or name == catalog or ref.key.name != MAIN_REF:
                continue
            counts = self._objects(tenant, name).commit(ref.head).counts
            if counts is None:
                counts = self._count(tenant, name, ref.head)
            total = total.added({kind: counts.of(kind) for kind in COUNTED})
        return total

    def _count(self, tenant: str, catalog: str, head: int) -> Counts:
        """A catalog whose HEAD predates counts: counted once per HEAD."""
        with self._lock:
            known = self._counted.get((tenant, catalog, head))
        if known is None:
            objects = self._objects(tenant, catalog)
            known = count(objects.index(objects.commit(head)))
            with self._lock:
                if len(self._counted) >= 1024:
                    self._counted.clear()
                self._counted[(tenant, catalog, head)] = known
        return known
