"""The adapter that runs PyIceberg's integration tests: what it takes from their sdist
and which tests it recognizes as reading a table their Spark script provisions."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.pyiceberg_it.plugin import provisioned_patterns
from harness.pyiceberg_it.source import SourceError, check, wanted

SCRIPT = """
spark.sql(f"CREATE OR REPLACE TABLE {catalog_name}.default.test_limit as SELECT 1")
for format_version in [2, 3]:
    identifier = f"{catalog_name}.default.test_positional_mor_deletes_v{format_version}"
for table_name, partition in [("test_partitioned_by_years", "years(dt)")]:
    pass
"""


@pytest.fixture
def patterns(tmp_path: Path) -> list[re.Pattern[str]]:
    script = tmp_path / "provision.py"
    script.write_text(SCRIPT)
    return provisioned_patterns(script)


@pytest.mark.parametrize(
    "source",
    [
        'catalog.load_table("default.test_limit")',
        'catalog.load_table(f"default.test_positional_mor_deletes_v{format_version}")',
        '@pytest.mark.parametrize("name", [("test_partitioned_by_years", "dt >= 1")])',
    ],
)
def test_a_provisioned_table_is_recognized(patterns: list[re.Pattern[str]], source: str) -> None:
    assert any(p.search(source) for p in patterns)


@pytest.mark.parametrize(
    "source",
    [
        'session_catalog.create_table("default.test_limited", schema)',
        "def test_limit(catalog):  # a test's name is not a table",
        'identifier = "default.arrow_table_v1_with_null"',
    ],
)
def test_other_tables_are_not(patterns: list[re.Pattern[str]], source: str) -> None:
    assert not any(p.search(source) for p in patterns)


def test_only_their_tests_and_provisioning_script_are_taken() -> None:
    assert wanted("pyiceberg-0.12.0/tests/conftest.py")
    assert wanted("pyiceberg-0.12.0/tests/integration/test_writes/utils.py")
    assert wanted("pyiceberg-0.12.0/dev/provision.py")
    assert not wanted("pyiceberg-0.12.0/pyiceberg/__init__.py")  # the installed one is used
    assert not wanted("pyiceberg-0.12.0/tests/catalog/test_rest.py")
    assert not wanted("other/tests/conftest.py")


def test_an_archive_with_another_digest_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "pyiceberg-0.12.0.tar.gz"
    archive.write_bytes(b"not the release")
    with pytest.raises(SourceError, match="expected 19f165d2"):
        check(archive)
