"""``ETag`` and ``If-None-Match`` on table loads: a client polling a table that has not
changed gets a 304 with no body.

A table response is fixed by the metadata file it names (a metadata location is
written once and never rewritten), the table properties (the entity's own, which the
native API can change without a new metadata file), the ``snapshots`` filter of the
load, the access delegation the client asked for (``X-Iceberg-Access-Delegation``:
vended credentials, remote signing) and whatever else the catalog's answer carries
besides the metadata. The tag is a digest of exactly these, so two answers with
different contents never share a tag, and it is strong: an equal tag means the same
table version in the same form, whichever node answers. Create, register and commit
answers carry the tag a later load of the same table version answers (a commit's: a
load with ``snapshots=all`` and no access delegation), so a client can send any of
them as ``If-None-Match``.

The remote-signing config a load offers comes from the catalog's storage, so it is
worked out before the tag and covered by it: turning signing on or off retags.
Vended credentials are not part of the tag: they are fresh on every answer, so a tag
that covered them would never match. A 304 to a load with access delegation tells
the client that the table and the kind of access it asked for are unchanged; it
refreshes expiring credentials through the credentials endpoint, as it would
without tags. The tag is worked out before any credential is vended, so a 304 costs
no call to the credential service.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from aiohttp import web

ETAG = "ETag"
IF_NONE_MATCH = "If-None-Match"
ACCESS_DELEGATION = "X-Iceberg-Access-Delegation"
# the fields of a table answer the digest covers through the metadata location
_METADATA_FIELDS = frozenset({"metadata-location", "metadata"})


def table_etag(result: Mapping[str, Any], snapshots: str = "all", delegation: str = "") -> str:
    """The strong entity tag of a table answer ``{"metadata-location", "metadata", ...}``
    before any access is delegated (``delegation``: ``delegation_of`` the request);
    empty fields besides the metadata (``"config": {}``) count as absent, so a commit's
    answer, which has none, tags like the load that answers ``"config": {}``."""
    metadata = result.get("metadata")
    properties = metadata.get("properties", {}) if isinstance(metadata, Mapping) else {}
    rest = {k: v for k, v in result.items() if k not in _METADATA_FIELDS and v}
    what = [result.get("metadata-location"), properties, snapshots, delegation, rest]
    text = json.dumps(what, sort_keys=True, separators=(",", ":"), default=str)
    return '"' + hashlib.sha256(text.encode()).hexdigest()[:40] + '"'


def delegation_of(request: web.Request) -> str:
    """The access delegation a request asks for, in one canonical spelling."""
    asked = request.headers.getall(ACCESS_DELEGATION, [])
    modes = {mode.strip().lower() for header in asked for mode in header.split(",")}
    return ",".join(sorted(modes - {""}))


def matches(request: web.Request, etag: str) -> bool:
    """Whether ``If-None-Match`` names ``etag`` (or is ``*``): the client's copy is
    current. Weak comparison, as RFC 9110 prescribes for ``If-None-Match``."""
    return names(request.headers.get(IF_NONE_MATCH), etag)


def names(header: str | None, etag: str) -> bool:
    """Whether an ``If-None-Match`` value (None: no header) names ``etag`` or is ``*``."""
    if header is None:
        return False
    tags = {tag.strip().removeprefix("W/") for tag in header.split(",")}
    return "*" in tags or etag in tags


def not_modified(etag: str) -> web.Response:
    return web.Response(status=304, headers={ETAG: etag})


def tagged(response: web.Response, etag: str) -> web.Response:
    response.headers[ETAG] = etag
    return response
