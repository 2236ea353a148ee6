"""A catalog's storage: where its tables' files live and how the server reaches them.

Storage belongs to the catalog, not to the node: it is a system record of the
catalog (``STORAGE_RECORD``) written by a commit, so every node of a cluster
reads the same one from the changelog and a table created through one node is
committed through any other. It holds:

- ``root``: where new tables and views go by default (``<root>/<namespace...>/<name>``);
- ``allowed``: the location prefixes the catalog's tables and views may use (by
  default the root alone); the containment rules of ``metastore.model.locations`` check
  every location against this list, on both APIs;
- ``io_properties``: FileIO properties (an endpoint, path-style addressing), none
  of them secret (secret-looking keys are refused);
- ``credentials``: a reference to the secrets (``metastore.storage.credentials``);
- ``vending``: how to vend clients short-lived credentials scoped to one table
  (``metastore.storage.vending``; S3 only, none by default);
- ``remote_signing``: whether its tables offer clients remote signing, and the S3
  endpoints clients reach (``metastore.storage.remote_signing``).

Every prefix is a normalized absolute URI (``file:///...`` or ``s3://bucket/...``)
of the storage's type, with the one normalizer of ``metastore.model.locations``.
Changing the storage affects new tables only: an existing table keeps its
location even when the list no longer covers it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from metastore.errors import BadRequest
from metastore.model.keys import EntityKey, Kind
from metastore.model.locations import Location, normalize
from metastore.storage import io_rules
from metastore.storage.credentials import Credentials, io_key_problem, is_secret_key
from metastore.storage.remote_signing import ON_REQUEST, RemoteSigning
from metastore.storage.vending import VendingSettings

STORAGE_RECORD = EntityKey(Kind.SYSTEM, (), "storage")
KINDS = ("file", "s3")  # the storage type is the scheme of its locations
MAX_ALLOWED = 100
MAX_IO_PROPERTIES = 100
_EMPTY: Mapping[str, str] = MappingProxyType({})

VENDING = "credential-vending"
_KEY = "storage"  # the record's one property: the storage as the API's JSON, minus version


def parse_prefix(value: Any, what: str, kind: str | None = None) -> Location:
    """A storage prefix (a root or an allowed location), normalized; 400 otherwise."""
    location = normalize(value, what)
    if location.scheme not in KINDS:
        raise BadRequest(f"{what} {value!r} must be a file:// or s3:// URI")
    if kind is not None and location.scheme != kind:
        raise BadRequest(f"{what} {value!r} is not of the storage's type {kind}")
    if location.scheme == "s3" and not location.authority:
        raise BadRequest(f"{what} {value!r} names no bucket")
    if location.scheme == "file":
        if location.authority or not str(value).lower().startswith("file:"):
            raise BadRequest(f"{what} {value!r} must be written file:///absolute/path")
        if not location.segments:
            raise BadRequest(f"{what} {value!r} is the whole filesystem")
    return location


def prefix_text(location: Location) -> str:
    """How a prefix is stored and shown: normalized, without a trailing slash."""
    return str(location).rstrip("/")


@dataclass(frozen=True, slots=True)
class Storage:
    kind: str
    root: str
    allowed: tuple[str, ...]
    io_properties: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    credentials: Credentials | None = None
    version: int = 0  # of its record; 0 = not recorded yet (seeded from the node)
    vending: VendingSettings | None = None
    remote_signing: RemoteSigning = field(default_factory=RemoteSigning)

    # --- the API's JSON --------------------------------------------------------------

    @classmethod
    def from_json(cls, body: Any) -> Storage:
        """The ``storage`` object of a catalog creation or update; 400 for anything else
        (messages never quote a property's value)."""
        if not isinstance(body, dict):
            raise BadRequest("storage must be a JSON object")
        kind = body.get("type")
        if kind is not None and kind not in KINDS:
            raise BadRequest(f"storage type must be one of {', '.join(KINDS)}")
        root = parse_prefix(body.get("root"), "storage root", kind)
        kind = root.scheme
        given = body.get("allowed-locations", [prefix_text(root)])
        if not isinstance(given, list) or not 1 <= len(given) <= MAX_ALLOWED:
            raise BadRequest(f"storage allowed-locations must list 1-{MAX_ALLOWED} locations")
        allowed = [parse_prefix(p, "storage allowed location", kind) for p in given]
        if not any(root.within(prefix) for prefix in allowed):
            raise BadRequest(
                f"storage root {prefix_text(root)} lies inside none of its allowed-locations"
            )
        io = body.get("io-properties", {})
        if not isinstance(io, dict) or len(io) > MAX_IO_PROPERTIES:
            raise BadRequest(
                f"storage io-properties must be a JSON object of at most {MAX_IO_PROPERTIES}"
                " strings"
            )
        for key, value in io.items():
            check_io_property(key, value)
        credentials = body.get("credentials")
        if credentials is not None and any(key in io for key in io_rules.ROLE_KEYS):
            raise BadRequest(
                "storage io-properties: a role-arn is assumed with the node's own AWS"
                " credentials; it cannot go with the storage's credentials"
            )
        signing = RemoteSigning.from_json(body.get("remote-signing", {}))
        if kind != "s3" and not signing.default:
            raise BadRequest("storage remote-signing applies to s3 storage only")
        return cls(
            kind,
            prefix_text(root),
            _unique(prefix_text(p) for p in allowed),
            MappingProxyType(dict(io)),
            Credentials.from_json(credentials) if credentials is not None else None,
            vending=parse_vending(body.get(VENDING), kind, io),
            remote_signing=signing,
        )

    def to_json(self) -> dict[str, Any]:
        """The storage as the API shows it: there is no secret in it to hide."""
        body: dict[str, Any] = {
            "type": self.kind,
            "root": self.root,
            "allowed-locations": list(self.allowed),
            "io-properties": dict(self.io_properties),
            "version": self.version,
        }
        if self.credentials is not None:
            body["credentials"] = self.credentials.to_json()
        if not self.remote_signing.default:
            body["remote-signing"] = self.remote_signing.to_json()
        if self.vending is not None:
            body[VENDING] = self.vending.to_json()
        return body

    # --- the record --------------------------------------------------------------------

    def to_properties(self) -> dict[str, str]:
        """The record's properties: one key holding the whole storage as JSON, so an
        update replaces it whole (no stale key from a concurrent update survives)."""
        body = self.to_json()
        del body["version"]
        return {_KEY: json.dumps(body, sort_keys=True, separators=(",", ":"))}

    @classmethod
    def from_properties(cls, properties: Mapping[str, str], version: int) -> Storage:
        body = json.loads(properties[_KEY])
        credentials = body.get("credentials")
        signing = body.get("remote-signing")
        remote_signing = (
            RemoteSigning(signing["enabled"], tuple(signing["endpoints"]))
            if signing
            else RemoteSigning()
        )
        return cls(
            body["type"],
            body["root"],
            tuple(body["allowed-locations"]),
            MappingProxyType(dict(body["io-properties"])),
            Credentials(**credentials) if credentials else None,
            version,
            vending=VendingSettings.from_record(body[VENDING]) if VENDING in body else None,
            remote_signing=remote_signing,
        )

    # --- locations ---------------------------------------------------------------------

    def locations(self) -> list[Location]:
        """The allowed prefixes, normalized (for overlap checks)."""
        return [normalize(prefix, "storage allowed location") for prefix in self.allowed]


def check_io_property(key: Any, value: Any) -> None:
    """One plain FileIO property of a catalog's storage; 400 naming the key, never the value."""
    if not isinstance(key, str) or not isinstance(value, str):
        raise BadRequest("storage io-properties must map names to strings")
    if is_secret_key(key):
        raise BadRequest(
            f"storage io-properties: {key!r} looks like a secret; secrets are never stored,"
            ' give them by reference ("credentials": {"env": NAME} or {"file": PATH})'
        )
    problem = io_key_problem(key)
    if problem is not None:
        raise BadRequest(f"storage io-properties: {problem}")
    io_rules.check_value(key, value)


def parse_vending(value: Any, kind: str, io: Mapping[str, Any]) -> VendingSettings | None:
    """A storage's ``credential-vending`` object (absent or null: none); 400 if it is
    malformed or the storage is not on S3."""
    if value is None:
        return None
    if kind != "s3":
        raise BadRequest("storage credential-vending needs an s3 storage")
    endpoint = io.get("s3.endpoint")
    return VendingSettings.from_json(value, endpoint if isinstance(endpoint, str) else None)


def seeded(
    root: str,
    io_properties: Mapping[str, str],
    credentials: Credentials | None,
    vending: VendingSettings | None = None,
    remote_signing: RemoteSigning = ON_REQUEST,
) -> Storage:
    """The storage of a catalog created without one: the node's warehouse settings
    (``root`` is ``<METASTORE_WAREHOUSE>/<tenant>/<catalog>``)."""
    location = parse_prefix(root, "warehouse root")
    text = prefix_text(location)
    plain = {k: v for k, v in io_properties.items() if not is_secret_key(k)}
    return Storage(
        location.scheme,
        text,
        (text,),
        MappingProxyType(plain),
        credentials,
        vending=vending,
        remote_signing=remote_signing,
    )


def _unique(prefixes: Any) -> tuple[str, ...]:
    return tuple(dict.fromkeys(prefixes))
