"""Iceberg REST: metrics reports (``POST .../tables/{table}/metrics``), kept by
``metastore.iceberg.reports``."""

from __future__ import annotations

from aiohttp import web

from metastore.errors import NoSuchTable
from metastore.http.validation import body_of, read_json
from metastore.iceberg import pieces
from metastore.iceberg.routes.context import Call, named
from metastore.iceberg.routes.table_routes import TABLE
from metastore.model.keys import Kind

routes = web.RouteTableDef()

METRICS = TABLE + "/metrics"


@routes.post(METRICS)
async def report_metrics(request: web.Request) -> web.Response:
    """204 once the report is counted and kept; a body that is neither a ScanReport nor
    a CommitReport is a 400, a table that does not exist (or is not an Iceberg table)
    a 404, and neither is counted. Nothing is committed: reports are telemetry."""
    call = await Call.of(request)
    key = named(request, Kind.TABLE, "table")
    report = await read_json(request, "iceberg_report_metrics")
    metastore = call.metastore
    entity = await metastore.read_point(metastore.get_entity, call.tenant, call.catalog, key)
    if pieces.CORE not in entity.attachments:
        raise NoSuchTable(f"table {key.display()} has no Iceberg metadata")
    table = (call.tenant, call.catalog, entity.entity_id)
    call.iceberg.reports.add(table, report, len(body_of(request)))
    return web.Response(status=204)
