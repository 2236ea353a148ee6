"""Snowflake node IDs leased with CAS on updateable objects.

A node picks a random node ID, and takes its lease object if it is absent or
expired, by compare-and-swap on the version token. It renews well before expiry
(a third of the lease) and releases on shutdown, so a restarted node (or a
replacement) can take a free ID at once. Lease objects live under the reserved
system tenant "" and use reserved IDs (``ids.system_id``).

The node mints with its node ID only until a sixth of the lease before its end
(``writes_until_us``, 10 s of a 60 s lease): another node decides that a lease has
expired by its own clock, so the margin covers clocks that disagree by up to that
much. A node whose renewals keep failing (the store out of reach) thus stops writing
before anyone may take its ID over, and whoever listens (``on_change``: the node's
``SnowflakeGenerator``) hears of every lease held, renewed and lost. A lost lease is
not the end: ``acquire`` leases a node ID again (perhaps another), and the node
writes again with it.
"""

from __future__ import annotations

import logging
import random
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass

from metastore.errors import MetastoreError, ServiceUnavailable
from metastore.model.codec import Codec
from metastore.model.ids import MAX_NODE_ID, SnowflakeGenerator, system_id
from metastore.model.keys import ObjKey
from metastore.model.objtypes import NODE_LEASE
from metastore.persistence.base import Persistence, UpdateableObject
from metastore.util.clock import Clock

log = logging.getLogger(__name__)

SYSTEM_TENANT = ""
GUARD_FRACTION = 6  # the node stops minting this fraction of a lease before its end


@dataclass(frozen=True, slots=True)
class Lease:
    node_id: int
    token: str
    leased_until_us: int


def lease_key(node_id: int) -> ObjKey:
    return ObjKey(SYSTEM_TENANT, "", NODE_LEASE.name, system_id(node_id))


class NodeLeaser:
    def __init__(
        self,
        persistence: Persistence,
        codec: Codec,
        clock: Clock,
        holder: str,
        lease_seconds: float = 60.0,
        rng: random.Random | None = None,
    ) -> None:
        self._persistence = persistence
        self._codec = codec
        self._clock = clock
        self._holder = holder
        self._lease_us = int(lease_seconds * 1_000_000)
        self._rng = rng or random.Random()
        self._lease: Lease | None = None
        self._unsettled: Lease | None = None  # a renewal whose outcome is not known yet
        self._listeners: list[Callable[[Lease | None], None]] = []
        self.lost = 0  # leases lost (``/metrics``)
        # renewals, a lease again after a loss and the release at shutdown run in worker
        # threads: one at a time
        self._lock = threading.RLock()

    @property
    def lease(self) -> Lease | None:
        return self._lease

    @property
    def renew_interval_s(self) -> float:
        return self._lease_us / 3 / 1_000_000

    @property
    def guard_us(self) -> int:
        return self._lease_us // GUARD_FRACTION

    def writes_until_us(self, lease: Lease | None = None) -> int:
        """The wall-clock microsecond from which this node mints nothing under ``lease``
        (the current one by default; 0 without one)."""
        lease = self._lease if lease is None else lease
        return 0 if lease is None else lease.leased_until_us - self.guard_us

    def holds(self) -> bool:
        """Whether this node may mint ids now."""
        return self._clock.now_us() < self.writes_until_us()

    def writes_for_s(self) -> float:
        """Seconds this node may still mint ids without another renewal (0: none)."""
        return max(self.writes_until_us() - self._clock.now_us(), 0) / 1_000_000

    def on_change(self, listener: Callable[[Lease | None], None]) -> None:
        """Call ``listener`` with the lease after every change (None: lost, released)."""
        self._listeners.append(listener)

    def mint_with(self, ids: SnowflakeGenerator) -> None:
        """``ids`` mints under this leaser's lease from now on: bound to the current one
        at once, and again at every change (none while there is no lease)."""

        def follow(held: Lease | None) -> None:
            if held is None:
                ids.bind(None)
            else:
                ids.bind(held.node_id, self.writes_until_us(held))

        self.on_change(follow)
        follow(self._lease)

    def _hold(self, lease: Lease | None) -> None:
        self._lease = lease
        for listener in self._listeners:
            listener(lease)

    def _object(self, node_id: int, until_us: int) -> UpdateableObject:
        data = self._codec.encode(
            "node_lease",
            {"node_id": node_id, "holder": self._holder, "leased_until_us": until_us},
        )
        return UpdateableObject(lease_key(node_id), data, secrets.token_hex(8))

    def acquire(self) -> Lease:
        """A free node ID, leased: at startup, and again after a lease was lost."""
        with self._lock:
            return self._acquire()

    def _acquire(self) -> Lease:
        candidates = list(range(MAX_NODE_ID + 1))
        self._rng.shuffle(candidates)
        for node_id in candidates:
            current = self._persistence.get_updateable(lease_key(node_id))
            now = self._clock.now_us()
            if current is not None:
                record = self._codec.decode("node_lease", current.data)
                if record["leased_until_us"] > now:
                    continue
            until = now + self._lease_us
            new = self._object(node_id, until)
            expected = current.token if current is not None else None
            if self._persistence.cas_updateable(new.key, expected, new):
                lease = Lease(node_id, new.token, until)
                self._unsettled = None
                self._hold(lease)
                log.info("leased node id %d until %d", node_id, until)
                return lease
        raise ServiceUnavailable("all 1024 snowflake node ids are leased; cannot start")

    def renew(self) -> bool:
        """Extend the lease; False once it is lost (taken over after expiry, or not
        renewed in time). A renewal that fails or whose outcome is unknown (no owner of
        the system partition answered, a fenced owner) is never fatal while the lease
        holds: the lease is read back, and the next interval tries again."""
        with self._lock:
            return self._renew()

    def _renew(self) -> bool:
        lease = self._lease
        if lease is None:
            return False
        lease = self._adopt_unsettled(lease)
        until = self._clock.now_us() + self._lease_us
        new = self._object(lease.node_id, until)
        try:
            swapped = self._persistence.cas_updateable(new.key, lease.token, new)
        except MetastoreError as exc:
            return self._settle(lease, Lease(lease.node_id, new.token, until), exc)
        if swapped:
            self._hold(Lease(lease.node_id, new.token, until))
            return True
        return self._lost(lease)

    def _settle(self, lease: Lease, attempt: Lease, error: MetastoreError) -> bool:
        """Read the lease back after a renewal that raised: renewed, still ours until it
        expires (tried again next interval), or lost."""
        token = self._token(lease.node_id)
        if token == attempt.token:
            self._hold(attempt)
            return True
        if token == lease.token and self._clock.now_us() < lease.leased_until_us:
            # the renewal may still reach this node's view: remember it (see renew)
            self._unsettled = attempt
            log.warning(
                "could not renew node id %d (%s); it holds for %.0fs more, retrying",
                lease.node_id,
                error.message,
                (lease.leased_until_us - self._clock.now_us()) / 1_000_000,
            )
            return True
        return self._lost(lease)

    def _adopt_unsettled(self, lease: Lease) -> Lease:
        """A renewal whose outcome was unknown and that has since reached the view holds."""
        attempt, self._unsettled = self._unsettled, None
        if attempt is not None and self._token(lease.node_id) == attempt.token:
            self._hold(attempt)
            return attempt
        return lease

    def _token(self, node_id: int) -> str | None:
        current = self._persistence.get_updateable(lease_key(node_id))
        return None if current is None else current.token

    def _lost(self, lease: Lease) -> bool:
        log.error("lost the lease on node id %d", lease.node_id)
        self.lost += 1
        self._hold(None)
        return False

    def release(self) -> None:
        with self._lock:
            self._release()

    def _release(self) -> None:
        lease = self._lease
        if lease is None:
            return
        try:
            self._persistence.cas_updateable(lease_key(lease.node_id), lease.token, None)
        except MetastoreError as exc:  # a courtesy: it expires on its own
            log.warning("could not release node id %d: %s", lease.node_id, exc.message)
        except Exception as exc:  # the store failing its writes (a full disk): the same
            log.warning(
                "could not release node id %d: %s: %s", lease.node_id, type(exc).__name__, exc
            )
        self._hold(None)
