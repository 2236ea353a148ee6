"""Kafka connection security (TLS, SASL): the operator's librdkafka properties reach every
Kafka client through ``ClusterConfig.client``, guarantee-breaking ones are refused at
startup, and secret values are never shown.

The test broker (Tansu) speaks plaintext only here (its SASL needs users it cannot be
given in memory mode, its TLS listener did not accept librdkafka), so the real-broker
tests prove that the settings reach the clients by making them fail: a client told to
speak TLS or SASL to a plaintext broker cannot connect, and says so.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from metastore.cluster import topics
from metastore.cluster.cluster_config import (
    PROPERTIES_ENV,
    PROPERTIES_FILE_ENV,
    REFUSED_PROPERTIES,
    ClusterConfig,
    load_properties,
    properties_from_env,
    redacted,
)
from metastore.config.server_config import ServerConfig
from metastore.util.setting_rules import ConfigError

REPO = Path(__file__).resolve().parents[2]
SASL = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "metastore",
    "sasl.password": "pw-never-shown",
    "ssl.ca.location": "/etc/ssl/certs/ca.pem",
    "ssl.key.password": "key-pw-never-shown",
    "sasl.oauthbearer.client.secret": "oidc-never-shown",
}
SECRET_VALUES = ("pw-never-shown", "key-pw-never-shown", "oidc-never-shown")


def secured(properties: dict[str, str] | None = None) -> ClusterConfig:
    return ClusterConfig("127.0.0.1:9092", kafka_properties=properties or SASL)


# -- every client gets the properties -------------------------------------------------


def test_every_client_config_carries_the_security_properties() -> None:
    config = secured()
    built = {
        "admin": config.admin(),
        "owner producer": config.producer(config.transactional_id(3)),
        "view consumer": config.consumer(),
        "membership consumer": config.consumer(**{"group.id": "g", "session.timeout.ms": 6000}),
        "plain client": config.common(),
    }
    for role, conf in built.items():
        for key, value in SASL.items():
            assert conf[key] == value, f"{role} lacks {key}"
        assert conf["bootstrap.servers"] == "127.0.0.1:9092", role
    # the roles' own guarantees are still there
    assert built["owner producer"]["enable.idempotence"] is True
    assert built["view consumer"]["isolation.level"] == "read_committed"
    assert built["view consumer"]["enable.auto.commit"] is False


CLIENT_CLASSES = {"Producer", "Consumer", "AdminClient"}
CONFIG_BUILDERS = {"client", "common", "admin", "producer", "consumer"}
# the test brokers' readiness probes (Tansu, Apache Kafka): brokers the tests start,
# plaintext on loopback by design
EXEMPT = {("harness/broker.py", "AdminClient"), ("harness/kafka.py", "AdminClient")}


def test_every_kafka_client_is_built_from_the_one_config_function() -> None:
    """Each ``Producer(`` / ``Consumer(`` / ``AdminClient(`` in the service, the worker
    and the benchmarks takes a config built by ``ClusterConfig`` (so a new client
    cannot quietly connect without the operator's TLS/SASL settings)."""
    found, bypasses = 0, []
    for folder in ("metastore", "workers", "bench", "harness"):
        for path in sorted((REPO / folder).rglob("*.py")):
            relative = str(path.relative_to(REPO))
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.Call):
                    continue
                name = getattr(node.func, "id", getattr(node.func, "attr", None))
                if name not in CLIENT_CLASSES or (relative, name) in EXEMPT:
                    continue
                found += 1
                arg = node.args[0] if node.args else None
                built = (
                    isinstance(arg, ast.Call)
                    and isinstance(arg.func, ast.Attribute)
                    and arg.func.attr in CONFIG_BUILDERS
                )
                if not built:
                    bypasses.append(f"{relative}:{node.lineno} {ast.unparse(node)[:80]}")
    assert found >= 7, "the scan found too few clients: is it still looking at the code?"
    assert bypasses == [], "Kafka clients built without ClusterConfig.client"


# -- refused and secret properties ------------------------------------------------------


@pytest.mark.parametrize("name", sorted(REFUSED_PROPERTIES))
def test_guarantee_breaking_properties_are_refused(name: str) -> None:
    with pytest.raises(ConfigError, match=f"'{name}' may not be set") as raised:
        load_properties(json.dumps({name: "x"}))
    assert str(raised.value).startswith(f"{PROPERTIES_ENV}: ")
    with pytest.raises(ValueError, match="may not be set"):
        ClusterConfig("b:1", kafka_properties={name: "x"})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1]", "must be a JSON object"),
        ('{"ssl.ca.location": {"nested": 1}}', "must be a JSON object"),
        ("not json", "must be a JSON object"),
        ('{"security.protocol": "TLS"}', "security.protocol='TLS' is not one of"),
        ('{"sasl.mechanism": "MD5"}', "sasl.mechanism='MD5' is not one of"),
        ('{"Enable.Auto.Commit": "true"}', "may not be set"),
    ],
)
def test_bad_properties_are_refused(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_properties(text)


def test_properties_file_java_style(tmp_path: Path) -> None:
    path = tmp_path / "kafka.properties"
    path.write_text(
        "# TLS and SCRAM\n! also a comment\n\nsecurity.protocol=SASL_SSL\n"
        "sasl.mechanism = SCRAM-SHA-256\nsasl.username: metastore\n"
        "sasl.password=p=a:ss\n"
    )
    assert load_properties(path=str(path)) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "metastore",
        "sasl.password": "p=a:ss",
    }
    path.write_text("security.protocol\n")
    with pytest.raises(ConfigError, match="line 1 is not key=value"):
        load_properties(path=str(path))
    path.write_text("group.id=mine\n")
    with pytest.raises(ConfigError, match=f"{PROPERTIES_FILE_ENV}: Kafka property 'group.id'"):
        load_properties(path=str(path))
    with pytest.raises(ConfigError, match="cannot read"):
        load_properties(path=str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="not both"):
        properties_from_env({PROPERTIES_ENV: "{}", PROPERTIES_FILE_ENV: str(path)})


def test_json_values_become_librdkafka_strings() -> None:
    assert load_properties('{"socket.keepalive.enable": true, "socket.timeout.ms": 5000}') == {
        "socket.keepalive.enable": "true",
        "socket.timeout.ms": "5000",
    }


def test_secret_values_are_never_shown() -> None:
    config = secured()
    shown = [repr(config), str(redacted(SASL)), config.connection()]
    server = ServerConfig.load({}, env={PROPERTIES_ENV: json.dumps(SASL)})
    assert server.kafka_client_properties == SASL
    shown.append(json.dumps(server.describe()))
    for text in shown:
        for value in SECRET_VALUES:
            assert value not in text
    assert "SASL_SSL" in repr(config) and "SCRAM-SHA-512" in config.connection()
    assert redacted(SASL)["sasl.password"] == "***"
    assert redacted(SASL)["sasl.username"] == "metastore"


def test_a_refused_property_stops_the_node_with_one_line(tmp_path: Path) -> None:
    env = {**os.environ, PROPERTIES_ENV: '{"isolation.level": "read_uncommitted"}'}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "metastore",
            "serve",
            "--kafka",
            "127.0.0.1:1",
            "--data-dir",
            str(tmp_path / "data"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "'isolation.level' may not be set" in lines[0]


# -- the settings reach real clients (real broker) ---------------------------------------


def _cli(*args: str, properties: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "metastore", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, PROPERTIES_ENV: json.dumps(properties)},
    )


@pytest.mark.parametrize(
    "properties",
    [
        {"security.protocol": "SSL"},
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "u",
            "sasl.password": "never-shown-either",
        },
    ],
    ids=["ssl", "sasl"],
)
def test_topics_check_uses_the_security_settings(
    kafka_bootstrap: str, topic_prefix: str, properties: dict[str, str]
) -> None:
    plain = _cli(
        "topics", "check", "--kafka", kafka_bootstrap, "--prefix", topic_prefix, properties={}
    )
    assert plain.returncode == 1, plain.stderr  # reached the broker: the topics are missing
    done = _cli(
        "topics", "check", "--kafka", kafka_bootstrap, "--prefix", topic_prefix,
        "--timeout", "3", properties=properties,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    message = done.stderr.strip().splitlines()[-1]
    assert message.startswith("metastore: list topics:"), done.stderr
    assert f"security.protocol': '{properties['security.protocol']}'" in message
    assert "never-shown-either" not in done.stderr


def test_a_property_librdkafka_refuses_is_a_clear_error(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    missing_ca = {"security.protocol": "SSL", "ssl.ca.location": str(tmp_path / "no-ca.pem")}
    done = _cli(
        "topics",
        "check",
        "--kafka",
        kafka_bootstrap,
        "--prefix",
        topic_prefix,
        properties=missing_ca,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "metastore: configure the Kafka client:" in done.stderr
    assert "ssl.ca.location" in done.stderr


@pytest.mark.parametrize(
    "properties",
    [
        # The test broker answers a TLS hello with silence, so librdkafka gives up on the
        # connection after socket.connection.setup.timeout.ms (30 s by default; a broker
        # that closes the connection, as Apache Kafka does, fails it at once).
        {"security.protocol": "SSL", "socket.connection.setup.timeout.ms": "3000"},
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "u",
            "sasl.password": "never-shown-either",
        },
    ],
    ids=["ssl", "sasl"],
)
def test_replay_with_the_wrong_security_settings_fails_at_once_with_one_line(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path, properties: dict[str, str]
) -> None:
    """It used to find nothing to read, call that caught up and print the digest of an
    empty view (or, with records pending, wait for its 600 s timeout)."""
    topics.create(ClusterConfig(kafka_bootstrap, prefix=topic_prefix, partitions=2))
    args = (
        "replay", "--kafka", kafka_bootstrap, "--prefix", topic_prefix, "--partitions", "2",
        "--no-progress", "--timeout", "600",
    )  # fmt: skip
    plain = _cli(*args, "--data-dir", str(tmp_path / "plain"), properties={})
    assert plain.returncode == 0 and "replayed 0 records" in plain.stdout, plain.stderr
    done = _cli(*args, "--data-dir", str(tmp_path / "secured"), properties=properties)
    assert done.returncode == 2, done.stdout + done.stderr
    assert not done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("metastore replay: Kafka: "), lines[0]
    assert f"'security.protocol': '{properties['security.protocol']}'" in lines[0]
    assert "never-shown-either" not in done.stderr
