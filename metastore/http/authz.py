"""What handlers need from authorization: the request's checker and what a listing shows.

The ``authorize`` middleware (``metastore.node.route_privileges``) checks every route before its
handler runs and leaves two things in the request: the ``Checker`` of its caller
(for the few handlers that check more than the route says, such as a grant that
needs its granter to hold what it grants) and, on a listing route, the
``Visibility`` of the listed items. With authentication off neither is set and
everything is allowed and shown: a node without authentication trusts its network.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from aiohttp import web

from metastore.security.authorizer import Checker
from metastore.security.policy import EVERYTHING, Visibility
from metastore.security.privileges import Privilege
from metastore.security.securables import Securable


class RouteRule(Protocol):
    """A route's rule (``metastore.node.route_privileges``), as a long-lived handler runs
    it again."""

    async def check(self, request: web.Request, checker: Checker) -> None: ...


# request-scoped, typed keys (aiohttp warns on string keys):
CHECKER = web.RequestKey("authz-checker", Checker)  # set by the authorize middleware (auth on)
VISIBLE = web.RequestKey("authz-visible", Visibility)  # set on listing routes (auth on)
RULE = web.RequestKey("authz-rule", RouteRule)  # the route's rule, passed (auth on)


def checker(request: web.Request) -> Checker | None:
    """The caller's checker; None with authentication off (everything is allowed)."""
    found = request.get(CHECKER)
    return found if isinstance(found, Checker) else None


def visible(request: web.Request) -> Visibility:
    """Which items of this request's listing the caller may see."""
    found = request.get(VISIBLE)
    return found if isinstance(found, Visibility) else EVERYTHING


def may(request: web.Request) -> Callable[[Privilege, Securable], bool]:
    """Whether the caller holds a privilege on a securable (everything with auth off).
    A check may read a catalog's record id: call what it returns off the event loop."""
    found = checker(request)
    return (lambda _privilege, _securable: True) if found is None else found.allows
