"""AWS Signature Version 4 for S3 requests a client sends itself (remote signing).

The client sends the request; the catalog only computes its ``Authorization`` header
with the storage's keys, so the secret never leaves the node. The payload is not
signed (the signer does not see the body): the hash is the client's own
``x-amz-content-sha256`` when it sent one, ``UNSIGNED-PAYLOAD`` otherwise, as S3
clients do over TLS; a batch delete, whose body says what it deletes, is signed with
its body's SHA-256. Every header the client gave is signed (but those that change
in transit: ``expect``, ``user-agent``, ``transfer-encoding``, ``x-amzn-trace-id``),
so a signature covers exactly the request that was checked.

The result is the headers to *add*: PyIceberg appends the signer's headers to its
request and Java's client puts its own back over them, so a header the client already
has is never returned (a second copy would change what S3 verifies).

The canonical request is S3's: the path as sent (``s3_requests`` has checked it is
canonically encoded, so it is what S3 reconstructs), query pairs sorted.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

from metastore.errors import BadRequest

ALGORITHM = "AWS4-HMAC-SHA256"
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
PAYLOADS = frozenset({UNSIGNED_PAYLOAD, "STREAMING-UNSIGNED-PAYLOAD-TRAILER"})
UNSIGNED_HEADERS = frozenset({"expect", "user-agent", "transfer-encoding", "x-amzn-trace-id"})
MAX_CLOCK_SKEW = timedelta(minutes=5)  # for a client that sent its own x-amz-date
_DATE = "%Y%m%dT%H%M%SZ"
_HEX64 = frozenset("0123456789abcdef")


@dataclass(frozen=True, slots=True)
class AwsKeys:
    access_key_id: str
    secret_access_key: str = ""
    session_token: str | None = None

    def __repr__(self) -> str:  # never a secret in a log line or a traceback
        return f"AwsKeys({self.access_key_id[:4]}...)"

    @classmethod
    def of(cls, properties: Mapping[str, str]) -> AwsKeys | None:
        """The keys among FileIO properties (``s3.*``, else ``client.*``), if any."""
        for family in ("s3", "client"):
            key_id = properties.get(f"{family}.access-key-id")
            secret = properties.get(f"{family}.secret-access-key")
            if key_id and secret:
                token = properties.get(f"{family}.session-token") or None
                return cls(key_id, secret, token)
        return None


def sign(
    method: str,
    uri: str,
    headers: Mapping[str, Sequence[str]],
    region: str,
    keys: AwsKeys,
    now: datetime,
    service: str = "s3",
    payload_hash: str | None = None,
) -> dict[str, str]:
    """The headers that sign ``method uri`` with ``headers`` (lower-case names): to be
    added to the request as they are. 400 for headers the signer must provide itself.
    ``payload_hash``: sign the body's SHA-256 (hex) instead of an unsigned payload."""
    for name in ("authorization", "x-amz-security-token"):
        if name in headers:
            raise BadRequest(f"the request to sign already carries {name}")
    added: dict[str, str] = {}
    signed = {n: ",".join(" ".join(v.split()) for v in values) for n, values in headers.items()}
    signed = {n: v for n, v in signed.items() if n not in UNSIGNED_HEADERS}
    parts = urlsplit(uri)
    host = _host(parts.scheme, parts.hostname or "", parts.port)
    if signed.setdefault("host", host) != host:
        raise BadRequest("the request's host header is not its uri's host")
    stamp = _date(signed.get("x-amz-date"), now)
    if "x-amz-date" not in signed:
        added["X-Amz-Date"] = signed["x-amz-date"] = stamp
    payload = signed.get("x-amz-content-sha256")
    if payload_hash is not None and payload not in (None, payload_hash):
        raise BadRequest("x-amz-content-sha256 is not the body's SHA-256")
    if payload is None:
        payload = payload_hash or UNSIGNED_PAYLOAD
        added["X-Amz-Content-SHA256"] = signed["x-amz-content-sha256"] = payload
    elif payload not in PAYLOADS and not (len(payload) == 64 and set(payload) <= _HEX64):
        raise BadRequest("x-amz-content-sha256 must be a SHA-256 or UNSIGNED-PAYLOAD")
    if keys.session_token:
        added["X-Amz-Security-Token"] = signed["x-amz-security-token"] = keys.session_token
    names = sorted(signed)
    canonical = "\n".join(
        [
            method,
            parts.path or "/",
            _canonical_query(parts.query),
            "".join(f"{n}:{signed[n]}\n" for n in names),
            ";".join(names),
            payload,
        ]
    )
    scope = f"{stamp[:8]}/{region}/{service}/aws4_request"
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    to_sign = f"{ALGORITHM}\n{stamp}\n{scope}\n{digest}"
    key = _signing_key(keys.secret_access_key, stamp[:8], region, service)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    added["Authorization"] = (
        f"{ALGORITHM} Credential={keys.access_key_id}/{scope}, "
        f"SignedHeaders={';'.join(names)}, Signature={signature}"
    )
    return added


def _host(scheme: str, hostname: str, port: int | None) -> str:
    host = f"[{hostname}]" if ":" in hostname else hostname
    if port is None or (scheme, port) in (("http", 80), ("https", 443)):
        return host
    return f"{host}:{port}"


def _date(given: str | None, now: datetime) -> str:
    """The request's time: the client's ``x-amz-date`` if it is close to ours, else ours."""
    if given is None:
        return now.astimezone(UTC).strftime(_DATE)
    try:
        when = datetime.strptime(given, _DATE).replace(tzinfo=UTC)
    except ValueError:
        raise BadRequest("x-amz-date must be YYYYMMDDTHHMMSSZ") from None
    if abs(when - now) > MAX_CLOCK_SKEW:
        raise BadRequest("x-amz-date is more than 5 minutes from the server's clock")
    return given


def _canonical_query(query: str) -> str:
    pairs = [pair.partition("=") for pair in query.split("&")] if query else []
    return "&".join(f"{name}={value}" for name, _, value in sorted(pairs))


def _signing_key(secret: str, day: str, region: str, service: str) -> bytes:
    key = f"AWS4{secret}".encode()
    for part in (day, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key
