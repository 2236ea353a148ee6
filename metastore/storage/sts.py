"""Vended credentials: STS ``AssumeRole`` with a table's session policy, cached.

``Vendor.vend`` is blocking (an HTTPS call to STS): run it off the event loop. The
call is signed with the catalog's own storage secrets (or the node's ambient AWS
credentials when its storage names none). Credentials are cached per role, endpoint,
signing key and scope and handed out again while at least half their lifetime remains, so a
client that loads its table often costs one STS call per half lifetime, and every
client gets credentials that stay valid for a while.

An STS failure (refused, unreachable, a role the node may not assume) is a 503
naming the role and STS's own first line: the server's configuration, not the
client's request, is at fault.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from metastore.errors import StorageUnavailable
from metastore.storage.vending import Scope, VendingSettings, session_policy

EXPIRES_AT = "s3.session-token-expires-at-ms"  # the key Iceberg's clients read
MAX_CACHED = 10_000
_SESSION_CHARS = re.compile(r"[^\w+=,.@-]")


@dataclass(frozen=True, slots=True)
class Vended:
    access_key_id: str
    secret_access_key: str
    session_token: str
    expires_at_ms: int

    def config(self) -> dict[str, str]:
        """The FileIO properties of these credentials (``config`` of a load result)."""
        return {
            "s3.access-key-id": self.access_key_id,
            "s3.secret-access-key": self.secret_access_key,
            "s3.session-token": self.session_token,
            EXPIRES_AT: str(self.expires_at_ms),
        }


def session_name(principal: str) -> str:
    """STS's RoleSessionName (2-64 of ``\\w+=,.@-``): the principal, so the storage's
    audit log names who the credentials were vended for."""
    name = _SESSION_CHARS.sub("-", f"metastore-{principal}")[:64]
    return name if len(name) >= 2 else "metastore"


class Vendor:
    """Assumes roles for scopes; thread-safe. ``clock`` returns epoch seconds."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, str, str, Scope], tuple[Vended, float]] = {}

    def vend(
        self,
        settings: VendingSettings,
        scope: Scope,
        io_properties: Mapping[str, str],
        principal: str,
    ) -> Vended:
        endpoint = settings.sts_endpoint or io_properties.get("s3.endpoint") or ""
        # the signing key too: credentials vended with keys the storage no longer names
        # (rotated, revoked) are not handed out again
        key = (settings.role_arn, endpoint, io_properties.get("s3.access-key-id", ""), scope)
        now = self._clock()
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None and now < cached[1]:
            return cached[0]
        vended = self._assume(settings, scope, io_properties, endpoint, principal)
        fresh_until = now + (vended.expires_at_ms / 1000 - now) / 2
        with self._lock:
            if len(self._cache) >= MAX_CACHED:
                self._cache.clear()
            self._cache[key] = (vended, fresh_until)
        return vended

    def _assume(
        self,
        settings: VendingSettings,
        scope: Scope,
        io: Mapping[str, str],
        endpoint: str,
        principal: str,
    ) -> Vended:
        import botocore.session
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError, ClientError

        policy = session_policy(scope, settings.partition)
        region = io.get("s3.region") or io.get("client.region") or "us-east-1"
        client: Any = botocore.session.Session().create_client(
            "sts",
            region_name=region,
            endpoint_url=endpoint or None,
            aws_access_key_id=io.get("s3.access-key-id"),
            aws_secret_access_key=io.get("s3.secret-access-key"),
            aws_session_token=io.get("s3.session-token"),
            config=Config(connect_timeout=5, read_timeout=10, retries={"max_attempts": 2}),
        )
        try:
            reply = client.assume_role(
                RoleArn=settings.role_arn,
                RoleSessionName=session_name(principal),
                Policy=policy,
                DurationSeconds=settings.duration_s,
            )
        except (BotoCoreError, ClientError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise StorageUnavailable(
                f"cannot vend credentials: STS AssumeRole of {settings.role_arn} failed: {first}"
            ) from None
        finally:
            client.close()
        found = reply["Credentials"]
        return Vended(
            found["AccessKeyId"],
            found["SecretAccessKey"],
            found["SessionToken"],
            int(found["Expiration"].timestamp() * 1000),
        )
