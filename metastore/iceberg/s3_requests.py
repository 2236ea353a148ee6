"""What an S3 request a client asks the catalog to sign would touch, and whether it may.

Remote signing lends the catalog's storage credentials to one request at a time, so
the signer must know exactly what the request does before it signs: which bucket and
keys it reads or writes, or which prefix it lists. ``parse`` reads that from the
request's URI, method, query and headers, and refuses whatever it cannot read with
certainty:

- **Hosts.** The URI must go to one of the storage's S3 endpoints (path style,
  ``http://host/bucket/key``, or virtual-hosted, ``http://bucket.host/key``), or to
  AWS S3's own hosts when the storage names none. Another host could read the path
  differently (``http://other-bucket.host/bucket/key`` is a key of ``other-bucket``).
- **One reading of the key.** The path must be in the canonical encoding every S3
  client sends (``quote(key, safe="/~")``), so the key the signer checks is the key S3
  decodes; no ``.``/``..`` or empty segment, control character or backslash.
- **Known operations only**: reading an object (``GET``/``HEAD``), writing one
  (``PUT``, multipart upload parts, ``DELETE``, copying from another key, which is
  read too), listing under a prefix, and a batch delete whose body lists its keys
  (signed with the body's SHA-256 as payload hash, so S3 refuses any other body).
  Subresources that change more than data (``?acl``, ``?tagging``, ``?retention``,
  ``x-amz-acl``, ``x-amz-grant-*`` and object-lock headers), bucket operations and
  anything else are refused.

``Target.check_within`` then holds the request to one table's location: every key
inside it, a listed prefix inside it (``<table>/...``; ``<table>`` alone would also
list a neighbour ``<table>2``). Malformed requests are 400s, requests that are well
formed but not this caller's to make are 403s; the route (``sign_routes``) checks the
caller's privileges for the access (``READ``/``WRITE``) first.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from urllib.parse import quote, unquote, urlsplit
from xml.etree import ElementTree

from metastore.errors import BadRequest, Forbidden
from metastore.model.locations import Location, is_inside, normalize
from metastore.storage.remote_signing import DEFAULT_PORTS, Endpoint

MAX_DELETE_BODY = 1024 * 1024  # S3's batch delete: at most 1,000 keys of at most 1 KiB
MAX_DELETE_KEYS = 1000

_AWS_HOST = re.compile(
    r"^(?:(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])\.)?"
    r"s3(?:\.dualstack)?(?:[.-][a-z0-9-]{1,40})?\.amazonaws\.com$"
)
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


class Access(Enum):
    """What a signed request does to the table's files (which privilege it needs)."""

    READ = "read"
    WRITE = "write"


Headers = Mapping[str, Sequence[str]]  # lower-case names -> values


@dataclass(frozen=True, slots=True)
class Target:
    """What one S3 request touches: ``keys`` of ``bucket`` (read or written), or the keys
    under ``prefix`` (a listing)."""

    access: Access
    operation: str
    bucket: str
    keys: tuple[str, ...] = ()
    prefix: str | None = None
    payload: str | None = None  # the payload hash to sign (a batch delete's body's SHA-256)

    def check_within(self, table_location: str) -> None:
        """403 unless everything the request touches lies inside ``table_location``."""
        table = normalize(table_location, "table location")
        if table.scheme not in ("s3", "s3a") or table.authority != self.bucket:
            raise Forbidden(f"{self.operation}: bucket {self.bucket!r} is not this table's")
        for key in self.keys:
            if not _inside(key, table, allow_equal=True):
                raise Forbidden(f"{self.operation}: key {key[:300]!r} is outside the table")
        if self.prefix is not None and not _inside(
            self.prefix, table, allow_equal=self.prefix.endswith("/")
        ):
            raise Forbidden(
                f"{self.operation}: prefix {self.prefix[:300]!r} reaches outside the table"
                " (list <table location>/... )"
            )


def _inside(key: str, table: Location, *, allow_equal: bool) -> bool:
    return is_inside(f"{table.scheme}://{table.authority}/{key}", table, allow_equal=allow_equal)


# --- reading the request ------------------------------------------------------------------

# access control and retention are the storage owner's, never a table's writers'
_REFUSED_HEADERS = ("x-amz-acl", "x-amz-grant-", "x-amz-object-lock-", "x-amz-bypass-governance")
_READ_OBJECT = frozenset({"x-id", "versionId", "partNumber", "uploadId"})
_PUT_OBJECT = frozenset({"x-id", "partNumber", "uploadId"})
_POST_OBJECT = frozenset({"x-id", "uploads", "uploadId"})
_DELETE_OBJECT = frozenset({"x-id", "uploadId", "versionId"})
_LIST = frozenset(
    {
        "x-id",
        "list-type",
        "prefix",
        "delimiter",
        "max-keys",
        "continuation-token",
        "start-after",
        "marker",
        "encoding-type",
        "fetch-owner",
        "uploads",
        "key-marker",
        "upload-id-marker",
        "max-uploads",
    }
)


def parse(
    method: str,
    uri: str,
    headers: Headers,
    body: str | None,
    endpoints: Sequence[Endpoint],
) -> Target:
    """What the request would touch (see the module docstring); 400 when it cannot be read
    with certainty, 403 for an operation the signer never signs."""
    bucket, key, query = _locate(uri, endpoints)
    if any(name.startswith(_REFUSED_HEADERS) for name in headers):
        raise Forbidden("requests that set access control lists or object locks are not signed")
    names = set(query)
    if key:
        return _object(method, bucket, key, names, headers)
    if method == "GET" and names <= _LIST and ("list-type" in names or "prefix" in names):
        prefix = query.get("prefix", "")
        if not prefix:
            raise Forbidden("a listing must name a prefix inside the table")
        _check_key(prefix, "prefix")
        return Target(Access.READ, "list", bucket, prefix=prefix)
    if method == "POST" and names <= {"delete", "x-id"} and "delete" in names:
        return _batch_delete(bucket, body, headers)
    raise Forbidden(f"{method} on a bucket ({_describe(names)}) is not signed")


def _object(method: str, bucket: str, key: str, names: set[str], headers: Headers) -> Target:
    if method in ("GET", "HEAD") and names <= _READ_OBJECT:
        return Target(Access.READ, f"{method} object", bucket, (key,))
    allowed = {"PUT": _PUT_OBJECT, "POST": _POST_OBJECT, "DELETE": _DELETE_OBJECT}.get(method)
    if allowed is None or not names <= allowed:
        raise Forbidden(f"{method} on an object ({_describe(names)}) is not signed")
    if method == "POST" and not names & {"uploads", "uploadId"}:
        raise Forbidden("POST on an object is signed for multipart uploads only")
    keys = [key]
    source = _one(headers, "x-amz-copy-source")
    if source is not None:
        if method != "PUT":
            raise BadRequest("x-amz-copy-source belongs to a PUT")
        source_bucket, source_key = _copy_source(source)
        if source_bucket != bucket:
            raise Forbidden("a copy from another bucket is not signed")
        keys.append(source_key)
    return Target(Access.WRITE, f"{method} object", bucket, tuple(keys))


def _describe(names: set[str]) -> str:
    return "?" + "&".join(sorted(names)) if names else "no query"


def _locate(uri: str, endpoints: Sequence[Endpoint]) -> tuple[str, str, dict[str, str]]:
    """``(bucket, key, query)`` of a request URI to one of ``endpoints`` (AWS S3 when
    there are none); the key is decoded once, as S3 decodes it."""
    if any(ord(ch) <= 0x20 or ord(ch) >= 0x7F or ch == "\\" for ch in uri):
        raise BadRequest("the request uri holds a space, a control character or a backslash")
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError:
        raise BadRequest("the request uri is not a URL") from None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        raise BadRequest("the request uri must be an http:// or https:// URL")
    if parts.username is not None or parts.fragment or "#" in uri:
        raise BadRequest("the request uri carries user information or a fragment")
    host = parts.hostname.lower()
    port = port or DEFAULT_PORTS[parts.scheme]
    path = parts.path or "/"
    if not path.startswith("/") or quote(unquote(path), safe="/~") != path:
        raise BadRequest("the request uri's path is not in S3's canonical encoding")
    virtual = _bucket_of_host(parts.scheme, host, port, endpoints)
    if virtual is None:
        raise Forbidden(f"host {host}:{port} is not an endpoint of this catalog's storage")
    rest = path[1:]
    if virtual:
        bucket = virtual
    else:
        raw_bucket, _, rest = rest.partition("/")
        bucket = unquote(raw_bucket)
    if not _BUCKET.fullmatch(bucket):
        raise BadRequest("the request uri names no valid bucket")
    key = unquote(rest)
    if key:
        _check_key(key, "key")
    return bucket, key, _query(parts.query)


def _bucket_of_host(scheme: str, host: str, port: int, endpoints: Sequence[Endpoint]) -> str | None:
    """The bucket a virtual-hosted request names, ``""`` for a path-style one, None for a
    host that is none of the storage's endpoints."""
    if not endpoints:
        found = _AWS_HOST.fullmatch(host)
        if found is None or scheme != "https" or port != 443:
            return None
        return found.group("bucket") or ""
    for endpoint in endpoints:
        if (scheme, port) != (endpoint.scheme, endpoint.port):
            continue
        if host == endpoint.host:
            return ""
        if host.endswith("." + endpoint.host):
            return host.removesuffix("." + endpoint.host)
    return None


def _query(raw: str) -> dict[str, str]:
    """The query's parameters, each given once and canonically encoded."""
    query: dict[str, str] = {}
    for pair in raw.split("&") if raw else ():
        name, _, value = pair.partition("=")
        for part in (name, value):
            if quote(unquote(part), safe="-_.~") != part:
                raise BadRequest("the request uri's query is not in S3's canonical encoding")
        name = unquote(name)
        if not name or name in query:
            raise BadRequest("the request uri's query repeats or omits a parameter name")
        query[name] = unquote(value)
    return query


def _check_key(key: str, what: str) -> None:
    """A key (or list prefix) with one reading: no dot or empty segment (but a last empty
    one, a folder's trailing slash), no control character or backslash."""
    segments = key.split("/")
    if (
        len(key) > 1024
        or any(s in ("", ".", "..") for s in segments[:-1])
        or segments[-1] in (".", "..")
        or any(ord(ch) < 0x20 or ch in "\\\x7f" for ch in key)
    ):
        raise BadRequest(f"the request's {what} {key[:300]!r} has dot, empty or odd segments")


def _one(headers: Headers, name: str) -> str | None:
    values = headers.get(name)
    if not values:
        return None
    if len(values) != 1:
        raise BadRequest(f"header {name} is given more than once")
    return values[0]


def _copy_source(value: str) -> tuple[str, str]:
    """``bucket/key`` (URL-encoded, optionally ``?versionId=``) of a copy."""
    text = unquote(value.partition("?")[0]).removeprefix("/")
    bucket, _, key = text.partition("/")
    if not _BUCKET.fullmatch(bucket) or not key:
        raise BadRequest("x-amz-copy-source must be bucket/key")
    _check_key(key, "copy source key")
    return bucket, key


# --- batch deletes -------------------------------------------------------------------------


def _batch_delete(bucket: str, body: str | None, headers: Headers) -> Target:
    """A batch delete of the keys its body lists, signed with the body's SHA-256 as its
    payload hash, which S3 verifies: the body sent is the one checked. (A Content-MD5 or
    CRC32 binds nothing: a second body with the same checksum is easy to make.)"""
    if body is None:
        raise Forbidden("a batch delete is signed only with its body (the keys it deletes)")
    data = body.encode()
    if len(data) > MAX_DELETE_BODY:
        raise BadRequest(f"a batch delete's body is larger than {MAX_DELETE_BODY} bytes")
    payload = hashlib.sha256(data).hexdigest()
    if _one(headers, "x-amz-content-sha256") not in (None, payload):
        raise Forbidden("a batch delete is signed only with its body's SHA-256 as payload hash")
    _check_checksums(data, headers)
    if "<!" in body:
        raise BadRequest("a batch delete's body must not declare a DTD or entities")
    try:
        root = ElementTree.fromstring(data)
    except ElementTree.ParseError:
        raise BadRequest("a batch delete's body is not well-formed XML") from None
    keys = [e.text or "" for e in root.iter() if _local(e.tag) == "Key"]
    if not keys or len(keys) > MAX_DELETE_KEYS:
        raise BadRequest(f"a batch delete must list 1-{MAX_DELETE_KEYS} keys")
    for key in keys:
        _check_key(key, "key")
    return Target(Access.WRITE, "delete objects", bucket, tuple(keys), payload=payload)


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


def _md5(data: bytes) -> bytes:
    return hashlib.md5(data, usedforsecurity=False).digest()


def _sha1(data: bytes) -> bytes:
    return hashlib.sha1(data, usedforsecurity=False).digest()


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _crc32(data: bytes) -> bytes:
    return zlib.crc32(data).to_bytes(4, "big")


_CHECKSUMS: dict[str, Callable[[bytes], bytes]] = {
    "content-md5": _md5,
    "x-amz-checksum-sha256": _sha256,
    "x-amz-checksum-sha1": _sha1,
    "x-amz-checksum-crc32": _crc32,
}


def _check_checksums(data: bytes, headers: Headers) -> None:
    """400 for a checksum header that does not match ``data`` (the client's own mistake)."""
    for name, digest in _CHECKSUMS.items():
        value = _one(headers, name)
        if value is None:
            continue
        try:
            given = base64.b64decode(value.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise BadRequest(f"header {name} is not base64") from None
        if given != digest(data):
            raise BadRequest(f"header {name} does not match the body")
