"""What a real node says about itself in its log: the serving line (embedded or cluster,
whether auth is on and why, where the console is), one warning naming the
authentication settings that auth off ignores, and one line when it stops."""

from __future__ import annotations

import signal
import urllib.request
from pathlib import Path

import pytest

from harness.node import NodeProcess
from metastore.config.server_config import ServerConfig
from metastore.node.lifecycle_lines import ignored_auth_settings, serving_line

CLIENTS = "alice:alice-secret-1"
PROVIDER = {
    "METASTORE_OIDC_ISSUER": "https://idp.example.com/realms/acme",
    "METASTORE_OIDC_AUDIENCE": "metastore",
    "METASTORE_OIDC_JWKS_URL": "https://idp.example.com/realms/acme/certs",
}


def started(tmp_path: Path, env: dict[str, str]) -> NodeProcess:
    """A node that ran and stopped (SIGTERM, exit status 0); its log is complete."""
    node = NodeProcess(tmp_path / "data", log_path=tmp_path / "node.log", env=env)
    with node:
        pass
    assert node.proc is not None and node.proc.returncode == 0, node.log_tail()
    return node


def lines(node: NodeProcess, level: str) -> list[str]:
    return [line for line in node.log_path.read_text().splitlines() if f" {level} " in line]


@pytest.mark.parametrize(
    ("env", "auth"),
    [
        ({}, "auth off (auto: loopback only)"),
        ({"METASTORE_AUTH": "off"}, "auth off (METASTORE_AUTH=off)"),
        ({"METASTORE_AUTH": "on", "METASTORE_AUTH_CLIENTS": CLIENTS}, "auth on"),
    ],
    ids=["auto", "off", "on"],
)
def test_the_serving_line_says_the_mode_the_auth_and_why_and_the_console(
    tmp_path: Path, env: dict[str, str], auth: str
) -> None:
    node = NodeProcess(tmp_path / "data", log_path=tmp_path / "node.log", env=env)
    with node:
        console = f"{node.url}/"
        with urllib.request.urlopen(console, timeout=10) as page:  # what the line points at
            assert page.status == 200 and page.headers.get_content_type() == "text/html"
    serving = [line for line in lines(node, "INFO") if "serving on" in line]
    assert len(serving) == 1, node.log_tail()
    assert serving[0].endswith(
        f"metastore.node.server: serving on {node.url} (at most 1024 connections): "
        f"embedded, {auth}, console at {console}"
    ), serving[0]


def test_a_cluster_node_on_all_interfaces_points_at_its_advertised_console() -> None:
    config = ServerConfig(
        host="0.0.0.0",
        kafka="k:9092",
        advertised_url="https://node-1.example:8443/",
        warehouse="s3://bucket/warehouse",
        cluster_secret="x" * 32,
    )
    assert serving_line(config, "http") == (
        "serving on http://0.0.0.0:8181 (at most 1024 connections): cluster (kafka k:9092), "
        "auth on (auto: 0.0.0.0 is reachable from other machines), "
        "console at https://node-1.example:8443/"
    )
    assert "http://[::1]:8181 " in serving_line(ServerConfig(host="::1"), "http")


@pytest.mark.parametrize(
    ("env", "why"),
    [
        ({"METASTORE_AUTH": "off"}, "auth off (METASTORE_AUTH=off)"),
        ({}, "auth off (auto: loopback only)"),  # a laptop reading a deployment's env file
    ],
    ids=["off", "auto"],
)
def test_authentication_settings_auth_off_ignores_are_named_in_one_warning(
    tmp_path: Path, env: dict[str, str], why: str
) -> None:
    settings = {"METASTORE_AUTH_CLIENTS": CLIENTS, "METASTORE_AUTH_ADMINS": "service:alice"}
    node = started(tmp_path, {**env, **settings, **PROVIDER})
    warnings = lines(node, "WARNING")
    assert len(warnings) == 1, node.log_tail()
    named = "METASTORE_AUTH_CLIENTS, METASTORE_AUTH_ADMINS, " + ", ".join(PROVIDER)
    assert warnings[0].endswith(
        f"{named} set but ignored: {why}, so no request is authenticated; "
        "set METASTORE_AUTH=on to use them"
    ), warnings[0]
    assert "alice-secret-1" not in node.log_path.read_text()


def test_with_auth_on_nothing_is_ignored(tmp_path: Path) -> None:
    settings = {"METASTORE_AUTH_CLIENTS": CLIENTS, "METASTORE_AUTH_ADMINS": "service:alice"}
    node = started(tmp_path, {"METASTORE_AUTH": "on", **settings})
    assert lines(node, "WARNING") == [], node.log_tail()
    # bound beyond loopback, auto is on: nothing is ignored either
    reachable = ServerConfig.load({"host": "0.0.0.0"}, env={**settings, **PROVIDER})
    assert reachable.auth_enabled and ignored_auth_settings(reachable) == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_node_that_stops_says_so_once_it_has_stopped(
    tmp_path: Path, signum: signal.Signals
) -> None:
    node = NodeProcess(tmp_path / "data", log_path=tmp_path / "node.log").start()
    assert node.proc is not None
    node.proc.send_signal(signum)
    assert node.proc.wait(30) == 0, node.log_tail()
    last = node.log_path.read_text().splitlines()[-1]
    prefix = f" INFO metastore.node.server: stopped on {signum.name} after serving "
    assert prefix in last and last.endswith(" s"), last
    float(last.split(prefix)[1].removesuffix(" s"))  # seconds, as a number
