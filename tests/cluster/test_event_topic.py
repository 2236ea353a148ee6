"""Change events published to Kafka in the owners' transactions (``METASTORE_PUBLISH_EVENTS``):
the topic spec, the setting, and a real read_committed consumer on the test broker."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from harness.cluster import Cluster
from harness.process import free_port
from metastore.catalog.consistency import HEADER
from metastore.cluster import topics
from metastore.cluster.cluster_config import ClusterConfig
from metastore.util import resources
from tests.native.support import TIMEOUT, Api, assert_status, entity_ref, unique

# -- the spec and the setting (no broker) -------------------------------------------------


def test_the_events_topic_is_a_log_with_a_finite_retention() -> None:
    spec = topics.load_event_spec()
    assert spec.role == "events" and spec.name(ClusterConfig("b:1", prefix="p")) == "p.events"
    assert spec.config["cleanup.policy"] == "delete"
    assert int(spec.config["retention.ms"]) > 0
    assert [s.role for s in topics.specs_for(ClusterConfig("b:1"))] == ["refs", "objects"]
    published = topics.specs_for(ClusterConfig("b:1", publish_events=True))
    assert [s.role for s in published] == ["refs", "objects", "events"]


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("cleanup.policy", "compact", "cleanup.policy must be exactly"),
        ("retention.ms", "0", "retention.ms"),
        ("max.message.bytes", "1024", "max.message.bytes"),
        ("min.insync.replicas", "2", "derived"),
        ("unclean.leader.election.enable", "true", "unclean"),
    ],
)
def test_the_events_spec_refuses_what_would_lose_or_merge_events(
    tmp_path: Path, key: str, value: str, message: str
) -> None:
    document = json.loads((resources.topics_dir() / "events.json").read_text())
    document["topics"][0]["config"][key] = value
    path = tmp_path / "events.json"
    path.write_text(json.dumps(document))
    with pytest.raises(ValueError, match=message):
        topics.load_event_spec(path)


def test_publishing_events_needs_cluster_mode(tmp_path: Path) -> None:
    env = {**os.environ, "METASTORE_PUBLISH_EVENTS": "on"}
    result = subprocess.run(
        [sys.executable, "-m", "metastore", "serve", "--data-dir", str(tmp_path / "d")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "METASTORE_PUBLISH_EVENTS" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_topics_command_refuses_a_mistyped_events_setting(tmp_path: Path) -> None:
    """A typo must not leave the events topic out: refused before any broker is asked."""
    env = {**os.environ, "METASTORE_PUBLISH_EVENTS": "ture"}
    command = [sys.executable, "-m", "metastore", "topics", "create"]
    command += ["--kafka", f"127.0.0.1:{free_port()}", "--timeout", "1"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        "metastore: invalid configuration: METASTORE_PUBLISH_EVENTS: cannot parse 'ture' as bool\n"
    )


# -- a real consumer on the test broker ------------------------------------------------------


def _serve_refused(bootstrap: str, prefix: str, root: Path) -> subprocess.CompletedProcess[str]:
    """A publishing node started without the events topic: it must refuse to start."""
    env = {
        **os.environ,
        "METASTORE_PUBLISH_EVENTS": "on",
        "METASTORE_WAREHOUSE": (root / "warehouse").as_uri(),
    }
    command = [sys.executable, "-m", "metastore", "serve", "--kafka", bootstrap]
    command += ["--topic-prefix", prefix, "--cluster-id", prefix, "--port", str(free_port())]
    command += ["--data-dir", str(root / "refused")]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def _topics_cli(
    action: str, bootstrap: str, prefix: str, events: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The events topic by ``--events``, or by ``METASTORE_PUBLISH_EVENTS=<events>``."""
    command = [sys.executable, "-m", "metastore", "topics", action]
    command += ["--kafka", bootstrap, "--prefix", prefix] + ([] if events else ["--events"])
    env = {**os.environ, "METASTORE_PUBLISH_EVENTS": events or "off"}
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def _read_until(config: ClusterConfig, partition: int, key: bytes, last: str) -> list[Any]:
    """Every event of the catalog ``key`` in its partition, read_committed, from the start
    up to and including the event with id ``last``."""
    consumer = Consumer(config.consumer(**{"group.id": f"feed-{unique('g')}"}))
    try:
        consumer.assign([TopicPartition(config.events_topic, partition, OFFSET_BEGINNING)])
        events: list[Any] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            if message.key() != key:
                continue  # another catalog of the same partition
            events.append(json.loads(message.value()))
            if events[-1]["id"] == last:
                return events
        raise TimeoutError(f"the event {last} never arrived; read {len(events)}")
    finally:
        consumer.close()


@pytest.mark.slow
async def test_every_committed_change_is_published_once_in_commit_order(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = f"e{os.urandom(5).hex()}"
    cluster = Cluster(
        kafka_bootstrap, prefix, tmp_path / "nodes", size=1, env={"METASTORE_PUBLISH_EVENTS": "on"}
    )
    publishing = ClusterConfig(kafka_bootstrap, prefix=prefix, publish_events=True)
    topics.create(cluster.config)  # the changelog topics only
    missing = topics.check(publishing)
    assert any(publishing.events_topic in p and "missing" in p for p in missing), missing
    refused = await asyncio.to_thread(_serve_refused, kafka_bootstrap, prefix, tmp_path)
    assert refused.returncode == 2 and publishing.events_topic in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    created = await asyncio.to_thread(_topics_cli, "create", kafka_bootstrap, prefix)
    assert created.returncode == 0, created.stderr
    assert f"created {publishing.events_topic}" in created.stdout
    assert f"found {publishing.refs_topic}" in created.stdout
    checked = await asyncio.to_thread(_topics_cli, "check", kafka_bootstrap, prefix, "yes")
    assert checked.returncode == 0 and publishing.events_topic in checked.stdout, checked
    assert topics.check(publishing) == []
    cluster.start()
    try:
        async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
            api = Api(session, cluster.nodes[0].url)
            tenant = unique("t")
            base = f"/api/v1/tenants/{tenant}/catalogs/c"
            token = ""
            for path, body in [
                ("/api/v1/tenants", {"name": tenant}),
                (f"/api/v1/tenants/{tenant}/catalogs", {"name": "c"}),
                (f"{base}/namespaces", {"namespace": ["n"]}),
            ]:
                reply = await api.call(
                    "POST", path, json_body=body, headers={HEADER: token} if token else None
                )
                token = assert_status(reply, 201) and reply.headers[HEADER]

            async def create(worker: int) -> None:
                for i in range(8):
                    body = {"name": f"w{worker}-{i}"}
                    assert_status(await api.post(f"{base}/namespaces/n/tables", body), 201)

            await asyncio.gather(*(create(w) for w in range(6)))  # group-committed batches
            several = {
                "changes": [
                    {"action": "create", "entity": entity_ref("view", "n", f"v{i}")}
                    for i in range(3)
                ]
            }
            assert_status(await api.post(f"{base}/commit", several), 200)
            rename = {
                "source": entity_ref("table", "n", "w0-0"),
                "destination": entity_ref("table", "n", "renamed"),
            }
            assert_status(await api.post(f"{base}/rename", rename), 200, 204)
            assert_status(await api.delete(f"{base}/namespaces/n/tables/renamed"), 204)
            feed: list[Any] = []
            after: dict[str, str] = {}
            while True:
                page = assert_status(await api.get(f"{base}/events", limit=1000, **after), 200)
                feed += page["events"]
                after = {"after": page["next"]}
                if not page["more"]:
                    break
        key = f"{tenant}\x00c".encode()
        partition = cluster.partition(tenant, "c")
        published = await asyncio.to_thread(
            _read_until, cluster.config, partition, key, feed[-1]["id"]
        )
        assert published == feed  # the same events, each once, in commit order
        assert len(feed) == 1 + 1 + 48 + 3 + 1 + 1  # catalog, namespace, tables, views...
        assert [e["operation"] for e in feed[-2:]] == ["rename", "drop"]
    finally:
        cluster.close()
    cluster.logs_without_tracebacks()
