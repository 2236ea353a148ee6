"""Credential vending settings of a catalog's storage, and the session policy of a table.

A catalog on S3 may hand its clients short-lived credentials for one table instead
of long-lived keys: the server assumes a role (STS ``AssumeRole``, ``metastore.storage.sts``)
with a session policy that narrows the role to the table's location, so the
credentials reach that table's objects and nothing else, whatever the role allows.
The settings live in the storage record (``"credential-vending"``), so every node
vends the same way:

- ``role-arn``: the IAM role to assume (``arn:<partition>:iam::<account>:role/<name>``);
- ``duration-seconds``: the credentials' lifetime, 900-43200 (STS's own bounds);
- ``sts-endpoint`` (optional): where to call STS. Only AWS's own STS endpoints or the
  origin of the storage's ``s3.endpoint`` (S3-compatible stores serve STS there), so
  a catalog's settings cannot make the node send requests anywhere else; by default
  the storage's ``s3.endpoint`` when it has one, else AWS's regional endpoint.

The session policy (``session_policy``) allows ``s3:GetObject`` (and, for a
principal who may write the table's data, ``s3:PutObject``, ``s3:DeleteObject``,
``s3:AbortMultipartUpload``) on ``arn:aws:s3:::<bucket>/<table prefix>/*``, and
``s3:ListBucket`` on the bucket only with an ``s3:prefix`` condition inside the
table's prefix (``<prefix>/...``). A location whose key holds a policy wildcard or variable (``*``,
``?``, ``$``) is refused: in a policy it would name more than the table.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from metastore.errors import BadRequest
from metastore.model.locations import normalize

MIN_DURATION_S = 900  # STS AssumeRole's bounds
MAX_DURATION_S = 43200
DEFAULT_DURATION_S = 3600
MAX_POLICY_CHARS = 2048  # STS refuses a longer session policy
ROLE_ARN = re.compile(r"arn:(aws|aws-cn|aws-us-gov):iam::\d{12}:role/[\w+=,.@/-]{1,512}")
_AWS_STS = re.compile(r"sts(\.[a-z0-9-]{1,30})?\.amazonaws\.com(\.cn)?")
_POLICY_SPECIAL = ("*", "?", "$")
_KEYS = {"role-arn", "duration-seconds", "sts-endpoint"}
READ_ACTIONS = ("s3:GetObject", "s3:GetObjectVersion")
WRITE_ACTIONS = ("s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload")


@dataclass(frozen=True, slots=True)
class VendingSettings:
    role_arn: str
    duration_s: int = DEFAULT_DURATION_S
    sts_endpoint: str | None = None

    @classmethod
    def from_json(cls, body: Any, s3_endpoint: str | None) -> VendingSettings:
        """The ``credential-vending`` object of a storage whose ``s3.endpoint`` is
        ``s3_endpoint``; 400 for anything else (messages never echo long values)."""
        what = "storage credential-vending"
        if not isinstance(body, dict):
            raise BadRequest(f"{what} must be a JSON object")
        unknown = sorted(str(k)[:100] for k in set(body) - _KEYS)
        if unknown:
            raise BadRequest(f"{what}: unknown keys {unknown} (known: {sorted(_KEYS)})")
        role = body.get("role-arn")
        if not isinstance(role, str) or not ROLE_ARN.fullmatch(role):
            raise BadRequest(
                f"{what}: role-arn must be an IAM role ARN (arn:aws:iam::<account>:role/<name>)"
            )
        duration = body.get("duration-seconds", DEFAULT_DURATION_S)
        if (
            not isinstance(duration, int)
            or isinstance(duration, bool)
            or not MIN_DURATION_S <= duration <= MAX_DURATION_S
        ):
            raise BadRequest(
                f"{what}: duration-seconds must be an integer from {MIN_DURATION_S}"
                f" to {MAX_DURATION_S}"
            )
        endpoint = body.get("sts-endpoint")
        if endpoint is not None:
            endpoint = check_sts_endpoint(endpoint, s3_endpoint)
        return cls(role, duration, endpoint)

    @classmethod
    def from_record(cls, body: dict[str, Any]) -> VendingSettings:
        """The settings as ``to_json`` wrote them into the storage record (checked then)."""
        return cls(body["role-arn"], body["duration-seconds"], body.get("sts-endpoint"))

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"role-arn": self.role_arn, "duration-seconds": self.duration_s}
        if self.sts_endpoint is not None:
            body["sts-endpoint"] = self.sts_endpoint
        return body

    @property
    def partition(self) -> str:
        return self.role_arn.split(":", 2)[1]


def _origin(url: str) -> tuple[str, str] | None:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return parts.scheme, f"{parts.hostname.lower()}:{port or ''}"


def check_sts_endpoint(value: Any, s3_endpoint: str | None) -> str:
    """``value`` if it is AWS's STS or the origin of the storage's S3 endpoint; 400."""
    what = "storage credential-vending: sts-endpoint"
    if not isinstance(value, str) or len(value) > 500:
        raise BadRequest(f"{what} must be an http(s) URL")
    try:
        parts = urlsplit(value)
    except ValueError:
        raise BadRequest(f"{what} must be an http(s) URL") from None
    origin = _origin(value)
    if origin is None or parts.username or parts.password or parts.query or parts.fragment:
        raise BadRequest(f"{what} must be an http(s) URL without credentials or query")
    if parts.path not in ("", "/"):
        raise BadRequest(f"{what} must name no path")
    aws = parts.scheme == "https" and _AWS_STS.fullmatch(parts.hostname or "") is not None
    same = s3_endpoint is not None and _origin(s3_endpoint) == origin
    if not (aws or same):
        raise BadRequest(
            f"{what} must be AWS's STS (https://sts.<region>.amazonaws.com) or the origin"
            " of the storage's s3.endpoint"
        )
    return value.rstrip("/")


@dataclass(frozen=True, slots=True)
class Scope:
    """What one vended credential reaches: a table's objects, for reading or writing."""

    bucket: str
    prefix: str  # the table's key prefix, without a trailing slash
    write: bool

    @classmethod
    def of(cls, location: str, write: bool) -> Scope:
        """The scope of a table at ``location`` (an ``s3://`` URI); 400 if a policy
        cannot name exactly it."""
        parsed = normalize(location, "table location")
        if parsed.scheme != "s3" or not parsed.authority or not parsed.segments:
            raise BadRequest(f"cannot vend credentials for {location}: not an s3:// table location")
        prefix = "/".join(parsed.segments)
        if any(ch in prefix or ch in parsed.authority for ch in _POLICY_SPECIAL):
            raise BadRequest(
                f"cannot vend credentials for {location}: its key holds a character"
                " (* ? $) a policy would read as a wildcard or variable"
            )
        return cls(parsed.authority, prefix, write)

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def session_policy(scope: Scope, partition: str = "aws") -> str:
    """The session policy of ``scope`` as STS takes it (compact JSON); 400 when it
    would be longer than STS accepts (a very long table location)."""
    actions = [*READ_ACTIONS, *(WRITE_ACTIONS if scope.write else ())]
    bucket = f"arn:{partition}:s3:::{scope.bucket}"
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": actions, "Resource": [f"{bucket}/{scope.prefix}/*"]},
            {
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": bucket,
                # "<prefix>" alone would also list a neighbour "<prefix>2"'s keys
                "Condition": {
                    "StringLike": {"s3:prefix": [f"{scope.prefix}/", f"{scope.prefix}/*"]}
                },
            },
            {"Effect": "Allow", "Action": "s3:GetBucketLocation", "Resource": bucket},
        ],
    }
    text = json.dumps(policy, separators=(",", ":"))
    if len(text) > MAX_POLICY_CHARS:
        raise BadRequest(
            f"cannot vend credentials for {scope.uri}: its location is too long for a"
            f" session policy ({MAX_POLICY_CHARS} characters)"
        )
    return text
