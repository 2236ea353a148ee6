"""A catalog storage's remote-signing setting: whether tables offer it, and where clients go.

With remote signing a client holds no key to the catalog's bucket: for each S3
request it asks the catalog to sign it (``POST .../tables/{table}/sign``), and the
catalog signs with its storage's credentials only what the caller may do to that
table (``metastore.iceberg.s3_requests``). The setting is part of the catalog's
storage record (``metastore.storage.settings``), so every node of a cluster signs alike:

- ``enabled``: every table load offers remote signing (``s3.remote-signing-enabled``
  in its ``config``); without it only a client that asks for it
  (``X-Iceberg-Access-Delegation: remote-signing``) is offered it. Either way the
  signing endpoint signs for any S3 storage with credentials.
- ``endpoints``: the S3 endpoints clients reach the bucket at, when they differ from
  the server's own ``s3.endpoint`` (a container network name, say, that clients
  outside cannot resolve). The signer signs requests to these hosts only (and to the
  storage's ``s3.endpoint``); the first is given to clients as ``s3.endpoint``.
  Without either, the bucket is AWS S3 and only its own hosts are signed for.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from metastore.errors import BadRequest

MAX_ENDPOINTS = 10
DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class Endpoint:
    """An S3 endpoint (``scheme://host[:port]``), as requests to it are matched."""

    scheme: str
    host: str  # lower case, without the port
    port: int

    @classmethod
    def parse(cls, value: Any, what: str = "S3 endpoint") -> Endpoint:
        """``http(s)://host[:port]`` with nothing else (a ``/`` at the end is allowed; no
        ``%``-escape, which a client library may decode into a path); 400 otherwise."""
        if not isinstance(value, str) or not value or len(value) > 2048:
            raise BadRequest(f"{what} must be an http:// or https:// URL")
        try:
            parts = urlsplit(value)
            port = parts.port
        except ValueError:
            raise BadRequest(f"{what} {value[:200]!r} is not a URL") from None
        if (
            parts.scheme not in DEFAULT_PORTS
            or not parts.hostname
            or parts.username is not None
            or parts.path not in ("", "/")
            or parts.query
            or parts.fragment
            or any(ord(ch) <= 0x20 or ch in "\\%" for ch in value)
        ):
            raise BadRequest(f"{what} {value[:200]!r} must be http(s)://host[:port] alone")
        return cls(parts.scheme, parts.hostname.lower(), port or DEFAULT_PORTS[parts.scheme])

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        if self.port == DEFAULT_PORTS[self.scheme]:
            return f"{self.scheme}://{host}"
        return f"{self.scheme}://{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class RemoteSigning:
    enabled: bool = False
    endpoints: tuple[str, ...] = ()

    @property
    def default(self) -> bool:
        return self == RemoteSigning()

    @classmethod
    def from_json(cls, value: Any) -> RemoteSigning:
        """``{"enabled": bool, "endpoints": [url, ...]}`` (both optional); 400 otherwise."""
        what = "storage remote-signing"
        if not isinstance(value, dict) or set(value) - {"enabled", "endpoints"}:
            raise BadRequest(f'{what} must be {{"enabled": true|false, "endpoints": [URL, ...]}}')
        enabled = value.get("enabled", False)
        if not isinstance(enabled, bool):
            raise BadRequest(f"{what} enabled must be true or false")
        endpoints = value.get("endpoints", [])
        if not isinstance(endpoints, list) or len(endpoints) > MAX_ENDPOINTS:
            raise BadRequest(f"{what} endpoints must list at most {MAX_ENDPOINTS} URLs")
        parsed = [str(Endpoint.parse(e, f"{what} endpoint")) for e in endpoints]
        return cls(enabled, tuple(dict.fromkeys(parsed)))

    def to_json(self) -> dict[str, Any]:
        return {"enabled": self.enabled, "endpoints": list(self.endpoints)}

    def client_endpoints(self, server_endpoint: str | None) -> tuple[Endpoint, ...]:
        """The endpoints a signed request may go to: the listed ones, then the storage's
        own ``s3.endpoint``; empty for AWS S3 itself."""
        found = [Endpoint.parse(e) for e in self.endpoints]
        if server_endpoint:
            # an odd s3.endpoint is left out: the server's own FileIO reports it
            with contextlib.suppress(BadRequest):
                found.append(Endpoint.parse(server_endpoint))
        return tuple(dict.fromkeys(found))


ON_REQUEST = RemoteSigning()  # the default: remote signing for clients that ask for it
