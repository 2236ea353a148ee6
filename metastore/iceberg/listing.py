"""Iceberg listings: one page when the client pages, every item when it does not.

Iceberg's REST API lets a server page its listings, but a request that carries no
``pageToken`` must get every result in one response (``next-page-token`` null): a
client that never pages (and reads none of the tokens) must still see the whole
namespace. A client pages by sending ``pageToken`` (empty on its first request) or
``pageSize`` (the upper bound of one page, which PyIceberg sends alone on its first
request): those get one page and a token, as the native API does.

The whole listing is read at one commit, inside one call; the tables and views of
a namespace from the index keys alone (``names``: an identifier needs a name, not
the entity), in a call that checks the catalog too. That call is a point read
(``Metastore.read_point``) while it is short: on the event loop when memory holds
the index, until ``LOOP_NAMES`` names, past which it gives up there and runs again
in a worker thread (its work grows with the namespace; the loop must not wait for
a long one).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from json.encoder import encode_basestring_ascii

from aiohttp import web

from metastore.catalog.service import Metastore
from metastore.engine.commits import not_found
from metastore.engine.paging import MAX_PAGE_SIZE
from metastore.errors import MetastoreError
from metastore.model.keys import EntityKey, Kind, kind_prefix
from metastore.model.records import Entity
from metastore.util.memory_only import check as may_wait

LOOP_NAMES = 1000  # names a listing reads on the event loop before it goes to a thread


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
    commit (blocking: call through ``Metastore.read_point``), read from the index keys
    alone: an identifier needs a name, not the entity. ``parent`` may be the error
    the request's namespace makes, raised after the catalog's own 404."""
    view = metastore.objects(tenant, catalog).index(metastore.head(tenant, catalog))
    if isinstance(parent, MetastoreError):
        raise parent
    assert view is not None
    if parent and view.get((namespace_key := EntityKey.namespace_key(parent)).encode()) is None:
        raise not_found(namespace_key)
    prefix = kind_prefix(parent, kind)
    start = len(prefix)
    names: list[str] = []
    for read, (key, _) in enumerate(view.items(prefix)):
        if read == LOOP_NAMES:
            may_wait()  # a long listing: not on the event loop
        name = key[start:].decode()
        if shows(name):
            names.append(name)
    return names


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
