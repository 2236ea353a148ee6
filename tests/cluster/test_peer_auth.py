"""The node credential (metastore/cluster/peer_auth.py): what a signature binds, how long it
lives, that it is accepted once, and how the cluster secret is read and refused.

Pure functions with an injected clock; the same credential is exercised between real
nodes in test_security.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from metastore.cluster.peer_auth import MAX_SKEW_S, MIN_SECRET_LENGTH, PeerKey, resolve_secret
from metastore.cluster.protocol import FORWARDED_HEADER, SIGNATURE_HEADER
from metastore.config.server_config import ServerConfig
from metastore.errors import Unauthorized
from metastore.util.setting_rules import ConfigError

SECRET = "s" * MIN_SECRET_LENGTH
OWNER = "http://10.0.0.2:8181"
SENDER = "http://10.0.0.1:8181"
PATH = "/v1/default/namespaces/a%1Fb/tables?pageSize=5"
BODY = b'{"name": "t"}'
BEARER = "Bearer client-token"


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def signed(key: PeerKey, **changes: object) -> dict[str, str]:
    args: dict[str, object] = {
        "method": "POST",
        "target": OWNER,
        "path_qs": PATH,
        "body": BODY,
        "authorization": BEARER,
    }
    args.update(changes)
    headers = key.sign(
        str(args["method"]),
        str(args["target"]),
        str(args["path_qs"]),
        args["body"],  # type: ignore[arg-type]
        sender=SENDER,
        authorization=args["authorization"],  # type: ignore[arg-type]
    )
    if args["authorization"] is not None:
        headers["Authorization"] = str(args["authorization"])
    return headers


def verify(key: PeerKey, headers: dict[str, str], **changes: object) -> str:
    args: dict[str, object] = {"method": "POST", "target": OWNER, "path_qs": PATH, "body": BODY}
    args.update(changes)
    return key.verify(
        str(args["method"]),
        str(args["target"]),
        str(args["path_qs"]),
        args["body"],  # type: ignore[arg-type]
        headers,
    )


def test_a_signed_request_names_its_sender() -> None:
    key = PeerKey(SECRET)
    headers = signed(key)
    assert headers[FORWARDED_HEADER] == SENDER
    assert verify(key, headers) == SENDER


@pytest.mark.parametrize(
    "changes",
    [
        {"method": "DELETE"},
        {"path_qs": PATH.replace("pageSize=5", "pageSize=6")},
        {"path_qs": "/internal/v1/updateables"},
        {"body": b'{"name": "u"}'},
        {"target": "http://10.0.0.3:8181"},  # addressed to another node
    ],
    ids=["method", "query", "path", "body", "target"],
)
def test_what_the_signature_binds(changes: dict[str, object]) -> None:
    key = PeerKey(SECRET)
    with pytest.raises(Unauthorized, match="invalid node signature"):
        verify(key, signed(key), **changes)


def test_the_clients_authorization_is_bound() -> None:
    """A captured forward cannot be re-sent under another client's token."""
    key = PeerKey(SECRET)
    headers = signed(key)
    headers["Authorization"] = "Bearer someone-else"
    with pytest.raises(Unauthorized, match="invalid node signature"):
        verify(key, headers)
    headers = signed(key, authorization=None)
    assert verify(key, headers) == SENDER
    headers["Authorization"] = BEARER  # added after signing
    with pytest.raises(Unauthorized, match="invalid node signature"):
        verify(key, headers)


def test_the_sender_is_bound() -> None:
    key = PeerKey(SECRET)
    headers = signed(key)
    headers[FORWARDED_HEADER] = "http://evil:1"
    with pytest.raises(Unauthorized, match="invalid node signature"):
        verify(key, headers)


def test_another_secret_is_refused() -> None:
    with pytest.raises(Unauthorized, match="invalid node signature"):
        verify(PeerKey(SECRET), signed(PeerKey("t" * MIN_SECRET_LENGTH)))


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {FORWARDED_HEADER: SENDER},
        {SIGNATURE_HEADER: "v1 1 2 3"},
        {FORWARDED_HEADER: SENDER, SIGNATURE_HEADER: "garbage"},
        {FORWARDED_HEADER: SENDER, SIGNATURE_HEADER: "v2 1800000000 " + "0" * 32 + " x"},
        {FORWARDED_HEADER: SENDER, SIGNATURE_HEADER: "v1 soon " + "0" * 32 + " x"},
        {FORWARDED_HEADER: SENDER, SIGNATURE_HEADER: "v1 1800000000 short x"},
    ],
)
def test_missing_or_malformed_credentials_are_refused(headers: dict[str, str]) -> None:
    with pytest.raises(Unauthorized):
        verify(PeerKey(SECRET), headers)


def test_a_signature_is_accepted_once() -> None:
    key = PeerKey(SECRET)
    headers = signed(key)
    verify(key, headers)
    with pytest.raises(Unauthorized, match="replayed"):
        verify(key, headers)


def test_clock_skew_is_bounded_both_ways() -> None:
    sender_clock, receiver_clock = Clock(), Clock()
    sender = PeerKey(SECRET, clock=sender_clock)
    receiver = PeerKey(SECRET, clock=receiver_clock)
    receiver_clock.now = sender_clock.now + MAX_SKEW_S
    assert verify(receiver, signed(sender)) == SENDER  # at the bound: accepted
    receiver_clock.now = sender_clock.now + MAX_SKEW_S + 1
    with pytest.raises(Unauthorized, match="clock skew"):
        verify(receiver, signed(sender))
    receiver_clock.now = sender_clock.now - MAX_SKEW_S - 1
    with pytest.raises(Unauthorized, match="clock skew"):
        verify(receiver, signed(sender))


def test_nonces_are_remembered_as_long_as_they_could_pass() -> None:
    clock = Clock()
    key = PeerKey(SECRET, clock=clock)
    old = signed(key)
    verify(key, old)
    clock.now += MAX_SKEW_S  # still inside the window: still a replay
    with pytest.raises(Unauthorized, match="replayed"):
        verify(key, old)
    clock.now += 2 * MAX_SKEW_S + 1  # long expired: refused by its age, and forgotten
    verify(key, signed(key))
    assert len(key._seen) == 1
    with pytest.raises(Unauthorized, match="clock skew"):
        verify(key, old)


# -- the cluster secret -------------------------------------------------------------


def test_secret_from_the_file_without_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_text(SECRET + "\n")
    assert resolve_secret("", str(path)) == SECRET
    assert resolve_secret(SECRET, "") == SECRET
    assert resolve_secret("", "") == ""


@pytest.mark.parametrize(
    ("value", "content", "message"),
    [
        ("short", None, f"at least {MIN_SECRET_LENGTH} characters (got 5)"),
        ("", "short\n", f"at least {MIN_SECRET_LENGTH} characters (got 5)"),
        ("", "\n  \n", "is empty"),
        ("", b"\xff\xfe", "cannot read"),
        (SECRET, SECRET, "not both"),
    ],
    ids=["short", "short-file", "empty-file", "binary-file", "both"],
)
def test_bad_secrets_are_refused(
    tmp_path: Path, value: str, content: str | bytes | None, message: str
) -> None:
    path = ""
    if content is not None:
        file = tmp_path / "secret"
        if isinstance(content, bytes):
            file.write_bytes(content)
        else:
            file.write_text(content)
        path = str(file)
    with pytest.raises(ConfigError, match=re.escape(message)) as raised:
        resolve_secret(value, path)
    for text in (value, content if isinstance(content, str) else ""):
        assert not text.strip() or text.strip() not in str(raised.value), "the secret leaked"


def test_an_unreadable_secret_file_is_refused_at_startup(tmp_path: Path) -> None:
    env = {"METASTORE_CLUSTER_SECRET_FILE": str(tmp_path / "missing")}
    with pytest.raises(ConfigError, match="METASTORE_CLUSTER_SECRET_FILE: cannot read"):
        ServerConfig.load({}, env=env)


def test_cluster_mode_with_auth_on_requires_a_secret() -> None:
    for env in (
        {"METASTORE_AUTH": "on"},
        {},  # auth auto on a non-loopback bind
    ):
        overrides = {
            "kafka": "127.0.0.1:9092",
            "host": "0.0.0.0",
            "advertised_url": "http://n:1",
            "warehouse": "s3://shared/warehouse",  # a cluster needs shared storage
        }
        with pytest.raises(ConfigError, match="needs a cluster secret"):
            ServerConfig.load(overrides, env=env)
    secured = ServerConfig.load(overrides, env={"METASTORE_CLUSTER_SECRET": SECRET})
    assert secured.cluster_key == SECRET
    # embedded, or auth off on loopback: no secret needed
    assert ServerConfig.load({"host": "0.0.0.0"}, env={}).cluster_key == ""
    shared = {"kafka": "127.0.0.1:9092", "warehouse": "s3://shared/warehouse"}
    assert ServerConfig.load(shared, env={}).cluster_key == ""


def test_the_secret_is_never_described() -> None:
    config = ServerConfig.load({}, env={"METASTORE_CLUSTER_SECRET": SECRET})
    assert config.describe()["cluster_secret"] == "***"
    assert SECRET not in repr(config.describe())
