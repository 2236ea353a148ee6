"""How change events look on the wire: the native JSON, CloudEvents 1.0, the page.

A native event is ``Event.to_json()`` plus its ``id``: the cursor just after it. A
CloudEvent (``?format=cloudevents``, or ``Accept: application/cloudevents-batch+json``
for a page as a JSON array) carries the same cursor as its ``id``, the catalog as its
``source``, ``metastore.<kind>.<operation>`` as its ``type``, the entity's dotted name
as its ``subject``, and the native event as its ``data``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from metastore.engine.events import Event
from metastore.engine.feed import FeedPage, after_event, encode_cursor

ACCEPT_STREAM = "text/event-stream"
ACCEPT_BATCH = "application/cloudevents-batch+json"
NEXT_HEADER = "Metastore-Next-Cursor"


def wants_stream(request: web.Request) -> bool:
    return ACCEPT_STREAM in request.headers.get("Accept", "")


def native(tenant: str, catalog: str, event: Event) -> dict[str, Any]:
    return {"id": encode_cursor(tenant, catalog, after_event(event)), **event.to_json()}


def cloudevent(tenant: str, catalog: str, event: Event) -> dict[str, Any]:
    data = native(tenant, catalog, event)
    time = datetime.fromtimestamp(event.time_us / 1_000_000, tz=UTC)
    return {
        "specversion": "1.0",
        "id": data["id"],
        "source": f"/api/v1/tenants/{tenant}/catalogs/{catalog}",
        "type": f"metastore.{event.kind}.{event.operation}",
        "subject": ".".join(event.name),
        "time": time.isoformat(timespec="microseconds").replace("+00:00", "Z"),
        "datacontenttype": "application/json",
        "data": data,
    }


def render(tenant: str, catalog: str, event: Event, cloudevents: bool) -> dict[str, Any]:
    return cloudevent(tenant, catalog, event) if cloudevents else native(tenant, catalog, event)


def render_page(
    request: web.Request,
    tenant: str,
    catalog: str,
    page: FeedPage,
    cloudevents: bool,
    batch: bool,
) -> web.Response:
    """A page: ``{"events", "next", "more"}``; as a CloudEvents batch, the bare array with
    the next cursor in a header (``more`` in ``Metastore-More``)."""
    items = [render(tenant, catalog, e, cloudevents) for e in page.events]
    cursor = encode_cursor(tenant, catalog, page.next)
    if batch:
        headers = {NEXT_HEADER: cursor, "Metastore-More": "true" if page.more else "false"}
        return web.json_response(items, content_type=ACCEPT_BATCH, headers=headers)
    return web.json_response({"events": items, "next": cursor, "more": page.more})
