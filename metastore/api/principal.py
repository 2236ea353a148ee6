"""Who is calling: the principal every commit records in the history.

The auth middleware stores the client id of a valid bearer token under
``PRINCIPAL`` in the request; with auth off every caller is ``anonymous``. Both
APIs take the principal from here, so a commit names the same caller whichever
API made it.
"""

from __future__ import annotations

from aiohttp import web

PRINCIPAL = "principal"  # request-scoped: set by the auth middleware
ANONYMOUS = "anonymous"


def principal_of(request: web.Request) -> str:
    return str(request.get(PRINCIPAL, ANONYMOUS))
