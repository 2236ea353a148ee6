"""The routes that describe the API: the native API's OpenAPI document and the Iceberg
REST specification this node implements (``metastore.http.documents``).

They hold no data and are read like ``/v1/config``: by any authenticated caller
(by everyone with auth off).
"""

from __future__ import annotations

from aiohttp import web

from metastore.http.documents import ApiDocuments
from metastore.http.typedefs import API_DOCUMENTS

NATIVE_DOCUMENT = "/api/v1/openapi.json"
ICEBERG_DOCUMENT = "/v1/openapi.yaml"

routes = web.RouteTableDef()


def setup_api_documents(app: web.Application) -> None:
    app[API_DOCUMENTS] = ApiDocuments()
    app.add_routes(routes)


@routes.get(NATIVE_DOCUMENT)
async def native_openapi(request: web.Request) -> web.Response:
    """The native API's OpenAPI 3.1 document (every route the Iceberg document leaves out)."""
    documents = await request.app[API_DOCUMENTS].ready(request.app)
    return web.Response(body=documents.native, content_type="application/json")


@routes.get(ICEBERG_DOCUMENT)
async def iceberg_openapi(request: web.Request) -> web.Response:
    """The Iceberg REST Catalog specification, narrowed to the operations this node serves."""
    documents = await request.app[API_DOCUMENTS].ready(request.app)
    return web.Response(body=documents.iceberg, content_type="application/yaml")
