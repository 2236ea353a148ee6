"""Iceberg listings: one page when the client pages, every item when it does not.

Iceberg's REST API lets a server page its listings, but a request that carries no
``pageToken`` must get every result in one response (``next-page-token`` null): a
client that never pages (and reads none of the tokens) must still see the whole
namespace. A client pages by sending ``pageToken`` (empty on its first request) or
``pageSize`` (the upper bound of one page, which PyIceberg sends alone on its first
request): those get one page and a token, as the native API does.

The whole listing is read at one commit, inside one call off the event loop; the
tables and views of a namespace from the index keys alone (``names``: an
identifier needs a name, not the entity), in a call that checks the catalog too.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from json.encoder import encode_basestring_ascii

from aiohttp import web

from metastore.commits import not_found
from metastore.errors import MetastoreError
from metastore.keys import EntityKey, Kind, kind_prefix
from metastore.model import Entity
from metastore.paging import MAX_PAGE_SIZE
from metastore.service import Metastore


def pages(request: web.Request) -> bool:
    """The client asked for pages (``pageToken``, even empty, or ``pageSize``)."""
    return "pageToken" in request.query or "pageSize" in request.query


def names(
    metastore: Metastore,
    tenant: str,
    catalog: str,
    parent: tuple[str, ...] | MetastoreError,
    kind: Kind,
    shows: Callable[[str], bool],
) -> list[str]:
    """The names of every ``kind`` directly in ``parent`` the caller may see, at one
    commit (blocking: call through ``Metastore.read``), read from the index keys
    alone: an identifier needs a name, not the entity. ``parent`` may be the error
    the request's namespace makes, raised after the catalog's own 404."""
    view = metastore.objects(tenant, catalog).index(metastore.head(tenant, catalog))
    if isinstance(parent, MetastoreError):
        raise parent
    assert view is not None
    if parent and view.get((namespace_key := EntityKey.namespace_key(parent)).encode()) is None:
        raise not_found(namespace_key)
    prefix = kind_prefix(parent, kind)
    found = (key[len(prefix) :].decode() for key, _ in view.items(prefix))
    return [name for name in found if shows(name)]


def identifiers_json(namespace: tuple[str, ...], names: Sequence[str]) -> str:
    """The whole listing's answer, ``{"identifiers": [...], "next-page-token": null}``,
    as JSON text: the names encoded one by one around the namespace encoded once (the
    same text ``json.dumps`` writes, without a dict per table)."""
    levels = json.dumps(list(namespace))
    items = ", ".join(
        f'{{"namespace": {levels}, "name": {encode_basestring_ascii(name)}}}' for name in names
    )
    return f'{{"identifiers": [{items}], "next-page-token": null}}'


def everything(
    metastore: Metastore,
    tenant: str,
    catalog: str,
    parent: tuple[str, ...],
    kind: Kind,
    shows: Callable[[str], bool],
) -> list[Entity]:
    """Every entity of ``kind`` directly in ``parent`` the caller may see, at one commit
    (blocking: call through ``Metastore.read``)."""
    items: list[Entity] = []
    token: str | None = None
    while True:
        page = metastore.list_entities(
            tenant, catalog, parent, kind, token, MAX_PAGE_SIZE, shows=shows
        )
        items.extend(page.items)
        if page.next_token is None:
            return items
        token = page.next_token
