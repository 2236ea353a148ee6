"""The changelog topics: the spec file, idempotent creation, and a check that fails loudly.

Runs on the session broker (Tansu, or the Kafka named by METASTORE_TEST_KAFKA),
each test under its own topic prefix. Topics "created by hand" are made with the
AdminClient directly, the way an operator or a broker's auto-creation would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    NewTopic,
)

from harness.kafka import wait_listed
from metastore.cluster import topics
from metastore.cluster.cluster_config import ClusterConfig
from metastore.util import resources

TIMEOUT = 10.0


@pytest.fixture
def config(kafka_bootstrap: str, topic_prefix: str) -> ClusterConfig:
    return ClusterConfig(bootstrap=kafka_bootstrap, prefix=topic_prefix)


def make_topic(config: ClusterConfig, name: str, partitions: int, **configs: str) -> None:
    admin = AdminClient({**config.common(), "log_level": 0})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=configs)],
        operation_timeout=TIMEOUT,
        request_timeout=TIMEOUT,
    )
    futures[name].result(timeout=TIMEOUT)
    wait_listed(admin, [name])


def listed(config: ClusterConfig) -> set[str]:
    admin = AdminClient({**config.common(), "log_level": 0})
    return set(admin.list_topics(timeout=TIMEOUT).topics)


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "metastore", "topics", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )


# -- the spec file ----------------------------------------------------------------


def test_spec_file_is_found_via_resources_and_is_compacted() -> None:
    path = resources.topics_dir() / "metastore.json"
    assert path.is_file()
    specs = topics.load_specs()
    assert [spec.role for spec in specs] == ["refs", "objects"]
    assert topics.load_specs(path) == specs
    for spec in specs:
        assert spec.config["cleanup.policy"] == "compact"
        assert int(spec.config["max.message.bytes"]) >= 1024 * 1024 + 1024
        assert int(spec.config["min.compaction.lag.ms"]) > 0
        assert "min.insync.replicas" not in spec.config  # derived from the replication factor


def _spec_file(tmp_path: Path, **changes: object) -> Path:
    document = json.loads((resources.topics_dir() / "metastore.json").read_text())
    for key, value in changes.items():
        config = document["topics"][1]["config"]
        name = key.replace("_", ".")
        if value is None:
            config.pop(name, None)
        else:
            config[name] = value
    path = tmp_path / "metastore.json"
    path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"cleanup_policy": "delete"}, "cleanup.policy must be exactly"),
        ({"cleanup_policy": "compact,delete"}, "cleanup.policy must be exactly"),
        ({"cleanup_policy": None}, "cleanup.policy must be exactly"),
        ({"retention_ms": "604800000"}, "retention.ms"),
        ({"retention_bytes": "1073741824"}, "retention.bytes"),
        ({"max_message_bytes": "1048576"}, "max.message.bytes"),
        ({"min_insync_replicas": "2"}, "derived from the replication factor"),
        ({"unclean_leader_election_enable": "true"}, "unclean"),
        ({"max_message_bytes": 2097152}, "string values"),
    ],
)
def test_spec_file_rejects_configs_that_lose_data(
    tmp_path: Path, changes: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        topics.load_specs(_spec_file(tmp_path, **changes))


def test_spec_file_needs_both_roles_and_no_partition_counts(tmp_path: Path) -> None:
    document = json.loads((resources.topics_dir() / "metastore.json").read_text())
    path = tmp_path / "metastore.json"
    path.write_text(json.dumps({"topics": document["topics"][:1]}))
    with pytest.raises(ValueError, match="one topic per role"):
        topics.load_specs(path)
    document["topics"][0]["partitions"] = 12
    path.write_text(json.dumps(document))
    with pytest.raises(ValueError, match="partitions and replication come from"):
        topics.load_specs(path)
    del document["topics"][0]["partitions"]
    document["topics"][0]["suffix"] = "references"
    path.write_text(json.dumps(document))
    with pytest.raises(ValueError, match="suffix"):
        topics.load_specs(path)


# -- the broker -------------------------------------------------------------------


def test_create_twice_is_idempotent(config: ClusterConfig) -> None:
    first = topics.create(config, timeout=TIMEOUT)
    assert first.created == [config.refs_topic, config.objects_topic]
    assert first.existing == []
    second = topics.create(config, timeout=TIMEOUT)
    assert second.created == []
    assert sorted(second.existing) == sorted([config.refs_topic, config.objects_topic])
    assert topics.check(config, timeout=TIMEOUT) == []
    topics.ensure_safe(config, timeout=TIMEOUT)


def test_describe_shows_compaction_partitions_and_configs(config: ClusterConfig) -> None:
    topics.create(config, timeout=TIMEOUT)
    described = topics.describe(config, timeout=TIMEOUT)
    json.dumps(described)  # the CLI prints it
    assert described["expected"] == {"partitions": 12, "replication_factor": 1}
    assert set(described["topics"]) == {config.refs_topic, config.objects_topic}
    for name, spec in zip(
        (config.refs_topic, config.objects_topic), topics.load_specs(), strict=True
    ):
        topic = described["topics"][name]
        assert topic["role"] == spec.role
        assert topic["exists"] is True
        assert topic["partitions"] == 12
        assert topic["replication_factor"] == 1
        assert topic["configs"]["cleanup.policy"] == "compact"
        assert topic["configs"]["min.insync.replicas"] == "1"
        for key, value in spec.config.items():
            assert topic["configs"][key] == value


def test_check_reports_missing_topics_without_creating_them(config: ClusterConfig) -> None:
    problems = topics.check(config, timeout=TIMEOUT)
    assert len(problems) == 2
    assert all("missing" in p and "metastore topics create" in p for p in problems)
    assert config.refs_topic in problems[0]
    assert config.objects_topic in problems[1]
    # Brokers auto-create a topic a metadata request names; check must not.
    assert {config.refs_topic, config.objects_topic}.isdisjoint(listed(config))
    described = topics.describe(config, timeout=TIMEOUT)
    assert described["topics"][config.refs_topic] == {"role": "refs", "exists": False}


def test_check_reports_a_delete_policy(config: ClusterConfig) -> None:
    make_topic(config, config.refs_topic, 12, **{"cleanup.policy": "delete"})
    report = topics.create(config, timeout=TIMEOUT)
    assert report.existing == [config.refs_topic]
    assert report.created == [config.objects_topic]
    problems = topics.check(config, timeout=TIMEOUT)
    policy = [p for p in problems if "cleanup.policy" in p]
    assert len(policy) == 1
    assert "cleanup.policy=delete" in policy[0]
    assert (
        f"kafka-configs --bootstrap-server {config.bootstrap} --alter --entity-type topics "
        f"--entity-name {config.refs_topic} --add-config cleanup.policy=compact"
    ) in policy[0]


def test_check_reports_compact_delete_as_unsafe(config: ClusterConfig) -> None:
    make_topic(config, config.objects_topic, 12, **{"cleanup.policy": "compact,delete"})
    topics.create(config, timeout=TIMEOUT)
    problems = topics.check(config, timeout=TIMEOUT)
    assert any(config.objects_topic in p and "cleanup.policy=compact,delete" in p for p in problems)


def test_check_treats_an_unreported_policy_as_the_delete_default(config: ClusterConfig) -> None:
    make_topic(config, config.refs_topic, 12)  # no configs: the broker's defaults
    topics.create(config, timeout=TIMEOUT)
    problems = [p for p in topics.check(config, timeout=TIMEOUT) if config.refs_topic in p]
    assert any(
        "cleanup.policy" in p and "--add-config cleanup.policy=compact" in p for p in problems
    )
    assert not [p for p in topics.check(config, timeout=TIMEOUT) if config.objects_topic in p]


def test_check_reports_an_auto_created_partition_count(config: ClusterConfig) -> None:
    # What a producer's metadata request leaves behind on a broker that auto-creates.
    make_topic(config, config.refs_topic, 4, **topics.load_specs()[0].configs_for(config))
    topics.create(config, timeout=TIMEOUT)  # finds refs, creates objects with 12
    problems = topics.check(config, timeout=TIMEOUT)
    assert len(problems) == 2, problems
    assert f"topic {config.refs_topic} has 4 partitions" in problems[0]
    assert "configured for 12" in problems[0]
    assert f"--delete --topic {config.refs_topic}" in problems[0]
    assert f"{config.refs_topic} has 4 partitions but {config.objects_topic} has 12" in problems[1]


def test_check_reports_a_replication_factor_lower_than_asked(config: ClusterConfig) -> None:
    topics.create(config, timeout=TIMEOUT)
    asked = ClusterConfig(config.bootstrap, config.prefix, replication_factor=3)
    problems = topics.check(asked, timeout=TIMEOUT)
    replication = [p for p in problems if "replication factor 1, asked for 3" in p]
    assert len(replication) == 2, problems


def test_ensure_safe_raises_an_actionable_error(config: ClusterConfig) -> None:
    make_topic(config, config.refs_topic, 12, **{"cleanup.policy": "delete"})
    with pytest.raises(topics.UnsafeTopics) as raised:
        topics.ensure_safe(config, timeout=TIMEOUT)
    message = str(raised.value)
    assert config.bootstrap in message
    assert f"--entity-name {config.refs_topic} --add-config cleanup.policy=compact" in message
    assert f"{config.objects_topic} (objects table) is missing" in message
    # Kafka's default max.message.bytes (unreported here, so assumed) is too small
    assert "--add-config max.message.bytes=2097152" in message
    assert len(raised.value.problems) == 3


def test_unreachable_broker_is_a_topics_error() -> None:
    with pytest.raises(topics.TopicsError, match="list topics"):
        topics.check(ClusterConfig("127.0.0.1:1"), timeout=1.0)


# -- the command line ---------------------------------------------------------------


def test_cli_create_check_describe(config: ClusterConfig) -> None:
    flags = ("--kafka", config.bootstrap, "--prefix", config.prefix)
    missing = run_cli("check", *flags)
    assert missing.returncode == 1, missing.stderr
    assert "missing" in missing.stderr

    created = run_cli("create", *flags)
    assert created.returncode == 0, created.stderr
    assert f"created {config.refs_topic}" in created.stdout
    assert f"created {config.objects_topic}" in created.stdout

    again = run_cli("create", *flags)
    assert again.returncode == 0, again.stderr
    assert f"found {config.refs_topic}" in again.stdout
    assert "\ncreated" not in "\n" + again.stdout

    # env vars stand in for the flags
    env = {"METASTORE_KAFKA": config.bootstrap, "METASTORE_TOPIC_PREFIX": config.prefix}
    assert run_cli("check", env=env).returncode == 0

    described = run_cli("describe", *flags)
    assert described.returncode == 0, described.stderr
    topic = json.loads(described.stdout)["topics"][config.refs_topic]
    assert (topic["partitions"], topic["configs"]["cleanup.policy"]) == (12, "compact")

    wrong = run_cli("check", *flags, "--partitions", "6")
    assert wrong.returncode == 1
    assert "configured for 6" in wrong.stderr


def test_cli_create_fails_on_unsafe_existing_topics(config: ClusterConfig) -> None:
    make_topic(config, config.refs_topic, 12, **{"cleanup.policy": "delete"})
    result = run_cli("create", "--kafka", config.bootstrap, "--prefix", config.prefix)
    assert result.returncode == 1
    assert f"found {config.refs_topic}" in result.stdout
    assert f"created {config.objects_topic}" in result.stdout
    assert "--add-config cleanup.policy=compact" in result.stderr


def test_cli_needs_a_broker() -> None:
    env = {k: v for k, v in os.environ.items() if k != "METASTORE_KAFKA"}
    result = subprocess.run(
        [sys.executable, "-m", "metastore", "topics", "check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert result.returncode == 2
    assert "--kafka" in result.stderr
