"""Configuration fails closed: every setting the node does not recognise stops it.

The rules are checked on ``ServerConfig.load`` exactly as ``metastore serve``
resolves its settings, and a few representative refusals are checked end to end
on a real ``metastore serve`` process: exit status 2, one line on stderr naming
the setting, no traceback, and never a secret in the message.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from harness.process import free_port
from metastore.config.environment import ENV_PREFIX
from metastore.config.server_config import RANGES, SECRETS, ServerConfig, env_int
from metastore.storage.credentials import Credentials
from metastore.storage.vending import VendingSettings
from metastore.util.setting_rules import ConfigError

SECRET = "correct-horse-battery"  # never to appear in a message

REFUSED_ENV: list[tuple[str, str, str]] = [
    # (variable, value, part of the message)
    ("METASTORE_BROKER_PROFILE", "confluent", "must be one of kafka, tansu"),
    ("METASTORE_BROKER_PROFILE", "", "must be one of kafka, tansu"),
    ("METASTORE_AUTH", "ON", "must be one of on, off, auto"),
    ("METASTORE_AUTH", "true", "must be one of on, off, auto"),
    ("METASTORE_AUTH", "1", "must be one of on, off, auto"),
    ("METASTORE_AUTH", "On ", "must be one of on, off, auto"),
    ("METASTORE_AUTH", "", "must be one of on, off, auto"),
    ("METASTORE_AUTH", "disabled", "must be one of on, off, auto"),
    ("METASTORE_AUTH_CLIENTS", "alice", "entry 1 is not id:secret"),
    ("METASTORE_AUTH_CLIENTS", "alice:", "the secret must be 8-1024 characters"),
    ("METASTORE_AUTH_CLIENTS", "alice:short", "the secret must be 8-1024 characters"),
    ("METASTORE_AUTH_CLIENTS", f":{SECRET}", "entry 1: the client id must be"),
    ("METASTORE_AUTH_CLIENTS", f"al ice:{SECRET}", "entry 1: the client id must be"),
    ("METASTORE_AUTH_CLIENTS", f"-alice:{SECRET}", "entry 1: the client id must be"),
    ("METASTORE_AUTH_CLIENTS", f" alice:{SECRET}", "entry 1: the client id must be"),
    ("METASTORE_AUTH_CLIENTS", f"alice:{SECRET},", "entry 2 is not id:secret"),
    ("METASTORE_AUTH_CLIENTS", f"alice:{SECRET},,bob:{SECRET}", "entry 2 is not id:secret"),
    ("METASTORE_AUTH_CLIENTS", f"alice:{SECRET},alice:{SECRET}x", "'alice' is listed twice"),
    ("METASTORE_AUTH_CLIENTS", f"alice: {SECRET}", "surrounding spaces"),
    ("METASTORE_AUTH_CLIENTS", f"alice:{SECRET}\n", "control characters"),
    ("METASTORE_AUTH_CLIENTS", f"alice:{SECRET}\x01x", "control characters"),
    ("METASTORE_AUTH_CLIENTS", "alice:" + "x" * 1025, "the secret must be 8-1024 characters"),
    ("METASTORE_TOKEN_TTL_SECONDS", "-1", "between 1 and 86400"),
    ("METASTORE_TOKEN_TTL_SECONDS", "0", "between 1 and 86400"),
    ("METASTORE_TOKEN_TTL_SECONDS", "31536000", "between 1 and 86400"),
    ("METASTORE_TOKEN_TTL_SECONDS", "1e3", "cannot parse '1e3' as int"),
    ("METASTORE_TOKEN_FAILURES_PER_CLIENT", "0", "between 1 and"),
    ("METASTORE_TOKEN_FAILURES_PER_ADDRESS", "-3", "between 1 and"),
    ("METASTORE_TOKEN_FAILURE_WINDOW_S", "nan", "cannot parse 'nan' as float"),
    ("METASTORE_TOKEN_FAILURE_WINDOW_S", "0", "between 1 and 86400"),
    ("METASTORE_TOKEN_HASH_THREADS", "0", "between 1 and 64"),
    ("METASTORE_TOKEN_HASH_QUEUE", "-1", "between 0 and"),
    ("METASTORE_WAREHOUSE_IO", "{not json", "must be a JSON object"),
    ("METASTORE_WAREHOUSE_IO", '{"s3.secret-access-key": 1}', "must be a JSON object"),
    ("METASTORE_WAREHOUSE_IO", '["a"]', "must be a JSON object"),
    ("METASTORE_WAREHOUSE", "relative/warehouse", "must be a URI"),
    ("METASTORE_WAREHOUSE", "s3://bucket/../other", "must be a URI"),
    ("METASTORE_WAREHOUSE", "file:///with space", "must be a URI"),
    ("METASTORE_WAREHOUSE", "gs://bucket/warehouse", "must be a file:// or s3:// URI"),
    ("METASTORE_WAREHOUSE", "file:///", "is the whole filesystem"),
    ("METASTORE_WAREHOUSE", "s3://b/wh/a%2Fb", "hides a path separator"),
    ("METASTORE_WAREHOUSE_IO", '{"py-io-impl": "some.FileIO"}', "not an S3 FileIO property"),
    ("METASTORE_WAREHOUSE_IO", '{"s3.retry-strategy-impl": "x.Y"}', "names a class to load"),
    ("METASTORE_WAREHOUSE_CREDENTIALS", "env:X", 'must be {"env": NAME} or {"file": PATH}'),
    ("METASTORE_WAREHOUSE_VENDING", "{not json", "must be a JSON object"),
    (
        "METASTORE_WAREHOUSE_VENDING",
        '{"role-arn": "arn:aws:iam::123456789012:role/r"}',
        "set an s3:// METASTORE_WAREHOUSE",
    ),
    ("METASTORE_WAREHOUSE_CREDENTIALS", '{"env": "HOME"}', "METASTORE_STORAGE_CREDENTIALS_"),
    ("METASTORE_WAREHOUSE_CREDENTIALS", '{"file": "secrets.json"}', "absolute, normalized"),
    ("METASTORE_CREDENTIALS_DIR", "run/secrets", "must be an absolute path"),
    ("METASTORE_STORAGE_ROOTS", "s3://bucket/wh,relative", "is relative"),
    ("METASTORE_STORAGE_ROOTS", "s3://elsewhere", "does not cover the warehouse"),
    ("METASTORE_HOST", "", "must be an IP address or a host name"),
    ("METASTORE_HOST", "not a host", "must be an IP address or a host name"),
    ("METASTORE_HOST", "exa_mple.com", "must be an IP address or a host name"),
    ("METASTORE_PORT", "0", "between 1 and 65535"),
    ("METASTORE_PORT", "65536", "between 1 and 65535"),
    ("METASTORE_PORT", " 8181", "cannot parse ' 8181' as int"),
    ("METASTORE_PORT", "http", "cannot parse 'http' as int"),
    ("METASTORE_FSYNC", "maybe", "cannot parse 'maybe' as bool"),
    ("METASTORE_LOG_LEVEL", "VERBOSE", "must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL"),
    ("METASTORE_LEASE_SECONDS", "nan", "cannot parse 'nan' as float"),
    ("METASTORE_LEASE_SECONDS", "inf", "cannot parse 'inf' as float"),
    ("METASTORE_LEASE_SECONDS", "-1", "between 1 and 86400"),
    ("METASTORE_GC_RECLAIM_S", "0", "between 1 and 86400"),
    ("METASTORE_GC_RECLAIM_S", "nan", "cannot parse 'nan' as float"),
    ("METASTORE_FORWARD_TIMEOUT_S", "-inf", "cannot parse '-inf' as float"),
    ("METASTORE_CONSISTENCY_WAIT_S", "0", "between 0.001 and 3600"),
    ("METASTORE_MAX_BODY_BYTES", "0", "between 1024 and"),
    ("METASTORE_MAX_OBJECT_BYTES", "10", "between 1024 and"),
    ("METASTORE_MAX_CHANGES_PER_COMMIT", "0", "between 1 and 100000"),
    ("METASTORE_CACHE_BYTES", "-5", "between 1048576 and"),
    ("METASTORE_INDEX_STRIPE_BYTES", "2048", "must be >= METASTORE_INDEX_EMBEDDED_BYTES"),
    ("METASTORE_RECENT_HEADS", "-1", "between 0 and 10000"),
    ("METASTORE_PARTITIONS", "0", "between 1 and 10000"),
    ("METASTORE_SESSION_TIMEOUT_MS", "10", "between 1000 and 3600000"),
    ("METASTORE_DEFAULT_TENANT", "-bad", "invalid default tenant name"),
    ("METASTORE_DEFAULT_CATALOG", "a/b", "invalid default catalog name"),
    ("METASTORE_KAFKA", "host:notaport", "must be host:port"),
    ("METASTORE_KAFKA", "a:9092,,b:9092", "must be host:port"),
    ("METASTORE_KAFKA", "a:99999", "must be host:port"),
    ("METASTORE_ADVERTISED_URL", "ftp://node:8181", "must be an http:// or https:// URL"),
    ("METASTORE_ADVERTISED_URL", "http://", "must be an http:// or https:// URL"),
    ("METASTORE_ADVERTISED_URL", "http://node:99999", "must be an http:// or https:// URL"),
    ("METASTORE_ADVERTISED_URL", "http://user:pw@node", "must be an http:// or https:// URL"),
    ("METASTORE_ADVERTISED_URL", "http://[::1", "must be an http:// or https:// URL"),  # unclosed
    ("METASTORE_ADVERTISED_URL", "http://node:0", "must be an http:// or https:// URL"),
    ("METASTORE_TOPIC_PREFIX", "a b", "must be 1-200 of"),
    ("METASTORE_CLUSTER_ID", "", "must be 1-200 of"),
    ("METASTORE_QUOTA_REQUESTS_PER_SECOND", "-1", "between 0 and 1000000"),
    ("METASTORE_QUOTA_REQUESTS_PER_SECOND", "nan", "cannot parse 'nan' as float"),
    ("METASTORE_QUOTA_REQUESTS_PER_SECOND", "inf", "cannot parse 'inf' as float"),
    # other scripts' digits: Python's int and float read them, an operator would not
    ("METASTORE_PORT", "\u0662\u0665\u0663\u0660\u0660", "cannot parse"),  # Arabic-Indic
    ("METASTORE_MAX_CONNECTIONS", "\u0967\u0966\u0966", "cannot parse"),  # Devanagari 100
    ("METASTORE_BODY_TIMEOUT_S", "\uff16\u0660", "cannot parse"),  # fullwidth 6, Arabic 0
    ("METASTORE_PORT", "8_181", "cannot parse"),
    ("METASTORE_PORT", "+", "cannot parse"),
    ("METASTORE_QUOTA_BURST", "0.5", "cannot parse '0.5' as int"),
    ("METASTORE_QUOTA_MAX_TABLES", "-1", "between 0 and"),
    ("METASTORE_QUOTA_MAX_NAMESPACES", "1e6", "cannot parse '1e6' as int"),
    ("METASTORE_QUOTA_MAX_VIEWS", "10000000000000", "between 0 and"),
    ("METASTORE_PIN_CPU", "one", "must be a CPU number or empty (off), got 'one'"),
    ("METASTORE_PIN_CPU", "-1", "must be a CPU number or empty (off)"),
    ("METASTORE_PIN_CPU", " 1", "must be a CPU number or empty (off)"),
    ("METASTORE_PIN_CPU", "0,1", "must be a CPU number or empty (off)"),
    ("METASTORE_PIN_CPU", "\u0661", "must be a CPU number or empty (off)"),  # Arabic-Indic 1
    ("METASTORE_PIN_CPU", str(max(os.sched_getaffinity(0)) + 1), "is not one this node may"),
    # a misspelled name would leave its setting at the default without a word
    ("METASTORE_PIN_CPUS", "1", "is not a setting of this node; did you mean METASTORE_PIN_CPU?"),
    ("METASTORE_AUHT", "on", "is not a setting of this node; did you mean METASTORE_AUTH?"),
    ("METASTORE_AUTH_CLIENT", f"alice:{SECRET}", "did you mean METASTORE_AUTH_CLIENTS?"),
    ("METASTORE_FSYNC_", "off", "did you mean METASTORE_FSYNC?"),
    ("METASTORE_WAREHOUSE_CREDENTIAL", "{}", "did you mean METASTORE_WAREHOUSE_CREDENTIALS?"),
    ("METASTORE_", "1", "is not a setting of this node"),
    ("METASTORE_HOME", "/opt/metastore", "is not a setting of this node"),
]


@pytest.mark.parametrize(("variable", "value", "problem"), REFUSED_ENV)
def test_a_bad_setting_is_refused_naming_its_variable(
    variable: str, value: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        ServerConfig.load({}, env={variable: value})
    message = str(refused.value)
    assert message.startswith(f"{variable}: "), message
    assert problem in message, message
    assert "\n" not in message
    assert SECRET not in message


def test_a_name_close_to_no_setting_gets_no_guess() -> None:
    with pytest.raises(ConfigError) as refused:
        ServerConfig.load({}, env={"METASTORE_HOME": "/opt/metastore"})
    assert str(refused.value) == "METASTORE_HOME: is not a setting of this node"


def test_kubernetes_service_links_are_named_as_such() -> None:
    """A Service named metastore gives every pod METASTORE_PORT=tcp://... and more."""
    links = {
        "METASTORE_SERVICE_HOST": "10.0.0.7",
        "METASTORE_SERVICE_PORT": "8181",
        "METASTORE_PORT_8181_TCP_ADDR": "10.0.0.7",
    }
    for env in ({name: value} for name, value in links.items()):
        with pytest.raises(ConfigError, match="Kubernetes sets it for a Service named metastore"):
            ServerConfig.load({}, env=env)
    with pytest.raises(ConfigError) as refused:
        ServerConfig.load({}, env={"METASTORE_PORT": "tcp://10.0.0.7:8181"})
    assert str(refused.value).startswith("METASTORE_PORT: cannot parse 'tcp://10.0.0.7:8181'")
    assert "enableServiceLinks: false" in str(refused.value)


def test_names_read_by_others_are_not_refused() -> None:
    """The pipeline commands' client credentials, storage credential references (a
    catalog created later may name any) and the test suite's variables share the prefix."""
    env = {
        "METASTORE_TOKEN": "a-token",
        "METASTORE_CREDENTIAL": f"alice:{SECRET}",
        "METASTORE_STORAGE_CREDENTIALS_LAKE": "{}",
        "METASTORE_TEST_KAFKA": "127.0.0.1:9092",
        "METASTORE_PORT": "8282",
        "OTHER_METASTORE_THING": "x",
    }
    assert ServerConfig.load({}, env=env).port == 8282


READS = re.compile(r'(?:\bget\(|getenv\(|^[A-Z_]+ = )"(METASTORE_[A-Z0-9_]*[A-Z0-9])"', re.M)


def test_every_variable_the_tree_reads_passes_the_node() -> None:
    """A variable some part of this repository reads (a command, a job, the harness,
    the tests) may sit in a node's environment: it must not stop the node."""
    root = Path(__file__).resolve().parents[2]
    files = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=root, capture_output=True, text=True, check=True
    ).stdout.split()
    read = {name for f in files for name in READS.findall((root / f).read_text())}
    assert {"METASTORE_TOKEN", "METASTORE_KAFKA", "METASTORE_TEST_KAFKA"} <= read
    for name in sorted(read):
        try:  # the value may be refused; the name must not be
            ServerConfig.load({}, env={name: "x"})
        except ConfigError as refused:
            assert "is not a setting" not in str(refused), refused


HOSTILE_VALUES = [
    *("nan", "inf", "-inf", "-1", "0", "1e400", "0x10", "1_0", "\u0661"),
    *("", " ", "x" * 5000, "{", "[]", "null", "{}", '{"a": 1}', "[1]", ":", "a:b", "a,b,,c"),
    *("s3://", "file://", "file:///", "http://[::1", "::", "../..", "%", "%1F%1F", "on"),
]
CLUSTER_ENV = {
    "METASTORE_KAFKA": "127.0.0.1:9092",
    "METASTORE_WAREHOUSE": "s3://b/w",
    "METASTORE_AUTH": "off",
}


def test_every_setting_refuses_hostile_values_with_a_config_error() -> None:
    """Whatever a variable holds, loading either accepts it or raises ``ConfigError``
    (one line naming it): never another exception, which would be a traceback."""
    for f in fields(ServerConfig):
        variable = ENV_PREFIX + f.name.upper()
        for value in HOSTILE_VALUES:
            for env in ({variable: value}, {**CLUSTER_ENV, variable: value}):
                try:
                    ServerConfig.load({}, env=env)
                except ConfigError as refused:
                    assert "\n" not in str(refused)
                    assert len(str(refused)) < 1000, (variable, str(refused)[:200])


def test_secret_values_are_never_quoted() -> None:
    for variable, value in [
        ("METASTORE_AUTH_CLIENTS", "alice-has-no-colon-secret"),
        ("METASTORE_AUTH_CLIENTS", "alice:tiny"),
        ("METASTORE_WAREHOUSE_IO", '{"s3.secret-access-key": ["hunter2-secret"]}'),
    ]:
        with pytest.raises(ConfigError) as refused:
            ServerConfig.load({}, env={variable: value})
        for part in ("alice-has-no-colon-secret", "tiny", "hunter2-secret"):
            assert part not in str(refused.value)


def test_accepted_settings() -> None:
    env = {
        "METASTORE_AUTH": "on",
        "METASTORE_AUTH_CLIENTS": f"alice:{SECRET},bob.svc-1:{SECRET}:with:colons",
        "METASTORE_HOST": "::1",
        "METASTORE_LOG_LEVEL": "debug",
        "METASTORE_ADVERTISED_URL": "https://node-1.example:8443/",
        "METASTORE_WAREHOUSE": "s3://bucket/warehouse",
        "METASTORE_WAREHOUSE_IO": '{"s3.endpoint": "http://127.0.0.1:9000"}',
        "METASTORE_LEASE_SECONDS": "1.5",
        "METASTORE_FSYNC": "off",
        "METASTORE_QUOTA_REQUESTS_PER_SECOND": "2.5",
        "METASTORE_QUOTA_MAX_TABLES": "10000",
        "METASTORE_PIN_CPU": str(min(os.sched_getaffinity(0))),
    }
    config = ServerConfig.load({}, env=env)
    assert config.pinned_cpu == min(os.sched_getaffinity(0))
    assert ServerConfig().pinned_cpu is None  # off unless set
    assert (config.quota_requests_per_second, config.quota_max_tables) == (2.5, 10_000)
    assert config.clients == {"alice": SECRET, "bob.svc-1": f"{SECRET}:with:colons"}
    assert config.auth_enabled and not config.fsync and config.lease_seconds == 1.5
    assert config.url == "https://node-1.example:8443"
    bootstrap = "[::1]:9092,broker-2,SSL://broker-3.example:9093"
    shared = "file:///mnt/shared/warehouse"  # explicitly set: a path every node mounts
    assert ServerConfig(kafka=bootstrap, auth="off", warehouse=shared).cluster_mode


@pytest.mark.parametrize(
    ("auth", "host", "enabled"),
    [
        ("auto", "127.0.0.1", False),
        ("auto", "127.0.0.2", False),
        ("auto", "localhost", False),
        ("auto", "::1", False),
        ("auto", "0.0.0.0", True),
        ("auto", "::", True),
        ("auto", "10.1.2.3", True),
        ("auto", "node-1", True),
        ("on", "127.0.0.1", True),
        ("off", "0.0.0.0", False),
    ],
)
def test_auth_is_on_unless_off_or_loopback_only(auth: str, host: str, enabled: bool) -> None:
    assert ServerConfig(auth=auth, host=host).auth_enabled is enabled


def test_every_numeric_setting_is_range_checked() -> None:
    """Negative, nan and infinite values of every int or float setting are refused,
    also for settings without a declared range, so a new setting cannot skip it."""
    numeric = [f for f in fields(ServerConfig) if str(f.type) in ("int", "float")]
    assert {f.name for f in numeric} >= set(RANGES)
    for f in numeric:
        bad: list[object] = [-1, True] if f.type == "int" else [-1.0, math.nan, math.inf]
        for value in bad:
            with pytest.raises(ConfigError) as refused:
                ServerConfig(**{f.name: value})  # type: ignore[arg-type]
            assert refused.value.setting == f.name, (f.name, value)


def test_a_node_setting_read_by_a_job_is_parsed_and_bounded_as_the_node_does() -> None:
    variable = "METASTORE_MAX_METADATA_FILE_BYTES"
    assert env_int({}, variable, 7) == 7
    assert env_int({variable: "65536"}, variable, 7) == 65536
    for raw, problem in [
        ("65535", "must be between 65536 and 17179869184, got 65535"),
        ("64MiB", "cannot parse '64MiB' as int"),
        (" 65536", "cannot parse ' 65536' as int"),
    ]:
        with pytest.raises(ConfigError) as refused:
            env_int({variable: raw}, variable, 7)
        assert str(refused.value) == f"{variable}: {problem}"


def test_types_are_checked_when_built_directly() -> None:
    for name, value in [("port", "8181"), ("fsync", 1), ("auth", None), ("host", 127)]:
        with pytest.raises(ConfigError) as refused:
            ServerConfig(**{name: value})  # type: ignore[arg-type]
        assert str(refused.value).startswith(f"{name}: must be ")


def test_flags_are_named_as_flags_and_override_the_environment() -> None:
    with pytest.raises(ConfigError) as refused:
        ServerConfig.load({"port": 0}, env={"METASTORE_PORT": "8181"})
    assert str(refused.value).startswith("--port: ")
    assert ServerConfig.load({"port": 9000}, env={"METASTORE_PORT": "0"}).port == 9000
    with pytest.raises(ConfigError) as refused:
        ServerConfig.load({"host": "0.0.0.0", "kafka": "k:9092", "advertised_url": None}, env={})
    assert str(refused.value).startswith("--advertised-url: not set; required when binding")


# (flags, environment, how the refusal starts): the setting at fault, given or not, and any
# other the message names, as the operator would give it: the flag or variable given, else
# the command's flag, else the variable
UNSET_REFUSALS: list[tuple[dict[str, object], dict[str, str], str]] = [
    ({"kafka": "k:9092"}, {}, "METASTORE_WAREHOUSE: not set"),
    ({}, {"METASTORE_OIDC_AUDIENCE": "metastore"}, "METASTORE_OIDC_ISSUER: not set"),
    ({}, {"METASTORE_TLS_CERT": "/cert.pem"}, "METASTORE_TLS_KEY: not set"),
    (
        {"host": "0.0.0.0", "kafka": "k:9092", "advertised_url": None},
        {"METASTORE_WAREHOUSE": "s3://b/w"},
        "--advertised-url: not set",
    ),
    (
        {},
        {"METASTORE_KAFKA": "k:9092", "METASTORE_WAREHOUSE": "s3://b/w", "METASTORE_AUTH": "on"},
        "METASTORE_CLUSTER_SECRET: not set",
    ),
    (
        {},
        {"METASTORE_INDEX_EMBEDDED_BYTES": "100000"},
        "METASTORE_INDEX_STRIPE_BYTES: must be >= METASTORE_INDEX_EMBEDDED_BYTES",
    ),
    (
        {"restore_from": "/ck", "kafka": None},
        {},
        "--restore-from: applies only in cluster mode (--kafka or METASTORE_KAFKA)",
    ),
]


def fields_named(message: str) -> list[str]:
    """The settings' own names (``data_dir``) in ``message``: no operator ever wrote one."""
    return [
        f.name
        for f in fields(ServerConfig)
        if "_" in f.name and re.search(rf"(?<![\w-]){f.name}(?!\w)", message)
    ]


@pytest.mark.parametrize(("flags", "env", "start"), UNSET_REFUSALS)
def test_a_setting_not_given_is_named_as_the_operator_would_give_it(
    flags: dict[str, object], env: dict[str, str], start: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        ServerConfig.load(flags, env=env)
    message = str(refused.value)
    assert message.startswith(start), message
    assert fields_named(message) == [], message


def test_no_refusal_names_a_setting_by_its_field() -> None:
    for variable, value, _ in REFUSED_ENV:
        with pytest.raises(ConfigError) as refused:
            ServerConfig.load({}, env={variable: value})
        assert fields_named(str(refused.value)) == [], str(refused.value)


def test_a_relative_data_dir_is_made_absolute() -> None:
    """The node reports paths under it (its checkpoints) to jobs run elsewhere."""
    assert ServerConfig.load({"data_dir": "data"}, env={}).data_dir == Path.cwd() / "data"
    loaded = ServerConfig.load({}, env={"METASTORE_DATA_DIR": "x/../d"})
    assert loaded.data_dir == Path.cwd() / "x" / ".." / "d"
    assert ServerConfig().data_dir == Path.cwd() / "data"


def test_describe_never_shows_secrets() -> None:
    config = ServerConfig(
        auth_clients=f"alice:{SECRET}", warehouse_io='{"s3.secret-access-key": "hunter2-x"}'
    )
    shown = repr(config.describe())
    assert SECRET not in shown and "hunter2-x" not in shown
    assert {name for name in SECRETS if config.describe()[name] == "***"} == {
        "auth_clients",
        "warehouse_io",
    }


# --- metastore serve, a real process ------------------------------------------------------


def serve(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    command = [sys.executable, "-m", "metastore", "serve", "--port", str(free_port()), *args]
    if "--data-dir" not in args and "METASTORE_DATA_DIR" not in (env or {}):
        command += ["--data-dir", str(tmp_path / "data")]
    return subprocess.run(
        command,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def assert_refused(done: subprocess.CompletedProcess[str], *parts: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("metastore: invalid configuration: "), lines[0]
    for part in parts:
        assert part in lines[0], lines[0]
    assert "Traceback" not in done.stderr + done.stdout
    assert SECRET not in done.stderr + done.stdout


@pytest.mark.parametrize(
    ("env", "parts"),
    [
        ({"METASTORE_AUTH": "ON"}, ("METASTORE_AUTH: must be one of on, off, auto",)),
        ({"METASTORE_AUTH_CLIENTS": "alice:short"}, ("METASTORE_AUTH_CLIENTS", "'alice'")),
        ({"METASTORE_AUTH_CLIENTS": f"a:{SECRET},a:{SECRET}"}, ("listed twice",)),
        ({"METASTORE_TOKEN_TTL_SECONDS": "-5"}, ("METASTORE_TOKEN_TTL_SECONDS",)),
        ({"METASTORE_LEASE_SECONDS": "nan"}, ("METASTORE_LEASE_SECONDS", "nan")),
        ({"METASTORE_LOG_LEVEL": "LOUD"}, ("METASTORE_LOG_LEVEL",)),
        ({"METASTORE_PIN_CPU": "4096"}, ("METASTORE_PIN_CPU: CPU 4096 is not one",)),
        ({"METASTORE_PIN_CPUS": "1"}, ("METASTORE_PIN_CPUS: is not a setting", "PIN_CPU?")),
        (
            {"METASTORE_WAREHOUSE": "s3://b/wh", "METASTORE_WAREHOUSE_VENDING": '{"role-arn": 1}'},
            ("METASTORE_WAREHOUSE_VENDING", "role-arn must be an IAM role ARN"),
        ),
    ],
)
def test_serve_refuses_a_bad_setting_with_one_line_and_status_2(
    tmp_path: Path, env: dict[str, str], parts: tuple[str, ...]
) -> None:
    assert_refused(serve(tmp_path, env=env), *parts)
    assert not (tmp_path / "data").exists()  # refused before touching anything


def test_serve_names_a_bad_flag(tmp_path: Path) -> None:
    assert_refused(serve(tmp_path, "--host", "not a host"), "--host: ")
    assert_refused(serve(tmp_path, "--partitions", "0"), "--partitions: ")


def test_a_number_flag_in_other_digits_is_refused(tmp_path: Path) -> None:
    """argparse's ``int`` read ``--port '٢٥٣٠٠'`` as 25300."""
    done = serve(tmp_path, "--port", "\u0662\u0665\u0663\u0660\u0660")
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "argument --port: invalid integer value" in done.stderr, done.stderr
    assert not (tmp_path / "data").exists()


def test_serve_refuses_an_unusable_data_dir_naming_it_as_given(tmp_path: Path) -> None:
    occupied = tmp_path / "a-file"
    occupied.write_text("not a directory")
    unusable = str(occupied / "data")
    assert_refused(serve(tmp_path, "--data-dir", unusable), "--data-dir: cannot use")
    env = {"METASTORE_DATA_DIR": unusable}
    assert_refused(serve(tmp_path, env=env), "METASTORE_DATA_DIR: cannot use")


def test_serve_refuses_an_address_it_cannot_listen_on(tmp_path: Path) -> None:
    # 192.0.2.1 (TEST-NET-1) is never an address of this machine: bind fails, nothing is sent
    assert_refused(serve(tmp_path, "--host", "192.0.2.1"), "cannot listen on 192.0.2.1")


# --- storage settings -----------------------------------------------------------------------


def test_cluster_mode_refuses_the_node_local_warehouse() -> None:
    """Each node's default warehouse is under its own data directory: a table created
    through one node could not be committed through another. A cluster needs storage
    every node reaches; set explicitly, a file:// path is taken at its word."""
    with pytest.raises(ConfigError) as refused:
        ServerConfig.load({"kafka": "k:9092"}, env={})
    message = str(refused.value)
    assert "METASTORE_WAREHOUSE" in message and "shared storage" in message, message
    assert "\n" not in message
    for warehouse in ("file:///mnt/shared/warehouse", "s3://bucket/warehouse"):
        config = ServerConfig.load({"kafka": "k:9092"}, env={"METASTORE_WAREHOUSE": warehouse})
        assert config.warehouse_root == warehouse
    assert ServerConfig.load({}, env={}).warehouse == ""  # embedded: the default is fine


def test_the_seeded_storage_names_its_credentials_by_reference() -> None:
    secret = '{"s3.endpoint": "http://minio:9000", "s3.secret-access-key": "hunter2-x"}'
    assert ServerConfig(warehouse_io=secret).seed_credentials == Credentials(
        env="METASTORE_WAREHOUSE_IO"
    )
    assert (
        ServerConfig(warehouse_io='{"s3.endpoint": "http://minio:9000"}').seed_credentials is None
    )
    named = '{"env": "METASTORE_STORAGE_CREDENTIALS_MINIO"}'
    config = ServerConfig(warehouse_credentials=named)
    assert config.seed_credentials == Credentials(env="METASTORE_STORAGE_CREDENTIALS_MINIO")
    with pytest.raises(ConfigError) as refused:
        ServerConfig(warehouse_credentials=named, warehouse_io=secret)
    assert "give credentials in one place" in str(refused.value)
    assert "hunter2-x" not in str(refused.value)


ROLE = "arn:aws:iam::123456789012:role/vending"


@pytest.mark.parametrize(
    ("vending", "problem"),
    [
        ({"role-arn": ROLE, "duration-seconds": 899}, "duration-seconds must be an integer"),
        ({"role-arn": ROLE, "sts-endpoint": "http://10.0.0.1"}, "sts-endpoint must be AWS's STS"),
        ({"role-arn": ROLE, "extra": 1}, "unknown keys ['extra']"),
    ],
)
def test_the_seeded_vending_settings_are_checked(vending: dict[str, object], problem: str) -> None:
    env = {"METASTORE_WAREHOUSE": "s3://b/wh", "METASTORE_WAREHOUSE_VENDING": json.dumps(vending)}
    with pytest.raises(ConfigError) as refused:
        ServerConfig.load({}, env=env)
    message = str(refused.value)
    assert message.startswith("METASTORE_WAREHOUSE_VENDING: "), message
    assert problem in message and "\n" not in message, message


def test_the_seeded_vending_settings() -> None:
    env = {
        "METASTORE_WAREHOUSE": "s3://b/wh",
        "METASTORE_WAREHOUSE_IO": '{"s3.endpoint": "http://minio:9000"}',
        "METASTORE_WAREHOUSE_VENDING": json.dumps(
            {"role-arn": ROLE, "duration-seconds": 900, "sts-endpoint": "http://minio:9000/"}
        ),
    }
    found = ServerConfig.load({}, env=env).seed_vending
    assert found == VendingSettings(ROLE, 900, "http://minio:9000")
    assert ServerConfig.load({}, env={}).seed_vending is None


def test_serve_refuses_a_cluster_node_without_shared_storage(tmp_path: Path) -> None:
    done = serve(tmp_path, "--kafka", "127.0.0.1:1")
    assert_refused(done, "METASTORE_WAREHOUSE", "shared storage")
    assert not (tmp_path / "data").exists()


# --- restoring a cluster node's view from a checkpoint ---------------------------------------


def test_restore_from_needs_cluster_mode_and_a_database_directory(tmp_path: Path) -> None:
    """Whether the checkpoint is a view of this node's topics is checked when the node
    starts (tests/pipeline/test_restore.py); what a setting alone shows is checked here."""
    database = tmp_path / "checkpoint"
    database.mkdir()
    (database / "CURRENT").write_text("MANIFEST-000001\n")
    cluster = {"kafka": "k:9092"}
    env = {"METASTORE_WAREHOUSE": "file:///mnt/shared/warehouse"}
    config = ServerConfig.load({**cluster, "restore_from": str(database)}, env=env)
    assert config.restore_from == str(database)
    assert ServerConfig.load(cluster, env=env).restore_from == ""
    refusals = [
        ({"restore_from": str(database)}, {}, "--restore-from: applies only in cluster mode"),
        (cluster, {**env, "METASTORE_RESTORE_FROM": str(tmp_path / "missing")},
         "METASTORE_RESTORE_FROM: '" + str(tmp_path / "missing") + "' is not a directory"),
        ({**cluster, "restore_from": str(tmp_path)}, env, "holds no RocksDB database"),
        ({**cluster, "restore_from": str(database / "CURRENT")}, env, "is not a directory"),
    ]  # fmt: skip
    for flags, variables, problem in refusals:
        with pytest.raises(ConfigError) as refused:
            ServerConfig.load(flags, env=variables)
        message = str(refused.value)
        assert problem in message, message
        assert "\n" not in message


def test_serve_refuses_a_restore_from_that_is_no_database(tmp_path: Path) -> None:
    env = {"METASTORE_WAREHOUSE": (tmp_path / "warehouse").as_uri()}
    done = serve(tmp_path, "--kafka", "127.0.0.1:1", "--restore-from", str(tmp_path), env=env)
    assert_refused(done, "--restore-from: ", "holds no RocksDB database")
    assert not (tmp_path / "data").exists()
