"""Iceberg listings: one page when the client pages, every item when it does not.

Iceberg's REST API lets a server page its listings, but a request that carries no
``pageToken`` must get every result in one response (``next-page-token`` null): a
client that never pages (and reads none of the tokens) must still see the whole
namespace. A client pages by sending ``pageToken`` (empty on its first request) or
``pageSize`` (the upper bound of one page, which PyIceberg sends alone on its first
request): those get one page and a token, as the native API does.

The whole listing is read at one commit (the page tokens pin it), in pages of the
largest size, inside one call off the event loop.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from metastore.keys import Kind
from metastore.model import Entity
from metastore.paging import MAX_PAGE_SIZE
from metastore.service import Metastore


def pages(request: web.Request) -> bool:
    """The client asked for pages (``pageToken``, even empty, or ``pageSize``)."""
    return "pageToken" in request.query or "pageSize" in request.query


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
