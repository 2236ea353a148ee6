"""Helpers for the Iceberg tests: raw HTTP next to PyIceberg, and table fixtures' data."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType
from pyiceberg.utils.concurrent import ExecutorFactory

from harness.node import NodeProcess
from harness.s3 import KEYS, S3Process

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "region", StringType(), required=False),
)
BY_REGION = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "region"))


def rows(ids: list[int], region: str = "eu") -> pa.Table:
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "region": pa.array([region] * len(ids), pa.string())}
    )


def ns_path(*levels: str) -> str:
    return quote("\x1f".join(levels), safe="")


class Http:
    """Raw calls to one catalog's Iceberg endpoints (for what PyIceberg cannot send)."""

    def __init__(self, url: str, catalog: str) -> None:
        self.url = url
        self.prefix = f"{url}/v1/{catalog}"
        self.catalog = catalog

    def call(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        kwargs.setdefault("timeout", 60)
        return requests.request(method, self.prefix + path, **kwargs)

    def table_path(self, namespace: tuple[str, ...], name: str) -> str:
        return f"/namespaces/{ns_path(*namespace)}/tables/{quote(name, safe='')}"

    def head_commit(self) -> str:
        reply = requests.get(
            f"{self.url}/api/v1/tenants/default/catalogs/{self.catalog}/ref", timeout=60
        )
        assert reply.status_code == 200, reply.text
        return str(reply.json()["head"])


def assert_error(reply: requests.Response, status: int, error_type: str | None = None) -> None:
    assert reply.status_code == status, f"{reply.status_code}: {reply.text[:2000]}"
    body = reply.json()
    assert set(body) == {"error"}, body
    assert body["error"]["code"] == status and body["error"]["message"], body
    if error_type is not None:
        assert body["error"]["type"] == error_type, body


@contextmanager
def one_pyiceberg_worker() -> Iterator[None]:
    """PyIceberg's file operations on one worker thread, for remote signing: PyIceberg
    0.12 registers its signer on a filesystem s3fs shares between threads, anew in each
    thread that first uses a FileIO, so a request another thread sends in between
    leaves unsigned (S3 answers 403). With one worker its main thread waits on it."""
    single = ThreadPoolExecutor(max_workers=1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ExecutorFactory, "_instance", single)
        patch.setattr(ExecutorFactory, "_instance_pid", os.getpid())
        try:
            yield
        finally:
            single.shutdown()


SECRETS_ENV = "METASTORE_STORAGE_CREDENTIALS_S3"  # the storage secrets S3Lake's catalogs name
TENANT = "default"


@dataclass(frozen=True)
class S3Lake:
    node: NodeProcess
    s3: S3Process
    bucket: str

    def new_catalog(self) -> tuple[str, str]:
        """A catalog rooted at its own folder of the bucket: (name, root key prefix)."""
        name = f"c{uuid.uuid4().hex[:10]}"
        storage = {
            "type": "s3",
            "root": f"s3://{self.bucket}/{name}",
            "io-properties": self.s3.io_properties(),
            "credentials": {"env": SECRETS_ENV},
        }
        reply = requests.post(
            f"{self.node.url}/api/v1/tenants/{TENANT}/catalogs",
            json={"name": name, "storage": storage},
            timeout=30,
        )
        assert reply.status_code == 201, reply.text
        return name, name

    def client(self, catalog: str) -> RestCatalog:
        return RestCatalog(
            "s3",
            uri=self.node.url,
            warehouse=catalog,
            **self.s3.io_properties(),
            **KEYS.io_properties(),
        )

    def keys(self, prefix: str) -> set[str]:
        return set(self.s3.keys_in(self.bucket, prefix))
