"""Schema-based fuzzing of the Iceberg REST API: no generated request gets a 5xx.

schemathesis reads the Iceberg REST OpenAPI specification (``spec/``) and sends
examples, boundary and invalid values of every operation to a real embedded
node: malformed bodies, wrong types, missing fields, odd content types, odd
path segments. Path parameters are pinned to a catalog, namespace, table and
view that exist, so the generated requests reach the handlers instead of
stopping at a 404. The run is bounded (examples per operation) and seeded, so a
failure reproduces; the report names the exact request.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.view.metadata import SQLViewRepresentation, ViewVersion

from harness.node import NodeProcess

SPEC = Path(__file__).parent / "spec" / "rest-catalog-open-api.yaml"
SEED = 20261122
EXAMPLES = int(os.environ.get("METASTORE_TEST_FUZZ_EXAMPLES", "8"))

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fuzz_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    root = tmp_path_factory.mktemp("fuzz")
    with NodeProcess(root / "data", log_path=root / "node.log") as node:
        catalog = RestCatalog("fuzz", uri=node.url)
        catalog.create_namespace(("fz",))
        table = catalog.create_table(("fz", "t"), pa.schema([("id", pa.int64())]))
        table.append(pa.table({"id": [1, 2, 3]}))
        catalog.create_view(("fz", "v"), pa.schema([("id", pa.int64())]), _version())
        yield node


def _version() -> ViewVersion:
    sql = SQLViewRepresentation(type="sql", sql="SELECT id FROM fz.t", dialect="spark")
    return ViewVersion(
        version_id=1,
        schema_id=0,
        summary={"engine": "fuzz"},
        representations=[sql],
        default_namespace=["fz"],
    )


def _run(node: NodeProcess, tmp_path: Path, pinned: dict[str, str], phases: str) -> None:
    config = tmp_path / "schemathesis.toml"
    config.write_text(
        "[parameters]\n"
        + "".join(f"{json.dumps(k)} = {json.dumps(v)}\n" for k, v in pinned.items())
    )
    command = [
        sys.executable, "-m", "schemathesis.cli", "--no-color", "--config-file", str(config),
        "run", str(SPEC), "--url", node.url,
        "--checks", "not_a_server_error",
        "--max-examples", str(EXAMPLES), "--seed", str(SEED),
        "--workers", "1", "--phases", phases, "--no-shrink",
        "--request-timeout", "30", "--warnings", "off",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    report = result.stdout[-20000:] + result.stderr[-4000:]
    assert result.returncode == 0, f"schemathesis found 5xx answers:\n{report}"
    log = node.log_path.read_text(errors="replace")
    assert "unhandled error" not in log, node.log_tail(120)


def test_no_5xx_for_generated_requests_on_the_catalog(
    fuzz_node: NodeProcess, tmp_path: Path
) -> None:
    _run(fuzz_node, tmp_path, {"path.prefix": "default"}, "examples,coverage,fuzzing")


def test_no_5xx_for_generated_requests_on_existing_entities(
    fuzz_node: NodeProcess, tmp_path: Path
) -> None:
    pinned = {"path.prefix": "default", "path.namespace": "fz", "path.table": "t", "path.view": "v"}
    _run(fuzz_node, tmp_path, pinned, "examples,fuzzing")
