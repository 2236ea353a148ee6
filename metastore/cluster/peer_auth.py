"""The node credential: every node-to-node request is signed with the cluster secret.

A node proves it is a node by an HMAC-SHA256, keyed by the cluster secret, over
what the request does: its method, raw path and query, the URL of the node it is
addressed to, the sending node, a timestamp, a random nonce, a digest of the body
and a digest of the client's ``Authorization`` header (a forwarded write keeps
the client's own credentials, which the owner checks again). The receiver
recomputes it and refuses (401) a request whose signature differs, whose
timestamp is more than ``MAX_SKEW_S`` away from its own clock, whose nonce it
has already accepted, or that was addressed to another node. So a captured
request cannot be altered, replayed, or redirected to another node, and the
secret never travels. Nonces are remembered for twice the skew window (a node
restarted within that window forgets the nonces it had seen). The signature travels
in ``SIGNATURE_HEADER`` beside the sender's URL in ``FORWARDED_HEADER``, both named by
the node-to-node protocol (``metastore.cluster.protocol``).

The secret comes from ``METASTORE_CLUSTER_SECRET`` or from the file named by
``METASTORE_CLUSTER_SECRET_FILE`` (trailing whitespace removed) and is at least
``MIN_SECRET_LENGTH`` characters; every node of a cluster has the same one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import ssl
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from metastore.cluster.protocol import FORWARDED_HEADER, SIGNATURE_HEADER
from metastore.errors import Unauthorized
from metastore.util.setting_rules import ConfigError
from metastore.util.small_files import NotSmallFile, read_small_file

MIN_SECRET_LENGTH = 32
MAX_SKEW_S = 30
SECRET_ENV = "METASTORE_CLUSTER_SECRET"
SECRET_FILE_ENV = "METASTORE_CLUSTER_SECRET_FILE"
MAX_SECRET_FILE_BYTES = 64 * 1024
_VERSION = "v1"
_CONTEXT = b"metastore node signature v1"


def resolve_secret(value: str, path: str) -> str:
    """The cluster secret from the setting or its file ("" if neither is set)."""
    if value and path:
        raise ConfigError("cluster_secret", f"set it or {SECRET_FILE_ENV}, not both", SECRET_ENV)
    setting, where = "cluster_secret", SECRET_ENV
    if path:
        setting, where = "cluster_secret_file", SECRET_FILE_ENV
        try:
            value = read_small_file(path, MAX_SECRET_FILE_BYTES).decode().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(setting, f"cannot read {path}: {exc}", where) from None
        except NotSmallFile as exc:
            raise ConfigError(setting, f"{path} {exc}", where) from None
        if not value:
            raise ConfigError(setting, f"{path} is empty", where)
    if value and len(value) < MIN_SECRET_LENGTH:
        raise ConfigError(
            setting,
            f"the cluster secret must be at least {MIN_SECRET_LENGTH} characters "
            f"(got {len(value)})",
            where,
        )
    return value


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class PeerKey:
    """Signs and checks node signatures with one cluster secret.

    ``sign`` may be called from any thread (the lease CAS signs in an executor);
    ``verify`` keeps the accepted nonces and is called on the event loop only.
    """

    def __init__(
        self,
        secret: str,
        *,
        max_skew_s: int = MAX_SKEW_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if len(secret) < MIN_SECRET_LENGTH:
            raise ValueError(f"the cluster secret must be at least {MIN_SECRET_LENGTH} characters")
        # derived, so the configured secret itself is used for nothing else
        self._key = hmac.new(secret.encode(), _CONTEXT, hashlib.sha256).digest()
        self._max_skew_s = max_skew_s
        self._clock = clock
        self._seen: OrderedDict[str, int] = OrderedDict()  # nonce -> its timestamp

    def _mac(
        self,
        *,
        method: str,
        path_qs: str,
        target: str,
        sender: str,
        timestamp: int,
        nonce: str,
        body: bytes,
        authorization: str | None,
    ) -> str:
        canonical = "\n".join(
            (
                _VERSION,
                method.upper(),
                path_qs,
                target.rstrip("/"),
                sender,
                str(timestamp),
                nonce,
                _digest(body),
                _digest((authorization or "").encode()),
            )
        )
        mac = hmac.new(self._key, canonical.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode().rstrip("=")

    def sign(
        self,
        method: str,
        target: str,
        path_qs: str,
        body: bytes,
        *,
        sender: str,
        authorization: str | None = None,
    ) -> dict[str, str]:
        """The headers that make a request to the node at ``target`` a node's request."""
        timestamp, nonce = int(self._clock()), secrets.token_hex(16)
        mac = self._mac(
            method=method,
            path_qs=path_qs,
            target=target,
            sender=sender,
            timestamp=timestamp,
            nonce=nonce,
            body=body,
            authorization=authorization,
        )
        return {
            FORWARDED_HEADER: sender,
            SIGNATURE_HEADER: f"{_VERSION} {timestamp} {nonce} {mac}",
        }

    def verify(
        self,
        method: str,
        target: str,
        path_qs: str,
        body: bytes,
        headers: Mapping[str, str],
    ) -> str:
        """The sending node's URL for a valid signature addressed to ``target``, else 401."""
        sender = headers.get(FORWARDED_HEADER)
        signature = headers.get(SIGNATURE_HEADER)
        if not sender or not signature:
            raise Unauthorized("node credential required: this endpoint serves cluster nodes only")
        version, timestamp, nonce, mac = [*signature.split(" "), "", "", "", ""][:4]
        if version != _VERSION or not timestamp.isdigit() or len(nonce) != 32 or not mac:
            raise Unauthorized("malformed node signature")
        signed_at = int(timestamp)
        expected = self._mac(
            method=method,
            path_qs=path_qs,
            target=target,
            sender=sender,
            timestamp=signed_at,
            nonce=nonce,
            body=body,
            authorization=headers.get("Authorization"),
        )
        if not hmac.compare_digest(expected, mac):
            raise Unauthorized("invalid node signature")
        now = self._clock()
        if abs(now - signed_at) > self._max_skew_s:
            raise Unauthorized(
                f"node signature expired or from the future (clock skew over {self._max_skew_s}s)"
            )
        self._forget(now)
        if nonce in self._seen:
            raise Unauthorized("replayed node signature")
        self._seen[nonce] = signed_at
        return sender

    def _forget(self, now: float) -> None:
        """Drop nonces whose timestamps can no longer pass the skew check."""
        horizon = now - 2 * self._max_skew_s
        while self._seen:
            _, signed_at = next(iter(self._seen.items()))
            if signed_at >= horizon:
                break
            self._seen.popitem(last=False)


@dataclass(frozen=True)
class Peers:
    """This node's side of node-to-node calls: how it signs the requests it sends and
    checks the ones it receives, and the TLS context of its calls to peers.

    Without a cluster secret (allowed only with auth off) nothing is signed and a
    request naming a sending node is taken at its word, as before secrets existed.
    """

    url: str  # this node's advertised URL: signatures must be addressed to it
    key: PeerKey | None = None
    client_ssl: ssl.SSLContext | None = None  # peers over HTTPS (and mutual TLS)
    require_client_cert: bool = False  # mutual TLS: node requests must present a cert

    def sign(
        self, method: str, target: str, path_qs: str, body: bytes, authorization: str | None
    ) -> dict[str, str]:
        if self.key is None:
            return {FORWARDED_HEADER: self.url}
        return self.key.sign(
            method, target, path_qs, body, sender=self.url, authorization=authorization
        )
