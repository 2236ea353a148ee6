"""Native API: the Iceberg metrics reports this node keeps of a table
(``metastore.iceberg.reports``)."""

from __future__ import annotations

from aiohttp import web

from metastore.http import params
from metastore.http.typedefs import ICEBERG, METASTORE
from metastore.model.keys import EntityKey, Kind
from metastore.model.names import check_name
from metastore.native.entity_routes import NAMESPACE

routes = web.RouteTableDef()

REPORTS = NAMESPACE + "/tables/{name}/metrics-reports"


def table_key(request: web.Request) -> EntityKey:
    return EntityKey(
        Kind.TABLE, params.namespace(request), check_name("table", request.match_info["name"])
    )


@routes.get(REPORTS)
async def metrics_reports(request: web.Request) -> web.Response:
    """``{"reports": [{"received-at-ms", "report"}, ...]}``, newest first: the last
    reports engines sent this node for the table (404 for a table that does not exist)."""
    tenant, catalog = params.tenant(request), params.catalog(request)
    metastore = request.app[METASTORE]
    entity = await metastore.read_point(metastore.get_entity, tenant, catalog, table_key(request))
    reports = request.app[ICEBERG].reports.recent((tenant, catalog, entity.entity_id))
    return web.json_response({"reports": reports})
