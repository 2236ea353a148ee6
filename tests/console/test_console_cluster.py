"""The web console's node page on a two-node cluster: both nodes, which partitions each
owns (as the view's barriers say), and this node's view lag."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from harness.cluster import Cluster, get_json

STATUS_TIMEOUT_S = 60.0


@pytest.fixture
def cluster(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Cluster]:
    nodes = Cluster(kafka_bootstrap, f"ui{os.urandom(5).hex()}", tmp_path, size=2, partitions=4)
    nodes.start()
    try:
        yield nodes
    finally:
        nodes.close()


def wait_for_owners(url: str, owners: dict[str, list[int]]) -> dict[str, Any]:
    """Until the node's view has applied every owner's barrier (the page shows the view)."""
    deadline = time.monotonic() + STATUS_TIMEOUT_S
    while True:
        status = get_json(url + "/api/v1/admin/cluster")
        seen = {n["url"]: n["partitions"] for n in status["nodes"]}
        if seen == owners or time.monotonic() > deadline:
            assert seen == owners, status
            return dict(status)
        time.sleep(0.1)


@pytest.mark.slow
def test_the_node_page_shows_every_node_and_its_partitions(page: Page, cluster: Cluster) -> None:
    owned = cluster.wait_balanced()  # each node owns its share, as its /health says
    owners = {url: sorted(p) for url, p in zip(cluster.urls, owned, strict=True)}
    wait_for_owners(cluster.urls[0], owners)

    page.goto(cluster.urls[0] + "/#/cluster")
    expect(page.locator("#view-lag")).to_contain_text("records")
    for url, partitions in owners.items():
        row = page.locator("#nodes tbody tr", has_text=url)
        expect(row).to_contain_text(", ".join(str(p) for p in partitions))
    expect(page.locator("#partitions tbody tr")).to_have_count(4)
