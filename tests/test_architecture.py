"""The shape of ``metastore/`` and ``workers/``, checked from their source.

Three rules keep the layers easy to change: every import runs down the layer order
(``LAYERS``: a package can be understood, and tested, with only the layers below
it), the import graph has no cycle, and no module reaches into another's private
names (``_name`` is a promise that only its own module uses it). All are read from
the syntax tree, so they hold for code paths no test runs.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("metastore", "workers")

# Lowest first. A module belongs to the layer of the longest package named here that
# holds it, and imports only from its own layer and those below.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundation", ("metastore", "metastore.errors")),
    ("utilities", ("metastore.util",)),
    ("data model", ("metastore.model",)),
    ("persistence", ("metastore.persistence",)),
    ("commit engine", ("metastore.engine",)),
    ("catalog service and storage", ("metastore.catalog", "metastore.storage")),
    ("security and cluster", ("metastore.security", "metastore.cluster")),
    ("partition owners", ("workers",)),
    ("Iceberg tables and views", ("metastore.iceberg",)),
    ("configuration", ("metastore.config",)),
    ("HTTP plumbing", ("metastore.http",)),
    (
        "APIs and pipeline",
        ("metastore.native", "metastore.iceberg.routes", "metastore.console", "metastore.pipeline"),
    ),
    ("node and command line", ("metastore.node", "metastore.__main__")),
)


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _resolve(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base.pop()
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import, those for the type checker included: a module that needs another's
    types to be understood depends on it as much as one that calls it."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        for node in _imports(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = _resolve(name, node, path.name == "__init__.py")
                targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
            for target in targets:
                if target in modules and target != name:
                    graph[name].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _parent_package(name: str) -> str:
    return name.rsplit(".", 1)[0] if "." in name else name


def layer_of(module: str) -> int:
    """The index in ``LAYERS`` of the longest package (or module) named there that
    holds ``module``."""
    best, best_len = -1, -1
    for rank, (_, packages) in enumerate(LAYERS):
        for package in packages:
            if (module == package or module.startswith(package + ".")) and len(package) > best_len:
                best, best_len = rank, len(package)
    if best < 0:
        raise AssertionError(f"{module} is in no layer of LAYERS")
    return best


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for name, targets in sorted(graph.items()):
        for target in sorted(targets):
            if layer_of(target) > layer_of(name):
                found.append(
                    f"{name} ({LAYERS[layer_of(name)][0]}) imports {target}"
                    f" ({LAYERS[layer_of(target)][0]})"
                )
    return found


def test_every_import_runs_down_the_layers() -> None:
    assert upward_imports(_graph()) == []


def test_the_import_graph_has_no_cycle() -> None:
    # A package's __init__ re-exporting its own modules is not a cycle of concepts.
    graph = {
        name: {t for t in targets if not (name == _parent_package(t) and name in _modules())}
        for name, targets in _graph().items()
    }
    assert _cycles(graph) == []


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _foreign_names(tree: ast.Module, modules: dict[str, Path]) -> set[str]:
    """Names a module binds by importing from outside the project (libraries)."""
    names: set[str] = set()
    for node in _imports(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif node.level == 0 and (node.module or "").split(".")[0] not in PACKAGES:
            names |= {a.asname or a.name for a in node.names}
    return names


def test_no_module_reaches_into_another_modules_private_names() -> None:
    """Our own private names only: a library's (pinned, and each use says why) is its
    own maintainers' promise to break, not a layer of ours leaking."""
    modules = _modules()
    reaches: list[str] = []
    for path in modules.values():
        tree = ast.parse(path.read_text(), str(path))
        foreign = _foreign_names(tree, modules) | {"self", "cls"}
        for node in ast.walk(tree):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.ImportFrom):
                if node.level == 0 and (node.module or "").split(".")[0] not in PACKAGES:
                    continue
                reaches += [
                    f"{where}: imports {alias.name}" for alias in node.names if _private(alias.name)
                ]
            elif isinstance(node, ast.Attribute) and _private(node.attr):
                owner = node.value
                if isinstance(owner, ast.Name) and owner.id in foreign:
                    continue
                reaches.append(f"{where}: {ast.unparse(node)}")
    assert reaches == []


def test_the_rules_see_the_code() -> None:
    """Guards the checks above: they read the real tree and would see a cycle."""
    graph = _graph()
    assert len(graph) > 100
    assert "metastore.persistence.base" in graph["metastore.persistence.rocksdb"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]
    assert layer_of("metastore.iceberg.routes.table_routes") > layer_of("metastore.iceberg.tables")
    assert upward_imports({"metastore.model.keys": {"metastore.engine.commits"}}) == [
        "metastore.model.keys (data model) imports metastore.engine.commits (commit engine)"
    ]


def test_no_two_modules_share_a_name() -> None:
    """A name says what a module holds, once: ``store`` beside ``storage``, or two
    ``config`` modules, make a reader guess which is meant."""
    seen: dict[str, list[str]] = {}
    for name in _modules():
        base = name.rsplit(".", 1)[-1]
        if not (ROOT / name.replace(".", "/")).is_dir():  # a package's own name is its folder
            seen.setdefault(base, []).append(name)
    assert {base: names for base, names in seen.items() if len(names) > 1} == {}


def test_no_module_is_over_600_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for path in _modules().values()
        if (n := len(path.read_text().splitlines())) > 600
    }
    assert long == {}
