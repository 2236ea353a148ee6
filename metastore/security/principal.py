"""The caller of a request: one principal of one tenant.

Every request is made by exactly one principal: a service principal (OAuth2
client credentials), a user (a token from an external identity provider), the
anonymous caller of a node with authentication off, or the node itself
(``system``, for bootstrap writes). Commit history records ``Principal.id``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from metastore.model.names import SYSTEM_NAME

PrincipalKind = Literal["service", "user", "anonymous", "system"]
DEFAULT_TENANT = "default"


@dataclass(frozen=True, slots=True)
class Principal:
    tenant: str
    name: str
    kind: PrincipalKind
    roles: frozenset[str] = frozenset()  # principal roles asserted by an external token

    @property
    def id(self) -> str:
        """``name`` in the default tenant, ``name@tenant`` elsewhere: the OAuth client id of
        a service principal and what the history records (names cannot hold ``@``)."""
        return self.name if self.tenant == DEFAULT_TENANT else f"{self.name}@{self.tenant}"


ANONYMOUS_PRINCIPAL = Principal(DEFAULT_TENANT, "anonymous", "anonymous")
SYSTEM_PRINCIPAL = Principal(DEFAULT_TENANT, "system", "system")
# names no service principal or user may have: history could not tell them from these
RESERVED_NAMES = frozenset({ANONYMOUS_PRINCIPAL.name, SYSTEM_PRINCIPAL.name})


def parse_principal_id(principal_id: str) -> tuple[str, str] | None:
    """``(tenant, name)`` of a ``Principal.id`` (an OAuth client id), or None if it is
    not one: ``name`` or ``name@tenant``, each 1-128 of ``A-Za-z0-9_.-``."""
    name, at, tenant = principal_id.partition("@")
    tenant = tenant if at else DEFAULT_TENANT
    if not SYSTEM_NAME.fullmatch(name) or not SYSTEM_NAME.fullmatch(tenant):
        return None
    return tenant, name
