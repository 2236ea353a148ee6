"""Two source trees of this service side by side: the same PyIceberg creates, commit
steps and loads against a node of each, in alternating rounds.

A change to the commit path moves an Iceberg figure by a few percent, while one
``make bench`` run differs from the next by more: the machine drifts over minutes. Two
nodes measured in turns, round by round, on the same machine at the same time, share
the drift, so their ratio is the change's. The "base" tree is a git worktree of
``--base`` (a revision; ``HEAD~1`` by default), made in a temporary directory and
removed at the end, or an existing tree given with ``--base-tree``; "this" is this
checkout, uncommitted changes included. Each node runs in its own tree (its working
directory and ``PYTHONPATH``), with ``--fsync`` as a node runs by default. ``--env
NAME=VALUE`` (repeatable) sets a variable for this checkout's node only, and
``--base-env`` for the base's: with ``--base HEAD`` the two nodes run the same code,
and the ratio is the setting's (``--env METASTORE_PIN_CPU=1``).

Each round, each node in turn (the order swapped every round): ``--ops`` creates of
new tables, ``--ops`` commit steps on one table (one set-properties each, the
client's table kept between them), ``--ops`` loads of that table. Recorded: each
operation's time at the client, and the node's CPU (user + system, from /proc) per
phase. A warm-up round is not recorded. The loads write nothing and no change to the
write path touches them: their ratio shows the setup's own bias.

Run from the repo root: ``.venv/bin/python -m bench.side_by_side [--base REV]
[--rounds N] [--ops N]``; the summary is also written to ``.bench/side_by_side.json``
(``--out``).
Never asserts; exit 1 on an error, 2 on a base that cannot be checked out.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField, StringType

from bench.load import Latency, Progress
from bench.report import command_line, machine, ratio, table, write_json
from harness.node import NodeProcess
from harness.process import cpu_seconds

REPO_ROOT = Path(__file__).resolve().parents[1]
OUT_PATH = REPO_ROOT / ".bench" / "side_by_side.json"
PHASES = ("create", "step", "load")
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "s", StringType(), required=False),
)


@dataclass
class Side:
    """One tree's node, its client and what was measured against it."""

    name: str
    tree: Path
    revision: str
    env: dict[str, str]  # the node's variables besides this process's
    node: NodeProcess
    catalog: RestCatalog
    hot: Table
    created: int = 0
    steps: int = 0
    times: dict[str, list[float]] = field(default_factory=lambda: {p: [] for p in PHASES})
    cpu: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))

    def operation(self, phase: str) -> Callable[[], object]:
        if phase == "create":
            return self._create
        if phase == "step":
            return self._step
        return lambda: self.catalog.load_table(("bench", "hot"))

    def _create(self) -> object:
        self.created += 1
        return self.catalog.create_table(("bench", f"t{self.created}"), SCHEMA)

    def _step(self) -> object:
        self.steps += 1
        with self.hot.transaction() as tx:
            tx.set_properties(step=str(self.steps))
        return None


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench.side_by_side", description=__doc__.split("\n")[0])
    parser.add_argument("--base", default="HEAD~1", help="revision of the base tree")
    parser.add_argument("--base-tree", type=Path, help="an existing tree instead of --base")
    parser.add_argument("--rounds", type=int, default=10, help="recorded rounds (default 10)")
    parser.add_argument("--ops", type=int, default=50, help="operations per phase and round")
    parser.add_argument("--out", type=Path, default=OUT_PATH, help="the summary's JSON file")
    for flag, side in (("--env", "this checkout's"), ("--base-env", "the base's")):
        parser.add_argument(
            flag, action="append", default=[], metavar="NAME=VALUE", help=f"for {side} node"
        )
    args = parser.parse_args(argv)
    for flag in ("env", "base_env"):
        pairs = [item.partition("=") for item in getattr(args, flag)]
        if any(not name or not sep for name, sep, _ in pairs):
            parser.error(f"--{flag.replace('_', '-')} takes NAME=VALUE")
        setattr(args, flag, {name: value for name, _, value in pairs})
    if args.rounds < 1 or args.ops < 1:
        parser.error("--rounds and --ops must be at least 1")
    if args.base_tree is not None and not (args.base_tree / "metastore" / "__main__.py").is_file():
        parser.error(f"--base-tree {args.base_tree} is not a source tree of this service")
    return args


def revision_of(tree: Path) -> str:
    """The tree's commit, marked when it has uncommitted changes to tracked files."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(tree), *args], capture_output=True, text=True, check=False
        )
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD") or "(not a git tree)"
    return commit + (" + changes" if git("status", "--porcelain", "--untracked-files=no") else "")


@contextmanager
def worktree(revision: str, parent: Path) -> Iterator[Path]:
    """A detached git worktree of ``revision``, removed when the block ends."""
    path = parent / "base"
    made = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "worktree", "add", "--detach", str(path), revision],
        capture_output=True,
        text=True,
        check=False,
    )
    if made.returncode != 0:
        print(f"cannot check out {revision!r}: {made.stderr.strip()}", file=sys.stderr)
        raise SystemExit(2)
    try:
        yield path
    finally:
        subprocess.run(
            ["git", "-C", str(REPO_ROOT), "worktree", "remove", "--force", str(path)],
            capture_output=True,
            check=False,
        )


def start_side(name: str, tree: Path, work: Path, env: dict[str, str]) -> Side:
    data = work / "nodes" / name / "data"
    data.parent.mkdir(parents=True)
    node = NodeProcess(data, env={**env, "PYTHONPATH": str(tree)}, cwd=tree).start(120)
    catalog = RestCatalog(name, uri=node.url)
    catalog.create_namespace("bench")
    hot = catalog.create_table(("bench", "hot"), SCHEMA)
    return Side(name, tree, revision_of(tree), env, node, catalog, hot)


def run_round(side: Side, ops: int, record: bool, progress: Progress) -> None:
    for phase in PHASES:
        operation = side.operation(phase)
        before = cpu_seconds(side.node.pid)
        for _ in range(ops):
            started = time.perf_counter()
            operation()
            elapsed = time.perf_counter() - started
            if record:
                side.times[phase].append(elapsed)
            progress.done += 1
        if record:
            side.cpu[phase] += cpu_seconds(side.node.pid) - before


def measure(sides: Sequence[Side], rounds: int, ops: int) -> None:
    total = (rounds + 1) * len(sides) * len(PHASES) * ops
    with Progress("operations", total) as progress:
        for number in range(rounds + 1):  # round 0: the warm-up
            order = sides if number % 2 == 0 else list(reversed(sides))
            for side in order:
                run_round(side, ops, record=number > 0, progress=progress)


def summary(base: Side, this: Side, rounds: int, ops: int) -> dict[str, Any]:
    count = rounds * ops
    phases: dict[str, Any] = {}
    for phase in PHASES:
        a, b = Latency.of(base.times[phase]), Latency.of(this.times[phase])
        phases[phase] = {
            "base": {"p50_ms": a.p50, "p99_ms": a.p99, "mean_ms": a.mean},
            "this": {"p50_ms": b.p50, "p99_ms": b.p99, "mean_ms": b.mean},
            "node_cpu_ms": {
                "base": base.cpu[phase] / count * 1000,
                "this": this.cpu[phase] / count * 1000,
            },
        }
    return {
        "base": base.revision,
        "this": this.revision,
        "base_env": base.env,
        "this_env": this.env,
        "rounds": rounds,
        "ops_per_phase_and_round": ops,
        "phases": phases,
    }


def print_summary(report: dict[str, Any]) -> None:
    rows = []
    for phase, figures in report["phases"].items():
        a, b, cpu = figures["base"], figures["this"], figures["node_cpu_ms"]
        rows.append(
            [
                phase,
                f"{a['p50_ms']:.3f} / {b['p50_ms']:.3f}",
                ratio(b["p50_ms"], a["p50_ms"]),
                f"{a['p99_ms']:.3f} / {b['p99_ms']:.3f}",
                ratio(b["p99_ms"], a["p99_ms"]),
                f"{cpu['base']:.3f} / {cpu['this']:.3f}",
                ratio(cpu["this"], cpu["base"]),
            ]
        )
    headers = ["phase", "p50 ms base / this", "÷", "p99 ms", "÷", "node CPU ms per op", "÷"]
    shown = {
        side: report[side] + "".join(f" {k}={v}" for k, v in report[f"{side}_env"].items())
        for side in ("base", "this")
    }
    print(f"\nbase {shown['base']}, this {shown['this']}")
    print(table(headers, rows))
    print("(loads write nothing: their ratio is the setup's own bias)")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    print(f"command: {command_line('bench.side_by_side')}")
    here = machine()
    print(f"machine: {here['nproc']} cpus, python {here['python']}")
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="side-by-side-")))
        base_tree = args.base_tree or stack.enter_context(worktree(args.base, work))
        sides: list[Side] = []
        try:
            trees = (("base", base_tree.resolve(), args.base_env), ("this", REPO_ROOT, args.env))
            for name, tree, env in trees:
                sides.append(start_side(name, tree, work, env))
                print(f"{name}: {sides[-1].revision} at {tree}, node {sides[-1].node.url}")
            measure(sides, args.rounds, args.ops)
        except Exception as exc:  # a node that died, an answer that was not 2xx
            print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        finally:
            for side in sides:
                side.node.stop()
        report = summary(sides[0], sides[1], args.rounds, args.ops)
    print_summary(report)
    write_json(args.out, {"command": command_line("bench.side_by_side"), **report})
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
