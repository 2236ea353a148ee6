"""Numbering of a table's metadata files, as every Iceberg client numbers them."""

from __future__ import annotations

import pytest

from metastore.iceberg.files import metadata_version

UUID = "6c97e413-d51b-4538-ac70-12fe2a85cb83"


@pytest.mark.parametrize(
    ("location", "version"),
    [
        (f"s3://bucket/db/t/metadata/00001-{UUID}.metadata.json", 1),
        (f"file:///w/t/metadata/00012-{UUID}.gz.metadata.json", 12),
        (f"/w/t/metadata/123456-{UUID}.metadata.json", 123456),
        ("/w/t/metadata/v1.metadata.json", -1),  # another engine's naming
        ("/w/t/metadata/00001-not-a-uuid.metadata.json", -1),
        (f"/w/t/metadata/00001-{UUID}.json", -1),
    ],
)
def test_metadata_version(location: str, version: int) -> None:
    assert metadata_version(location) == version
