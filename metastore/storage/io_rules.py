"""Which values the plain FileIO properties of a catalog's storage take, and which of
them only a service admin chooses.

A catalog's ``io-properties`` become the server's own FileIO (``pyiceberg``'s
``PyArrowFileIO`` on S3): they decide where the node connects, through what, as
whom and how long it waits, with the credentials the storage names (or the node's
ambient ones). So:

- **Every caller**: each known key takes its kind of value (a boolean, a timeout of
  at most ``MAX_TIMEOUT_S`` seconds, an origin ``http(s)://host[:port]`` alone, an
  IAM role ARN, a name) or the request is a 400 naming the key, never the value. An
  endpoint with a path would move every key of the storage's prefixes elsewhere in
  the store (``s3.endpoint=<store>/lake/other%3F`` turns ``s3://lake/mine/t`` into
  another prefix's key), past the storage roots and the overlap check. A value
  ``pyarrow`` cannot take would otherwise fail at first use, as a 500.
- **A caller who is no service admin** (``METASTORE_STORAGE_ROOTS`` lets one name
  storage): the keys of ``ROUTING`` must be absent or equal this node's own
  (``METASTORE_WAREHOUSE_IO``). Else a tenant could point the node, signing with the
  operator's keys, at a host of its choosing (an internal service, a proxy that keeps
  the signed requests), make it assume a role of its choosing, or hold the node's
  shared worker threads on a host that never answers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from types import MappingProxyType

from metastore.errors import BadRequest
from metastore.storage.remote_signing import Endpoint
from metastore.storage.vending import ROLE_ARN
from metastore.util.setting_rules import number

MAX_TIMEOUT_S = 60.0
_BOOLEANS = frozenset({"true", "false", "yes", "no", "on", "off", "1", "0", "t", "f", "y", "n"})
_NAME = re.compile(r"[\w+=,.@-]{1,64}")
_REGION = re.compile(r"[a-z0-9-]{1,32}")


def _boolean(value: str) -> str | None:
    return None if value.lower() in _BOOLEANS else "must be true or false"


def _timeout(value: str) -> str | None:
    try:
        seconds = number(value)
    except ValueError:
        return "must be a number of seconds"
    if not 0 < seconds <= MAX_TIMEOUT_S:
        return f"must be more than 0 and at most {MAX_TIMEOUT_S:g} seconds"
    return None


def _origin(value: str) -> str | None:
    try:
        Endpoint.parse(value)
    except BadRequest:
        return "must be http(s)://host[:port] alone: no path, query or escapes"
    return None


def _role(value: str) -> str | None:
    if ROLE_ARN.fullmatch(value) is None:
        return "must be an IAM role ARN (arn:aws:iam::<account>:role/<name>)"
    return None


def _name(value: str) -> str | None:
    return None if _NAME.fullmatch(value) else "must be 1-64 of A-Z a-z 0-9 _ + = , . @ -"


def _region(value: str) -> str | None:
    return None if _REGION.fullmatch(value) else "must be a region name (a-z 0-9 -)"


_CHECKS: dict[str, Callable[[str], str | None]] = {
    "s3.endpoint": _origin,
    "s3.proxy-uri": _origin,
    "s3.connect-timeout": _timeout,
    "s3.request-timeout": _timeout,
    "s3.role-arn": _role,
    "client.role-arn": _role,
    "s3.role-session-name": _name,
    "client.role-session-name": _name,
    "s3.profile-name": _name,
    "client.profile-name": _name,
    "s3.region": _region,
    "client.region": _region,
    "s3.anonymous": _boolean,
    "s3.force-virtual-addressing": _boolean,
    "s3.resolve-region": _boolean,
}
# where the node connects, through what, as whom and how long it waits
ROUTING = frozenset(
    {
        "s3.endpoint",
        "s3.proxy-uri",
        "s3.connect-timeout",
        "s3.request-timeout",
        "s3.role-arn",
        "client.role-arn",
        "s3.role-session-name",
        "client.role-session-name",
        "s3.profile-name",
        "client.profile-name",
        "s3.signer",
        "s3.signer.uri",
        "s3.signer.endpoint",
    }
)
ROLE_KEYS = ("s3.role-arn", "client.role-arn")
_NONE: Mapping[str, str] = MappingProxyType({})


def check_value(key: str, value: str) -> None:
    """400 naming ``key`` when its value is not of its kind (unknown keys pass)."""
    check = _CHECKS.get(key)
    problem = check(value) if check is not None else None
    if problem is not None:
        raise BadRequest(f"storage io-properties: {key!r} {problem}")


def check_own(
    io_properties: Mapping[str, str], node: Mapping[str, str], kept: Mapping[str, str] = _NONE
) -> None:
    """The bound on one who is no service admin: every ``ROUTING`` key left out, or as
    this node has it (``node``), or as the catalog's storage had it (``kept``: what a
    service admin chose stays); 400 naming the first that is not."""
    for key in sorted(ROUTING):
        value = io_properties.get(key)
        if value is not None and value != node.get(key) and value != kept.get(key):
            now = "this node's own" if key in node else "left out (this node sets none)"
            raise BadRequest(
                f"storage io-properties: {key!r} decides where or as whom this node"
                f" connects: only a service admin sets it; it must be {now}"
                " (METASTORE_WAREHOUSE_IO) or as the catalog's storage has it"
            )
