"""Sixteen concurrent clients against one node and one catalog.

Each client runs a fixed mix: creates of its own tables (never conflict),
optimistic updates of ONE shared table (``expected-version`` read just before;
losers get 409), and creates of the SAME table name as every other client (one
wins, the rest get 409). Even clients use the single-entity endpoints, odd ones
the atomic commit endpoint, so both paths race each other. Afterwards the
history must be one serial chain that accounts for every acknowledged write and
nothing else.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass
from typing import Any

import aiohttp

from harness.node import NodeProcess
from tests.native.support import (
    TIMEOUT,
    Api,
    Catalog,
    Reply,
    assert_serial_chain,
    assert_status,
    entity_ref,
)

CLIENTS = 16
OPS = 40
SHARED = "shared"
CONFLICT_TYPES = {"CommitFailedException", "AlreadyExistsException"}


@dataclass(frozen=True)
class Ack:
    """One acknowledged (2xx) write and what it reported."""

    client: int
    op: str  # "own", "update", "race"
    name: str
    version: int
    entity_id: str
    properties: dict[str, str]
    commit_id: str | None  # the commit endpoint reports it; single-entity endpoints do not
    seq: int | None


@dataclass
class Tally:
    acks: list[Ack]
    conflicts: list[Reply]
    attempts: Counter[str]


def check_conflict(reply: Reply) -> None:
    """A refused write is a 409 conflict in the error shape, never anything else."""
    assert reply.status == 409, f"neither 2xx nor 409: {reply.describe()}"
    assert reply.body["error"]["type"] in CONFLICT_TYPES, reply.describe()
    assert reply.body["error"]["code"] == 409, reply.describe()


def ack_from_entity(client: int, op: str, body: dict[str, Any]) -> Ack:
    return Ack(
        client, op, body["name"], body["version"], body["entity-id"], body["properties"], None, None
    )


def ack_from_outcome(client: int, op: str, name: str, reply: Reply) -> Ack:
    body = reply.body
    (change,) = body["changes"]
    assert change["path"] == ["ns", name] and not change["deleted"], reply.describe()
    entity = change["entity"]
    return Ack(
        client,
        op,
        name,
        entity["version"],
        entity["entity-id"],
        entity["properties"],
        body["commit-id"],
        body["seq"],
    )


async def run_client(url: str, catalog: Catalog, client: int, tally: Tally) -> None:
    via_commit = client % 2 == 1
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        api = Api(session, url)
        cat = Catalog(api, catalog.tenant, catalog.name)

        async def create(op: str, name: str, properties: dict[str, str]) -> None:
            tally.attempts[op] += 1
            if via_commit:
                change = {
                    "action": "create",
                    "entity": entity_ref("table", "ns", name),
                    "properties": properties,
                }
                reply = await cat.commit({"operation": op, "changes": [change]})
                if reply.status == 200:
                    tally.acks.append(ack_from_outcome(client, op, name, reply))
                    return
            else:
                body = {"name": name, "properties": properties}
                reply = await api.post(cat.ns("ns") + "/tables", body)
                if reply.status == 201:
                    tally.acks.append(ack_from_entity(client, op, reply.body))
                    return
            check_conflict(reply)
            tally.conflicts.append(reply)

        async def update(i: int) -> None:
            tally.attempts["update"] += 1
            current = assert_status(await api.get(cat.entity(("ns",), SHARED)))
            version = current["version"]
            updates = {f"c{client}": str(i)}
            ack: Ack | None = None
            if via_commit:
                key = entity_ref("table", "ns", SHARED)
                reply = await cat.commit(
                    {
                        "operation": "update",
                        "requirements": [
                            {"type": "assert-version", "entity": key, "version": version}
                        ],
                        "changes": [{"action": "update", "entity": key, "updates": updates}],
                    }
                )
                if reply.status == 200:
                    ack = ack_from_outcome(client, "update", SHARED, reply)
            else:
                body = {"updates": updates, "expected-version": version}
                reply = await api.post(cat.entity(("ns",), SHARED), body)
                if reply.status == 200:
                    ack = ack_from_entity(client, "update", reply.body)
            if ack is not None:
                assert ack.version == version + 1, reply.describe()
                assert ack.properties[f"c{client}"] == str(i), reply.describe()
                tally.acks.append(ack)
                return
            check_conflict(reply)
            assert reply.body["error"]["type"] == "CommitFailedException", reply.describe()
            tally.conflicts.append(reply)

        for i in range(OPS):
            step = i % 4
            if step == 0:
                await create("own", f"own-{client}-{i}", {"by": str(client)})
            elif step == 2:
                await create("race", f"race-{i}", {"by": str(client)})
            else:
                await update(i)


async def test_sixteen_clients_one_catalog(node: NodeProcess, api: Api, catalog: Catalog) -> None:
    await catalog.create_namespace("ns")
    await catalog.create(("ns",), SHARED, {"origin": "setup"})
    setup_commits = len(await catalog.history())  # catalog, namespace, shared table
    tally = Tally([], [], Counter())

    await asyncio.gather(*(run_client(node.url, catalog, c, tally) for c in range(CLIENTS)))

    acks = tally.acks
    assert sum(tally.attempts.values()) == CLIENTS * OPS
    assert len(acks) + len(tally.conflicts) == CLIENTS * OPS
    updates = [a for a in acks if a.op == "update"]
    creates = [a for a in acks if a.op != "update"]

    # History: one serial chain holding exactly the setup and the acknowledged writes.
    history = await catalog.history(page_size=37)
    assert_serial_chain(history)
    assert len(history) == setup_commits + len(acks), (len(history), setup_commits, len(acks))
    by_id = {c["id"]: c for c in history}
    reported = [a.commit_id for a in acks if a.commit_id is not None]
    assert len(reported) == len(set(reported)), "two acknowledgements named one commit"
    for ack in acks:
        if ack.commit_id is not None:
            commit = by_id.get(ack.commit_id)
            assert commit is not None, f"acknowledged commit missing from history: {ack}"
            assert commit["seq"] == ack.seq, (commit, ack)
            assert commit["changes"] == [
                {
                    "kind": "table",
                    "path": ["ns", ack.name],
                    "action": "create" if ack.op != "update" else "update",
                }
            ], (commit, ack)
    changes = Counter(
        (tuple(ch["path"]), ch["action"]) for c in history[:-setup_commits] for ch in c["changes"]
    )
    assert changes[(("ns", SHARED), "update")] == len(updates), changes
    for ack in creates:
        assert changes[(("ns", ack.name), "create")] == 1, (ack, changes)

    # The shared table: one version per acknowledged update, no lost update.
    shared = assert_status(await api.get(catalog.entity(("ns",), SHARED)))
    assert shared["version"] == 1 + len(updates), (shared, len(updates))
    assert sorted(a.version for a in updates) == list(range(2, shared["version"] + 1))
    last_value: dict[str, tuple[int, str]] = {}
    for ack in updates:
        key = f"c{ack.client}"
        if key not in last_value or ack.version > last_value[key][0]:
            last_value[key] = (ack.version, ack.properties[key])
    expected = {"origin": "setup"} | {k: v for k, (_, v) in last_value.items()}
    assert shared["properties"] == expected, (shared, last_value)
    for ack in updates:
        if ack.commit_id is not None:  # point-in-time: the state that commit produced
            then = assert_status(await api.get(catalog.entity(("ns",), SHARED), at=ack.commit_id))
            assert then["version"] == ack.version and then["properties"] == ack.properties, (
                then,
                ack,
            )

    # Creates: every acknowledged one is there, and each raced name has exactly one winner.
    tables = assert_status(await api.get(catalog.ns("ns") + "/tables", pageSize=1000))["tables"]
    final = {t["name"]: t for t in tables}
    assert len(final) == 1 + len(creates), sorted(final)
    for ack in creates:
        table = final.get(ack.name)
        assert table is not None, f"acknowledged create missing: {ack}"
        assert table["entity-id"] == ack.entity_id and table["version"] == 1, (table, ack)
        assert table["properties"] == {"by": str(ack.client)}, (table, ack)
    winners = Counter(a.name for a in creates if a.op == "race")
    assert set(winners) == {f"race-{i}" for i in range(2, OPS, 4)}, winners
    assert set(winners.values()) == {1}, winners
    assert tally.attempts["own"] == len([a for a in creates if a.op == "own"]), tally.attempts
    conflicts = Counter(r.body["error"]["type"] for r in tally.conflicts)
    assert conflicts["AlreadyExistsException"] == tally.attempts["race"] - len(winners), conflicts
    assert conflicts["CommitFailedException"] == tally.attempts["update"] - len(updates)
    assert updates, "no update ever won"
