"""The fixture adapter: PyIceberg's integration tests against a node of ours.

Loaded into their pytest session (``-p harness.pyiceberg_it.plugin``). Their
fixtures expect PyIceberg's docker setup: a REST catalog on ``localhost:8181``, an
S3 store on ``localhost:9000`` (bucket ``warehouse``), a Hive metastore, a Spark
Connect server, and tables a Spark script provisioned. This adapter changes none
of their tests or assertions; it

- starts a node (embedded, free port) and an S3-compatible server (moto, free
  port, bucket ``warehouse``), and sends every REST catalog their fixtures build for
  ``localhost:8181`` to the node and every ``localhost:9000`` endpoint to the S3
  server (the only way to repoint fixtures their test modules define themselves);
- with ``--metastore-warehouse=s3`` gives the node's default catalog an S3
  storage root in that bucket (``s3://warehouse``, as in their setup), else the
  node's own ``file://`` warehouse;
- names the node as the catalog their ``rest_test_catalog`` fixture loads
  (``PYICEBERG_TEST_CATALOG`` and PyIceberg's environment configuration);
- creates the namespace ``default`` their provisioning creates;
- sends the catalogs of a test that says its catalog is configured with ``.`` as the
  namespace separator (it asserts ``_namespace_separator == "."``) to a second node
  started with that setting (``METASTORE_ICEBERG_NAMESPACE_SEPARATOR``), the one
  configuration their REST fixture uses for every test: with it a namespace level
  cannot hold a dot, which their other tests create with the default separator;
- skips, with the reason, every test that uses Spark, Hive or Ray (by the fixtures
  it requests) or reads a table their Spark script provisions (the table names are
  read from that script, ``dev/provision.py``).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import inspect
import json
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from harness.node import NodeProcess
from harness.s3 import KEYS, REGION, S3Process


def _their_tests_package(root: Path) -> None:
    """``tests`` is theirs in their session. Their modules import ``tests.conftest``
    from their ``tests/``, a namespace package; this checkout's own ``tests`` is a
    regular package and on the path too (the editable install puts the checkout
    there for ``metastore`` and ``harness``), and a regular package wins over a
    namespace one wherever it lies on the path. Bound first, theirs is the one found."""
    if not (root / "tests" / "conftest.py").is_file() or "tests" in sys.modules:
        return
    spec = importlib.machinery.ModuleSpec("tests", None, is_package=True)
    spec.submodule_search_locations = [str(root / "tests")]
    sys.modules["tests"] = importlib.util.module_from_spec(spec)


_their_tests_package(Path.cwd())  # their session runs in their source tree (``__main__``)

THEIR_CATALOG = "http://localhost:8181"
THEIR_S3 = "http://localhost:9000"
BUCKET = "warehouse"
# No fsync: what is under test is the API, and their suite commits a few thousand times.
NODE_ARGS = ("--no-fsync",)
CREDENTIALS = "PYICEBERG_IT"  # METASTORE_STORAGE_CREDENTIALS_<this>: the S3 keys, for the node
TENANT_CATALOG = "/api/v1/tenants/default/catalogs/default"
# Their markers (their pytest configuration is not used).
MARKERS = ("unmarked", "s3", "adls", "gcs", "integration", "benchmark", "notebook")
# Fixture name -> why a test that requests it cannot run here.
NEEDS = {
    "spark": "needs Spark (their `spark` fixture, a Spark Connect server)",
    "session_catalog_hive": "needs a Hive metastore (`session_catalog_hive`)",
    "hive_catalog": "needs a Hive metastore (`hive_catalog`)",
    "ray_session": "needs Ray (`ray_session`)",
}
_PROVISIONED = re.compile(r"\b(test_[a-z0-9_]+)(\{)?")
# What a test's own code needs, by what it says (warehouse -> [(text, why)]).
_SAYS: dict[str, list[tuple[str, str]]] = {
    "any": [
        (
            "INSTALL iceberg",
            "needs DuckDB's iceberg extension, which DuckDB downloads from"
            " extensions.duckdb.org (not reachable from CI)",
        )
    ],
    "file": [
        (
            'startswith("s3://',
            "expects s3:// table locations (their warehouse): runs in the S3 warehouse pass",
        )
    ],
    "s3": [],
}


# What a test says that makes it need the node with "." as its namespace separator.
DOTTED_SAYS = '_namespace_separator == "."'
DOTTED_ENV = {"METASTORE_ICEBERG_NAMESPACE_SEPARATOR": "."}


@dataclass
class Deployment:
    """What the adapter started for the session, stopped at its end."""

    root: Path
    node: NodeProcess
    s3: S3Process
    warehouse: str = "file"
    dotted: NodeProcess | None = None  # started for the first test that needs it
    target: str = ""  # the node the catalogs built now talk to (the main one if empty)

    def dotted_node(self) -> NodeProcess:
        if self.dotted is None:
            self.dotted = _start_node(self.root / "dotted", DOTTED_ENV)
            _prepare(self.dotted, self)
        return self.dotted

    def close(self) -> list[str]:
        """Stop them all; the problems found in the nodes' logs (a traceback, a bad exit)."""
        problems: list[str] = []
        try:
            for node in (self.node, self.dotted):
                if node is not None:
                    problems += _stop(node)
        finally:
            self.s3.kill()
        return problems


def _stop(node: NodeProcess) -> list[str]:
    problems: list[str] = []
    code = node.stop() if node.proc is not None else 0
    if code != 0:
        problems.append(f"the node {node.url} stopped with exit code {code}")
    log = node.log_path.read_text(errors="replace")
    if "Traceback" in log:
        problems.append(f"the node {node.url} logged an unhandled error:\n{node.log_tail(80)}")
    return problems


_DEPLOYMENT = pytest.StashKey[Deployment]()
_PATCH = pytest.StashKey[pytest.MonkeyPatch]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--metastore-warehouse",
        choices=("file", "s3"),
        default="file",
        help="the node's warehouse: its own file:// directory or s3://warehouse on moto",
    )
    parser.addoption(
        "--metastore-keep",
        action="store_true",
        help="keep the node's data directory and log after the run (printed at the end)",
    )


def pytest_configure(config: pytest.Config) -> None:
    for marker in MARKERS:
        config.addinivalue_line("markers", f"{marker}: PyIceberg's marker")
    if config.option.collectonly:
        return
    deployment = _deploy(config.getoption("--metastore-warehouse"))
    config.stash[_DEPLOYMENT] = deployment
    patch = pytest.MonkeyPatch()
    config.stash[_PATCH] = patch
    _redirect(patch, deployment)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if _PATCH in config.stash:
        config.stash[_PATCH].undo()
    deployment = config.stash.get(_DEPLOYMENT, None)
    if deployment is None:
        return
    problems = deployment.close()
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    for problem in problems:
        if reporter is not None:
            reporter.write_line(f"metastore: {problem}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if config.getoption("--metastore-keep"):
        if reporter is not None:
            reporter.write_line(f"metastore: data and log kept in {deployment.root}")
    else:
        shutil.rmtree(deployment.root, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before the test's fixtures are built: which node its catalogs talk to."""
    deployment = item.config.stash.get(_DEPLOYMENT, None)
    if deployment is None:
        return
    dotted = any(DOTTED_SAYS in text for text in _texts(item))
    deployment.target = deployment.dotted_node().url if dotted else ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    provisioned = provisioned_patterns(config.rootpath / "dev" / "provision.py")
    says = _SAYS["any"] + _SAYS[config.getoption("--metastore-warehouse")]
    for item in items:
        reason = _skip_reason(item, provisioned, says)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


def _deploy(warehouse: str) -> Deployment:
    root = Path(tempfile.mkdtemp(prefix="metastore-pyiceberg-it-"))
    s3 = S3Process(log_path=root / "moto.log").start()
    try:
        s3.make_bucket(BUCKET)
        node = _start_node(root, {})
    except BaseException:
        s3.kill()
        raise
    deployment = Deployment(root, node, s3, warehouse)
    try:
        _prepare(node, deployment)
    except BaseException:
        deployment.close()
        raise
    return deployment


def _start_node(root: Path, env: dict[str, str]) -> NodeProcess:
    keys = {f"METASTORE_STORAGE_CREDENTIALS_{CREDENTIALS}": json.dumps(KEYS.io_properties())}
    root.mkdir(parents=True, exist_ok=True)
    return NodeProcess(
        root / "data", extra_args=NODE_ARGS, log_path=root / "node.log", env=keys | env
    ).start()


def _prepare(node: NodeProcess, deployment: Deployment) -> None:
    """The warehouse of the run and the namespace their provisioning creates."""
    if deployment.warehouse == "s3":
        _s3_storage(node, deployment.s3)
    reply = requests.post(
        f"{node.url}{TENANT_CATALOG}/namespaces", json={"namespace": ["default"]}, timeout=30
    )
    assert reply.status_code == 201, reply.text


def _s3_storage(node: NodeProcess, s3: S3Process) -> None:
    """The default catalog's tables go to ``s3://warehouse`` (keys passed by reference)."""
    storage: dict[str, Any] = {
        "type": "s3",
        "root": f"s3://{BUCKET}",
        "io-properties": s3.io_properties(),
        "credentials": {"env": f"METASTORE_STORAGE_CREDENTIALS_{CREDENTIALS}"},
    }
    reply = requests.post(
        f"{node.url}{TENANT_CATALOG}/storage", json={"storage": storage}, timeout=30
    )
    assert reply.status_code == 200, reply.text


def _redirect(patch: pytest.MonkeyPatch, deployment: Deployment) -> None:
    """Every REST catalog built for their addresses talks to ours instead."""
    from pyiceberg.catalog.rest import RestCatalog

    original = RestCatalog.__init__

    def init(self: RestCatalog, name: str, **properties: Any) -> None:
        node = deployment.target or deployment.node.url
        replacements = {THEIR_CATALOG: node, THEIR_S3: deployment.s3.endpoint}
        for key, value in properties.items():
            if isinstance(value, str) and value.rstrip("/") in replacements:
                properties[key] = replacements[value.rstrip("/")]
        if properties.get("s3.endpoint") == deployment.s3.endpoint:
            # Their S3 (and its region) is given by their containers' environment; without
            # a region PyArrow asks AWS for the bucket's, which CI cannot reach.
            properties.setdefault("s3.region", REGION)
        original(self, name, **properties)

    patch.setattr(RestCatalog, "__init__", init)
    # Their `rest_test_catalog` runs against whichever catalog PYICEBERG_TEST_CATALOG names
    # in PyIceberg's configuration (from the environment): ours.
    patch.setenv("PYICEBERG_TEST_CATALOG", "metastore")
    patch.setenv("PYICEBERG_CATALOG__METASTORE__TYPE", "rest")
    patch.setenv("PYICEBERG_CATALOG__METASTORE__URI", deployment.node.url)
    patch.setenv("PYICEBERG_CATALOG__METASTORE__S3__ENDPOINT", deployment.s3.endpoint)
    patch.setenv("PYICEBERG_CATALOG__METASTORE__S3__REGION", REGION)
    patch.setenv("AWS_ACCESS_KEY_ID", KEYS.access_key_id)
    patch.setenv("AWS_SECRET_ACCESS_KEY", KEYS.secret_access_key)
    patch.setenv("AWS_REGION", REGION)


def provisioned_patterns(script: Path) -> list[re.Pattern[str]]:
    """A pattern per table their Spark script provisions (an f-string name: its stem)."""
    text = script.read_text()
    patterns = []
    for name, formatted in sorted(set(_PROVISIONED.findall(text))):
        end = "" if formatted else r"(?![A-Za-z0-9_])"
        patterns.append(re.compile(rf"(?:default\.|[\"']){name}{end}"))
    return patterns


def _skip_reason(
    item: pytest.Item, provisioned: list[re.Pattern[str]], says: list[tuple[str, str]]
) -> str | None:
    requested = set(getattr(item, "fixturenames", ())) | set(_lazy_fixtures(item))
    for fixture, reason in NEEDS.items():
        if fixture in requested:
            return reason
    text = "\n".join(_texts(item))
    for pattern in provisioned:
        match = pattern.search(text)
        if match is not None:
            table = match.group(0).lstrip("\"'").removeprefix("default.")
            return f"reads `{table}`, a table their Spark script provisions (dev/provision.py)"
    for needle, reason in says:
        if needle in text:
            return reason
    return None


def _lazy_fixtures(item: pytest.Item) -> Iterator[str]:
    callspec = getattr(item, "callspec", None)
    for value in callspec.params.values() if callspec is not None else ():
        name = getattr(value, "name", None)
        if isinstance(name, str):
            yield name


def _texts(item: pytest.Item) -> Iterator[str]:
    """The sources of the test and of their fixtures it uses, and its parameters."""
    functions = [getattr(item, "function", None)]
    info = getattr(item, "_fixtureinfo", None)
    for definitions in info.name2fixturedefs.values() if info is not None else ():
        functions.extend(definition.func for definition in definitions)
    for function in functions:
        if function is None or not _theirs(function, item.config.rootpath):
            continue
        try:
            source = inspect.getsource(function)
        except (OSError, TypeError):
            continue
        yield source
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        yield repr(list(callspec.params.values()))


def _theirs(function: Any, root: Path) -> bool:
    try:
        return Path(inspect.getfile(function)).resolve().is_relative_to(root.resolve())
    except TypeError:
        return False
