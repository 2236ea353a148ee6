"""Snapshot expiry as a normal table commit through the node's Iceberg REST API.

The commit carries ``remove-snapshot-ref`` and ``remove-snapshots`` updates under
requirements on what the plan was computed from: the table's uuid and the snapshot
of every ref. A writer that appended meanwhile moved a ref, so the node answers 409
and nothing is removed; the job reloads the table and plans again on the fresh
state (on the one retry schedule), so an expiry never clobbers a concurrent append.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from metastore.pipeline.exits import JobError
from metastore.pipeline.maintain.maintain_lease import send
from metastore.pipeline.maintain.maintain_policy import Expiry, Policy, plan
from metastore.pipeline.node_client import NodeClient
from metastore.util.retry import RetryPolicy

RETRY = RetryPolicy(base_s=0.05, max_s=2.0, max_attempts=20)
NAMESPACE_SEP = "\x1f"


class Conflict(Exception):
    """The node refused a commit's requirements (409): the table changed."""


@dataclass(frozen=True, slots=True)
class TableName:
    tenant: str
    catalog: str
    namespace: tuple[str, ...]
    name: str

    def display(self) -> str:
        return f"{self.tenant}/{self.catalog}/{'.'.join((*self.namespace, self.name))}"


@dataclass(frozen=True, slots=True)
class Expired:
    """One table's expiry: what was removed and the metadata before and after it."""

    table: TableName
    expiry: Expiry
    before: Mapping[str, Any]  # the metadata the committed plan was computed from
    after: Mapping[str, Any]
    attempts: int


@dataclass(frozen=True, slots=True)
class Loaded:
    metadata: dict[str, Any]
    metadata_location: str | None


class IcebergClient:
    """The few Iceberg REST calls the job makes, with the node's authentication."""

    def __init__(self, node: NodeClient) -> None:
        self.node = node
        self._prefixes: dict[tuple[str, str], str] = {}

    def prefix(self, tenant: str, catalog: str) -> str:
        key = (tenant, catalog)
        if key not in self._prefixes:
            warehouse = urllib.parse.quote(f"{tenant}/{catalog}")
            config = self.node.call("GET", f"/v1/config?warehouse={warehouse}")
            self._prefixes[key] = str(config.get("overrides", {}).get("prefix", ""))
        return self._prefixes[key]

    def table_path(self, table: TableName) -> str:
        namespace = urllib.parse.quote(NAMESPACE_SEP.join(table.namespace), safe="")
        name = urllib.parse.quote(table.name, safe="")
        prefix = self.prefix(table.tenant, table.catalog)
        return f"/v1/{prefix}/namespaces/{namespace}/tables/{name}".replace("/v1//", "/v1/")

    def load(self, table: TableName) -> Loaded | None:
        """The table's current metadata and its file's location; None if it is gone."""
        status, found = send(self.node, "GET", self.table_path(table))
        if status == 404:
            return None
        if status >= 300 or not isinstance(found, dict):
            raise JobError(f"node {self.node.url}: load {table.display()}: {status} {found}")
        return Loaded(found["metadata"], found.get("metadata-location"))

    def commit(self, table: TableName, body: Mapping[str, Any]) -> dict[str, Any]:
        """The committed metadata; ``Conflict`` on 409, ``JobError`` on anything else."""
        status, found = send(self.node, "POST", self.table_path(table), body)
        if status == 409:
            raise Conflict(str(found))
        if status >= 300 or not isinstance(found, dict):
            raise JobError(f"node {self.node.url}: commit to {table.display()}: {status} {found}")
        metadata: dict[str, Any] = found["metadata"]
        return metadata


def request_body(metadata: Mapping[str, Any], expiry: Expiry) -> dict[str, Any]:
    """The commit removing ``expiry``, valid only on the exact state it was planned on."""
    requirements: list[dict[str, Any]] = [
        {"type": "assert-table-uuid", "uuid": metadata["table-uuid"]}
    ]
    for name, ref in sorted((metadata.get("refs") or {}).items()):
        requirements.append(
            {"type": "assert-ref-snapshot-id", "ref": name, "snapshot-id": ref["snapshot-id"]}
        )
    updates: list[dict[str, Any]] = [
        {"action": "remove-snapshot-ref", "ref-name": name} for name in expiry.refs
    ]
    if expiry.snapshot_ids:
        updates.append({"action": "remove-snapshots", "snapshot-ids": list(expiry.snapshot_ids)})
    return {"requirements": requirements, "updates": updates}


def expire(
    client: IcebergClient,
    table: TableName,
    defaults: Sequence[Mapping[str, str]],
    *,
    dry_run: bool = False,
    now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
) -> Expired:
    """Expire ``table`` by its policy (its properties, then ``defaults``: namespaces
    innermost first, then the catalog); retried on the fresh state after a 409."""
    attempts = RETRY.start()
    while True:
        loaded = client.load(table)
        if loaded is None:
            return Expired(table, Expiry((), ()), {}, {}, attempts.attempt)
        metadata = loaded.metadata
        policy = Policy.of([metadata.get("properties") or {}, *defaults])
        expiry = plan(metadata, policy, now_ms())
        if not expiry or dry_run:
            return Expired(table, expiry, metadata, metadata, attempts.attempt)
        try:
            after = client.commit(table, request_body(metadata, expiry))
        except Conflict:
            if not attempts.backoff():
                raise JobError(
                    f"{table.display()}: the table kept changing; expiry gave up after "
                    f"{attempts.attempt} attempts"
                ) from None
            continue
        return Expired(table, expiry, metadata, after, attempts.attempt)
