"""What authorization costs: commit throughput with auth on and a realistic grant set,
next to the same load with auth off, in one run.

One embedded node per mode (child processes, ``--no-fsync`` so the node's CPU, where
checks run, is the limit rather than the disk): one with ``METASTORE_AUTH=off``, and
for each secured mode one with auth on whose tenant holds a realistic policy
(``--principal-roles`` principal roles, ``--catalog-roles`` catalog roles, ``--grants``
grants on namespaces and tables spread over them, a few tenant-level grants). The load
is the embedded benchmark's hot catalog: ``--concurrency`` clients, each commit creates
one table; on the secured node they send a bearer token of a principal holding
``TABLE_CREATE`` through one of its two roles, not an admin, so every request is
authenticated and authorized in full.
A third mode sends a service admin's token to a secured node of its own:
authenticated, but no grant is looked up, so it shows what authentication alone costs.

Each mode has a node of its own because a node's cost per commit grows as it serves
(more tables in the hot catalog's index, a bigger heap and object cache): two modes
sharing one node would each commit on a node twice as old as the auth-off one's, which
once made authentication alone look as costly as authorization (0.85 of auth off).

The modes are measured in alternating rounds (off, on, authn; on, authn, off; ...) so
drift of the shared machine hits all alike; the summary compares the sums, and the
node's CPU time per commit (less sensitive to what else the machine runs). The rounds
are many and short (ten of 1.5 s per mode): the machine drifts over seconds (one
mode's CPU per commit moved between 0.43 and 0.70 ms from round to round), and the
finer the modes alternate, the more of that drift falls on every mode alike. With
three rounds of 5 s, three runs back to back gave ratios of 0.909 to 1.039; with ten
of 1.5 s, the same total time, three runs gave 0.918 to 0.970. The target is a
ratio of at least 0.90. Run from the repo root: ``.venv/bin/python -m bench.authz
[--quick]``; the summary is also written to ``.bench/authz.json``. Exit status 1 if
a request failed unexpectedly.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import summary as bench_summary
from bench.load import Client, Failures, Latency, Progress, closed_loop, new_session
from bench.report import command_line, machine, ms, pct, print_outcome, save_report, table
from harness.node import NodeProcess, stop_checked
from harness.process import cpu_seconds

TENANT = CATALOG = "default"
MODES = ("off", "on", "authn")  # auth off; on, authorized by grants; on, a service admin
CATALOGS = {"off": CATALOG, "on": CATALOG, "authn": "authn"}  # each mode commits to its own
NAMESPACE = "bench"
TARGET = 0.90
ROOT, ROOT_SECRET = "root", "root-secret-0123"
WORKER, WORKER_SECRET = "worker", "worker-secret-0123"
REPO_ROOT = Path(__file__).resolve().parents[1]
OUT_PATH = REPO_ROOT / ".bench" / "authz.json"
PRIVILEGES = ("TABLE_READ_DATA", "TABLE_WRITE_DATA", "TABLE_LIST", "NAMESPACE_READ_PROPERTIES")


@dataclass
class Round:
    mode: str  # off | on | authn (a service admin's token: authentication, no grant lookups)
    seconds: float
    commits: int
    commits_per_s: float
    latency: Latency
    node_cpu: float  # CPU seconds per wall second (1.0 = one core busy)
    errors: int


@dataclass
class Policy:
    principal_roles: int
    catalog_roles: int
    grants: int


async def login(client: Client, client_id: str, secret: str) -> dict[str, str]:
    form = {"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret}
    async with client.session.post(client.base + "/v1/oauth/tokens", data=form) as reply:
        body = await reply.json()
    if reply.status != 200:
        raise RuntimeError(f"no token for {client_id}: {body}")
    return {"Authorization": f"Bearer {body['access_token']}"}


async def grant_policy(client: Client, admin: dict[str, str], args: argparse.Namespace) -> Policy:
    """The secured node's policy: roles, memberships, grants spread over namespaces and
    tables, the one the load needs among them."""
    api = client.api

    async def post(path: str, body: Any, expect: int = 201) -> None:
        await client.call("POST", api + path, body=body, headers=admin, expect=expect)

    await post("/principals", {"name": WORKER, "secret": WORKER_SECRET})
    roles = [f"role{i}" for i in range(args.principal_roles)]
    for i, role in enumerate(roles):
        await post("/principal-roles", {"name": role})
        if i < 2:  # the worker holds two of them
            await post(f"/principal-roles/{role}/principals", {"principal": WORKER})
        await post(f"/principal-roles/{role}/grants", {"privilege": "CATALOG_LIST"})
    catalog_roles = [f"crole{i}" for i in range(args.catalog_roles)]
    grants = len(roles)
    for i, role in enumerate(catalog_roles):
        path = f"/catalogs/{CATALOG}/catalog-roles"
        await post(path, {"name": role})
        body = {"catalog": CATALOG, "catalog-role": role}
        await post(f"/principal-roles/{roles[i % len(roles)]}/catalog-roles", body)
    for g in range(args.grants - grants - 1):
        role = catalog_roles[g % len(catalog_roles)]
        privilege = PRIVILEGES[g % len(PRIVILEGES)]
        namespace = [f"ns{g % 10}", f"sub{g % 3}"]
        on = (
            {"kind": "namespace", "path": namespace}
            if privilege.startswith("NAMESPACE") or privilege == "TABLE_LIST"
            else {"kind": "table", "path": [*namespace, f"t{g}"]}
        )
        grant = {"privilege": privilege, "securable": on}
        await post(f"/catalogs/{CATALOG}/catalog-roles/{role}/grants", grant)
    needed = {"privilege": "TABLE_CREATE", "securable": {"kind": "namespace", "path": [NAMESPACE]}}
    await post(f"/catalogs/{CATALOG}/catalog-roles/{catalog_roles[0]}/grants", needed)
    return Policy(len(roles), len(catalog_roles), args.grants)


async def measure(
    url: str, pid: int, mode: str, headers: dict[str, str], args: argparse.Namespace,
    failures: Failures, next_index: list[int], seconds: float, label: str | None,
) -> Round:  # fmt: skip
    async with new_session(args.concurrency) as session:
        client = Client(session, url, failures, TENANT)
        tables = client.catalog(CATALOGS[mode]) + f"/namespaces/{NAMESPACE}/tables"
        errors_before = failures.count

        async def send(w: int, i: int) -> float | None:
            reply = await client.call(
                "POST", tables, body={"name": f"{mode}{w}_{i}"}, headers=headers, expect=201
            )
            return reply.seconds if reply.ok else None

        cpu_before = cpu_seconds(pid)
        if label is None:
            latencies, elapsed = await closed_loop(
                send, args.concurrency, seconds, next_index, None
            )
        else:
            with Progress(label) as progress:
                latencies, elapsed = await closed_loop(
                    send, args.concurrency, seconds, next_index, progress
                )
        cpu = (cpu_seconds(pid) - cpu_before) / elapsed
    return Round(
        mode, round(elapsed, 3), len(latencies), len(latencies) / elapsed,
        Latency.of(latencies), cpu, failures.count - errors_before,
    )  # fmt: skip


async def prepare(
    url: str, auth: bool, args: argparse.Namespace, failures: Failures
) -> tuple[dict[str, dict[str, str]], Policy | None]:
    async with new_session(4) as session:
        client = Client(session, url, failures, TENANT)
        admin = await login(client, ROOT, ROOT_SECRET) if auth else {}
        modes = ("on", "authn") if auth else ("off",)
        for mode in modes:
            catalog = CATALOGS[mode]
            if catalog != CATALOG:
                await client.call(
                    "POST",
                    client.api + "/catalogs",
                    body={"name": catalog},
                    headers=admin,
                    expect=201,
                )
            path = client.catalog(catalog) + "/namespaces"
            await client.call(
                "POST", path, body={"namespace": [NAMESPACE]}, headers=admin, expect=201
            )
        if not auth:
            return {"off": {}}, None
        policy = await grant_policy(client, admin, args)
        worker = await login(client, WORKER, WORKER_SECRET)
        return {"on": worker, "authn": admin}, policy


def _cpu_ms(rounds: Sequence[Round]) -> float:
    """The node's CPU milliseconds per commit over ``rounds``."""
    commits = sum(r.commits for r in rounds)
    return sum(r.node_cpu * r.seconds for r in rounds) * 1000 / commits if commits else 0.0


def summary(rounds: Sequence[Round], policy: Policy | None, nproc: int) -> tuple[str, float]:
    rows = [
        [
            r.mode,
            f"{r.seconds:.1f}",
            str(r.commits),
            f"{r.commits_per_s:.0f}",
            ms(r.latency.p50),
            ms(r.latency.p99),
            pct(r.node_cpu),
            f"{_cpu_ms([r]):.2f}",
            str(r.errors),
        ]
        for r in rounds
    ]
    headers = ["mode", "s", "commits", "commits/s", "p50 ms", "p99 ms", "node cpu"]
    headers += ["cpu ms/commit", "errors"]

    def of(mode: str) -> tuple[float, float]:
        chosen = [r for r in rounds if r.mode == mode]
        seconds = sum(r.seconds for r in chosen)
        rate = sum(r.commits for r in chosen) / seconds if seconds else 0.0
        return rate, _cpu_ms(chosen)

    (off, off_cpu), (on, on_cpu), (authn, authn_cpu) = of("off"), of("on"), of("authn")
    ratio = on / off if off else 0.0
    verdict = "meets" if ratio >= TARGET else "is BELOW"
    grants = (
        f"{policy.principal_roles} principal roles, {policy.catalog_roles} catalog roles, "
        f"{policy.grants} grants"
        if policy
        else "-"
    )
    text = "\n".join(
        [
            f"Authorization cost: one embedded node each (--no-fsync), {nproc} cores shared with "
            "the load generator; each commit creates one table in the hot catalog.",
            f"Secured node's policy: {grants}; the load's principal holds TABLE_CREATE through "
            "a catalog role of one of its two principal roles.",
            "",
            table(headers, rows),
            "",
            "modes: off = auth off; on = auth on, the load's principal authorized by its"
            " grants; authn = auth on, a service admin's token (authenticated, no grant"
            " lookups: what authentication alone costs)",
            f"node CPU per commit: off {off_cpu:.2f} ms, on {on_cpu:.2f} ms, authn "
            f"{authn_cpu:.2f} ms (off / on = {off_cpu / on_cpu if on_cpu else 0:.3f})",
            f"auth off {off:.0f} commits/s, auth on {on:.0f} commits/s: ratio {ratio:.3f} "
            f"(target >= {TARGET:.2f}: {verdict} the target); authentication alone "
            f"{authn:.0f} commits/s ({authn / off if off else 0:.3f} of off)",
        ]
    )
    return text, ratio


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.authz", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--seconds", type=float, default=1.5, help="per round")
    parser.add_argument("--rounds", type=int, default=10, help="rounds per node")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--principal-roles", type=int, default=4)
    parser.add_argument("--catalog-roles", type=int, default=6)
    parser.add_argument("--grants", type=int, default=50)
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds per node, unmeasured")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 rounds of 1.5 s")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.rounds, args.warmup = 1.5, 2, 0.5
    if min(args.seconds, args.rounds, args.concurrency, args.catalog_roles) <= 0:
        parser.error("--seconds, --rounds, --concurrency and --catalog-roles must be positive")
    if args.principal_roles < 2 or args.grants <= args.principal_roles:
        parser.error("need at least 2 principal roles and more grants than principal roles")
    return args


def node_env(auth: bool) -> dict[str, str]:
    if not auth:
        return {"METASTORE_AUTH": "off"}
    return {
        "METASTORE_AUTH": "on",
        "METASTORE_AUTH_CLIENTS": f"{ROOT}:{ROOT_SECRET}",
        "METASTORE_AUTH_ADMINS": ROOT,
    }


async def run_rounds(
    nodes: dict[str, NodeProcess], args: argparse.Namespace, failures: Failures
) -> tuple[list[Round], Policy | None]:
    """Warm every mode up, then measure them in turn, round after round."""
    modes: list[tuple[str, NodeProcess, dict[str, str]]] = []
    policy = None
    for mode, node in nodes.items():
        headers, found = await prepare(node.url, mode != "off", args, failures)
        policy = policy or found
        modes.append((mode, node, headers[mode]))
    indexes = {mode: [0] * args.concurrency for mode, _, _ in modes}
    for mode, node, sent in modes:  # connections, caches, the policy snapshot
        await measure(
            node.url, node.pid, mode, sent, args, failures, indexes[mode], args.warmup, None
        )
    rounds = []
    for i in range(args.rounds):  # each round starts with another mode: drift hits all alike
        for mode, node, sent in modes[i % len(modes) :] + modes[: i % len(modes)]:
            rounds.append(
                await measure(
                    node.url,
                    node.pid,
                    mode,
                    sent,
                    args,
                    failures,
                    indexes[mode],
                    args.seconds,
                    f"round {i + 1} {mode}",
                )
            )
    return rounds, policy


def run(args: argparse.Namespace) -> int:
    info = machine()
    command = command_line("bench.authz")
    print(f"command: {command}  (cwd {os.getcwd()})")
    failures = Failures()
    nodes_ok = True
    with tempfile.TemporaryDirectory(prefix="metastore-bench-authz-") as tmp:
        nodes: dict[str, NodeProcess] = {}
        try:
            for mode in MODES:  # a node each (see the module doc)
                data = Path(tmp) / mode / "data"
                data.parent.mkdir(parents=True)
                env = node_env(mode != "off")
                nodes[mode] = NodeProcess(data, extra_args=("--no-fsync",), env=env)
                nodes[mode].start()
            rounds, policy = asyncio.run(run_rounds(nodes, args, failures))
        finally:
            for node in nodes.values():
                nodes_ok &= stop_checked(node)
    text, ratio = summary(rounds, policy, info["nproc"])
    ok = print_outcome(text, failures, nodes_ok, "request failures")
    report = {
        "command": command,
        "machine": info,
        "settings": vars(args),
        "policy": None if policy is None else asdict(policy),
        "rounds": [asdict(r) for r in rounds],
        "ratio": ratio,
        "target": TARGET,
        "failures": asdict(failures),
        "ok": ok,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    save_report(OUT_PATH, REPO_ROOT, report)
    bench_summary.contribute(
        "authz",
        [
            bench_summary.Row(
                "authz",
                "auth on vs auth off",
                bench_summary.Figure("on", _rate(rounds, "on"), "commits/s"),
                bench_summary.Figure("off", _rate(rounds, "off"), "commits/s"),
                bench_summary.at_least(TARGET),
            )
        ],
        quick=args.quick,
    )
    return 0 if ok else 1


def _rate(rounds: Sequence[Round], mode: str) -> float:
    chosen = [r for r in rounds if r.mode == mode]
    seconds = sum(r.seconds for r in chosen)
    return sum(r.commits for r in chosen) / seconds if seconds else math.nan


def main(argv: Sequence[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
