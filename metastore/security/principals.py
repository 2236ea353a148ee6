"""Managing principals: every change is one commit to the tenant's system catalog.

The native API creates, rotates, disables, enables and deletes principals here;
at startup the node seeds the configured clients that do not exist yet and turns
the client records of earlier versions into principal records. Secrets are
hashed in a worker thread, never on the event loop; a generated secret is
returned once and only its hash is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Callable, Mapping

from metastore.catalog.service import Metastore, Page
from metastore.engine.commits import CommitOutcome, CommitRequest, Record
from metastore.errors import AlreadyExists, BadRequest, MetastoreError, NoSuchTenant, NotFound
from metastore.model.changes import Change, CreateEntity, DeleteEntity, UpdateEntity
from metastore.model.keys import SYSTEM_CATALOG, EntityKey, Kind
from metastore.model.names import check_system_name
from metastore.model.records import Entity
from metastore.model.requirements import AssertVersion
from metastore.security.principal import RESERVED_NAMES
from metastore.security.principal_records import (
    PRINCIPAL_PREFIX,
    PrincipalRecord,
    RecordType,
    principal_key,
)
from metastore.util.setting_rules import check_secret

LEGACY_CLIENT_PREFIX = "client:"  # client records of earlier versions
_MIGRATE_BATCH = 400  # clients per migration commit (two changes each)


class NoSuchPrincipal(NotFound):
    error_type = "NoSuchPrincipalException"


def check_principal_name(name: object) -> str:
    """1-128 of ``A-Za-z0-9_.-`` (so ``@`` can join it to its tenant), not a reserved name."""
    if not isinstance(name, str):
        raise BadRequest("a principal name must be a string")
    check_system_name("principal", name)
    if name in RESERVED_NAMES:
        raise BadRequest(f"the principal name {name!r} is reserved")
    return name


def generate_secret() -> str:
    return secrets.token_urlsafe(32)


class Principals:
    def __init__(self, metastore: Metastore) -> None:
        self._metastore = metastore

    # --- reads ---------------------------------------------------------------------------

    def get(self, tenant: str, name: str) -> Entity:
        try:
            return self._metastore.get_entity(tenant, SYSTEM_CATALOG, principal_key(name))
        except NoSuchTenant:
            raise
        except NotFound:
            raise NoSuchPrincipal(f"principal does not exist: {name}") from None

    def list(
        self,
        tenant: str,
        page_token: str | None,
        page_size: int | None,
        shows: Callable[[str], bool] | None = None,
    ) -> Page[Entity]:
        """The tenant's principals in name order; given ``shows``, only the names it keeps
        (filtered before a page is cut: a page token carries only a shown name)."""
        return self._metastore.list_entities(
            tenant,
            SYSTEM_CATALOG,
            (),
            Kind.SYSTEM,
            page_token,
            page_size,
            name_prefix=PRINCIPAL_PREFIX,
            shows=shows,
        )

    # --- changes -------------------------------------------------------------------------

    async def create(
        self,
        tenant: str,
        name: str,
        kind: RecordType,
        secret: str | None,
        by: str,
        record: Record | None = None,
    ) -> tuple[Entity, str | None]:
        """A new principal, and the secret of a service principal (generated if not given)."""
        await self._metastore.read_point(self._metastore.check_tenant, tenant)
        if kind == "user":
            if secret is not None:
                raise BadRequest("a user principal has no secret: it signs in at its provider")
            new = PrincipalRecord.user(name, by)
        else:
            secret = _checked(secret) if secret is not None else generate_secret()
            new = await asyncio.to_thread(PrincipalRecord.service, name, secret, by)
        change = CreateEntity(principal_key(name), new.properties())
        try:
            outcome = await self._commit(tenant, (), change, "create principal", by, record)
        except AlreadyExists:
            raise AlreadyExists(f"principal already exists: {name}") from None
        return _entity(outcome, change.key), secret

    async def rotate(
        self, tenant: str, name: str, secret: str | None, by: str, record: Record | None = None
    ) -> tuple[Entity, str]:
        """A new secret (and generation) for a service principal: its earlier tokens die."""
        entity, current = await self._metastore.read_point(self._current, tenant, name)
        if current.type != "service":
            raise BadRequest(f"principal {name!r} is a user: it has no secret to rotate")
        secret = _checked(secret) if secret is not None else generate_secret()
        new = await asyncio.to_thread(current.with_secret, secret)
        outcome = await self._update(tenant, entity, new, "rotate principal secret", by, record)
        return outcome, secret

    async def set_disabled(
        self, tenant: str, name: str, disabled: bool, by: str, record: Record | None = None
    ) -> Entity:
        entity, current = await self._metastore.read_point(self._current, tenant, name)
        operation = "disable principal" if disabled else "enable principal"
        return await self._update(
            tenant, entity, current.with_disabled(disabled), operation, by, record
        )

    async def delete(self, tenant: str, name: str, by: str, record: Record | None = None) -> None:
        entity = await self._metastore.read_point(self.get, tenant, name)
        key = principal_key(name)
        requirements = (AssertVersion(key, entity.version),)
        await self._commit(tenant, requirements, DeleteEntity(key), "delete principal", by, record)

    # --- startup -------------------------------------------------------------------------

    async def seed(self, tenant: str, clients: Mapping[str, str]) -> None:
        """Create the configured service principals (name -> secret) that do not exist.

        An existing principal is left as it is, whatever its secret or state: once
        created, principals are managed through the API.
        """
        for name, secret in clients.items():
            if await self._exists(tenant, name):
                continue
            new = await asyncio.to_thread(PrincipalRecord.service, name, secret, "system")
            change = CreateEntity(principal_key(name), new.properties())
            with contextlib.suppress(AlreadyExists):  # created meanwhile (another node)
                await self._commit(tenant, (), change, "seed principal", "system", None)

    async def migrate_clients(self, tenant: str) -> None:
        """Turn ``client:<id>`` records of earlier versions into service principals with
        the same secret and generation (tokens of earlier versions are not JWTs and are
        refused anyway); a principal of that name that exists already wins."""
        while True:
            page = await self._metastore.read(
                self._metastore.list_entities,
                tenant,
                SYSTEM_CATALOG,
                (),
                Kind.SYSTEM,
                None,
                _MIGRATE_BATCH,
                name_prefix=LEGACY_CLIENT_PREFIX,
            )
            if not page.items:
                return
            changes: list[Change] = []
            for entity in page.items:
                name = entity.path[-1].removeprefix(LEGACY_CLIENT_PREFIX)
                changes.append(DeleteEntity(EntityKey(Kind.SYSTEM, (), entity.path[-1])))
                props = {**entity.properties, "type": "service", "disabled": "false"}
                migrated = PrincipalRecord.of(name, props | {"created-by": "system"})
                if migrated is None or await self._exists(tenant, name):
                    continue
                changes.append(CreateEntity(principal_key(name), migrated.properties()))
            request = CommitRequest(
                changes=tuple(changes), principal="system", operation="migrate clients"
            )
            await self._metastore.commit(tenant, SYSTEM_CATALOG, request)

    # --- helpers -------------------------------------------------------------------------

    async def _exists(self, tenant: str, name: str) -> bool:
        metastore = self._metastore
        return await metastore.read_point(
            metastore.has_entity, tenant, SYSTEM_CATALOG, principal_key(name)
        )

    def _current(self, tenant: str, name: str) -> tuple[Entity, PrincipalRecord]:
        entity = self.get(tenant, name)
        current = PrincipalRecord.of(name, entity.properties)
        if current is None:
            raise MetastoreError(f"principal {name!r} has a record this version cannot read")
        return entity, current

    async def _update(
        self,
        tenant: str,
        entity: Entity,
        new: PrincipalRecord,
        operation: str,
        by: str,
        record: Record | None,
    ) -> Entity:
        key = principal_key(new.name)
        old = PrincipalRecord.of(new.name, entity.properties)
        props = new.properties()
        removals = tuple(k for k in (old.properties() if old else {}) if k not in props)
        change = UpdateEntity(key, props, removals)
        requirements = (AssertVersion(key, entity.version),)  # nobody changed it meanwhile
        outcome = await self._commit(tenant, requirements, change, operation, by, record)
        return _entity(outcome, key)

    async def _commit(
        self,
        tenant: str,
        requirements: tuple[AssertVersion, ...],
        change: Change,
        operation: str,
        by: str,
        record: Record | None,
    ) -> CommitOutcome:
        request = CommitRequest(requirements, (change,), by, operation, record=record)
        return await self._metastore.commit(tenant, SYSTEM_CATALOG, request)


def _checked(secret: str) -> str:
    try:
        return check_secret(secret)
    except ValueError as exc:
        raise BadRequest(f"invalid secret: {exc}") from None


def _entity(outcome: CommitOutcome, key: EntityKey) -> Entity:
    entity = outcome.entities.get(key)
    assert entity is not None, "the commit wrote the principal"
    return entity


def record_of(entity: Entity) -> PrincipalRecord | None:
    """The principal record an entity holds (its name from the key)."""
    name = entity.path[-1].removeprefix(PRINCIPAL_PREFIX)
    return PrincipalRecord.of(name, entity.properties)
