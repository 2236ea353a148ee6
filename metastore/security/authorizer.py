"""May this principal do that? ``require`` (403 if not) and ``allows`` (for filtering).

Service admins may do everything everywhere. Every other principal acts only in its
own tenant, with the privileges its principal roles hold there (``Policy.access``):
a principal of another tenant gets a refusal whatever the path names, so a request
about another tenant's data learns nothing, not even whether it exists.

Grants made through catalog roles apply only to the catalog record they were made
for (``metastore.security.grants``), so a check inside a catalog reads the id of
that catalog's record, once per ``Checker`` (one per request). The checks are plain
calls; a rule awaits ``Checker.resolve`` of a securable first, which reads that id
as a point read (``Metastore.read_point``: on the event loop only from memory), so
the check after it reads nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from metastore.catalog.service import Metastore
from metastore.errors import Forbidden, NotFound
from metastore.security.policy import EVERYTHING, Access, Policies, Policy, Visibility
from metastore.security.principal import Principal
from metastore.security.privileges import Level, Privilege
from metastore.security.securables import Securable

ServiceAdmin = Callable[[Principal], bool]
_MAX_REMEMBERED = 100_000  # catalogs whose record id is remembered, before starting over


class Authorizer:
    def __init__(self, metastore: Metastore, service_admin: ServiceAdmin) -> None:
        self._metastore = metastore
        self.policies = Policies(metastore)
        self.is_service_admin = service_admin
        self._incarnations: dict[tuple[str, str], tuple[int, int]] = {}  # -> (HEAD, catalog id)

    @property
    def read_point(self) -> Callable[..., Awaitable[Any]]:
        return self._metastore.read_point

    def checker(self, principal: Principal) -> Checker:
        """The checks of one request by ``principal``."""
        return Checker(self, principal)

    def require(self, principal: Principal, privilege: Privilege, securable: Securable) -> None:
        self.checker(principal).require(privilege, securable)

    def allows(self, principal: Principal, privilege: Privilege, securable: Securable) -> bool:
        return self.checker(principal).allows(privilege, securable)

    def catalog_id(self, tenant: str, catalog: str) -> int | None:
        """The id of the catalog's record now, None if there is no such catalog.

        Reading the record on every check would cost a few object lookups; instead the
        id is remembered with the HEAD it was read at. A catalog deleted and created
        again is a new ref whose recent HEADs are all new commits, so while the HEAD
        remembered is still the ref's HEAD or one of its recent HEADs the catalog is the
        same one; past that window the record is read again.
        """
        try:
            ref = self._metastore.get_ref(tenant, catalog)
        except NotFound:
            return None
        key = (tenant, catalog)
        known = self._incarnations.get(key)
        if known is not None and (known[0] == ref.head or known[0] in ref.recent):
            self._incarnations[key] = (ref.head, known[1])
            return known[1]
        try:
            catalog_id = self._metastore.get_catalog(tenant, catalog).entity_id
        except NotFound:
            return None
        if len(self._incarnations) >= _MAX_REMEMBERED and key not in self._incarnations:
            self._incarnations.clear()
        self._incarnations[key] = (ref.head, catalog_id)
        return catalog_id


class Checker:
    """One principal's checks within one request: the service-admin test, the policy
    snapshot and catalog record ids are looked up once and reused."""

    def __init__(self, authorizer: Authorizer, principal: Principal) -> None:
        self.authorizer = authorizer
        self.principal = principal
        self.service_admin = authorizer.is_service_admin(principal)
        self._policy: Policy | None = None
        self._access: Access | None = None
        self._catalog_ids: dict[str, int | None] = {}

    def use(self, policy: Policy) -> None:
        """Check against ``policy`` (the principal's tenant's, just read) from now on."""
        self._policy, self._access = policy, None

    @property
    def access(self) -> Access:
        if self._access is None:
            if self._policy is None:
                self._policy = self.authorizer.policies.get(self.principal.tenant)
            self._access = self._policy.access(self.principal)
        return self._access

    async def resolve(self, securable: Securable) -> None:
        """Read what a check of ``securable`` needs (its catalog's record id) as a point
        read, so the check itself reads nothing."""
        path = securable.path
        if self.service_admin or securable.tenant != self.principal.tenant or not path:
            return
        if path[0] not in self._catalog_ids:
            await self.authorizer.read_point(self.catalog_id, path[0])

    def catalog_id(self, catalog: str) -> int | None:
        if catalog not in self._catalog_ids:
            self._catalog_ids[catalog] = self.authorizer.catalog_id(self.principal.tenant, catalog)
        return self._catalog_ids[catalog]

    def allows(self, privilege: Privilege, securable: Securable) -> bool:
        if self.service_admin:
            return True
        if privilege.level is Level.SERVICE or securable.tenant != self.principal.tenant:
            return False
        return self.access.allows(privilege, securable.path, self.catalog_id)

    def require(self, privilege: Privilege, securable: Securable) -> None:
        if not self.allows(privilege, securable):
            raise Forbidden(
                f"principal {self.principal.id!r} is not allowed {privilege.name}"
                f" on {securable.describe()}"
            )

    def browse(self, parent: Securable, kind: Level) -> Visibility:
        """Which ``kind`` children of ``parent`` the principal may see; 403 when it holds
        nothing at, above or below ``parent``."""
        if self.service_admin:
            return EVERYTHING
        visible = None
        if parent.tenant == self.principal.tenant:
            visible = self.access.browse(parent.path, kind, self.catalog_id)
        if visible is None:
            raise Forbidden(
                f"principal {self.principal.id!r} may not list the {kind.value}s"
                f" of {parent.describe()}"
            )
        return visible

    def member_of(self, tenant: str) -> bool:
        """True iff the principal holds anything in ``tenant`` (it then sees the tenant)."""
        if self.service_admin:
            return True
        return tenant == self.principal.tenant and self.access.anything
