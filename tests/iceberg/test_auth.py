"""The token endpoint and bearer tokens against real nodes: malformed requests, failure
limits, hashing off the event loop, and revocation across restarts (embedded and cluster).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import TooManyRequestsError

from metastore.cluster import topics
from metastore.cluster.config import ClusterConfig
from metastore.procs import NodeProcess, free_port

from .conftest import Server

TOKENS = "/v1/oauth/tokens"
OAUTH_ERRORS = {
    "invalid_request",
    "invalid_client",
    "invalid_grant",
    "unauthorized_client",
    "unsupported_grant_type",
    "invalid_scope",
}
ALICE = ("alice", "alice-secret-1")
BOB = ("bob", "bob-secret-1")


def clients(*pairs: tuple[str, str]) -> str:
    return ",".join(f"{client}:{secret}" for client, secret in pairs)


def form(client: str, secret: str) -> dict[str, str]:
    return {"grant_type": "client_credentials", "client_id": client, "client_secret": secret}


def ask_token(url: str, client: str, secret: str) -> requests.Response:
    return requests.post(url + TOKENS, data=form(client, secret), timeout=60)


def token_of(url: str, client: str, secret: str) -> str:
    reply = ask_token(url, client, secret)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["access_token"])


def config_status(url: str, token: str) -> int:
    headers = {"Authorization": f"Bearer {token}"}
    return requests.get(url + "/v1/config", headers=headers, timeout=60).status_code


def assert_oauth_error(reply: requests.Response, status: int, error: str) -> None:
    assert reply.status_code == status, reply.text
    body = reply.json()
    assert set(body) <= {"error", "error_description"} and body["error"] in OAUTH_ERRORS, body
    assert body["error"] == error, body
    assert isinstance(body["error_description"], str) and body["error_description"], body


def assert_retry_later(reply: requests.Response | Any, status: int, error_type: str) -> int:
    """The Iceberg error shape with an integral ``Retry-After``; returns its seconds."""
    body = reply.json()
    assert reply.status_code == status, body
    assert body["error"]["type"] == error_type and body["error"]["code"] == status, body
    retry_after = reply.headers["Retry-After"]
    assert retry_after.isdigit() and int(retry_after) >= 1, retry_after
    return int(retry_after)


@contextmanager
def node(root: Path, env: dict[str, str], port: int | None = None) -> Iterator[NodeProcess]:
    """A secured embedded node on ``root``; it must stop cleanly and log no traceback."""
    process = NodeProcess(
        root / "data", port=port, env={"METASTORE_AUTH": "on", **env}, log_path=root / "node.log"
    )
    with process:
        yield process
        assert process.proc is not None and process.proc.poll() is None, process.log_tail()
    assert "Traceback" not in process.log_path.read_text(errors="replace"), process.log_tail(80)


# --- malformed requests -------------------------------------------------------------------

MULTIPART = b'--xx\r\nContent-Disposition: form-data; name="grant_type"\r\n\r\nx\r\n--xx--\r\n'
FIELDS = "&".join(f"f{i}=v" for i in range(17))
URLENCODED = "application/x-www-form-urlencoded"
MALFORMED: list[tuple[str | None, bytes, str]] = [
    # (Content-Type, body, OAuth error)
    ("multipart/form-data", b"grant_type=client_credentials", "invalid_request"),
    ("multipart/form-data; boundary=xx", MULTIPART, "invalid_request"),
    ("multipart/form-data; boundary=xx", b"garbage", "invalid_request"),
    ("application/json", b'{"grant_type": "client_credentials"}', "invalid_request"),
    ("text/plain", b"grant_type=client_credentials", "invalid_request"),
    (None, b"grant_type=client_credentials", "invalid_request"),
    (URLENCODED, b"", "invalid_request"),
    (URLENCODED, b"grant_type", "invalid_request"),
    (URLENCODED, b"grant_type=client_credentials&&client_id=a", "invalid_request"),
    (URLENCODED, b"grant_type=client_credentials&client_id=%ff%fe", "invalid_request"),
    (URLENCODED, b"grant_type=client_credentials&\xff\xfe=1", "invalid_request"),
    (URLENCODED + "; charset=bogus", b"grant_type=client_credentials", "invalid_request"),
    (URLENCODED, b"grant_type=client_credentials&client_id=a&client_id=b", "invalid_request"),
    (URLENCODED, FIELDS.encode(), "invalid_request"),
    (URLENCODED, b"client_id=alice&client_secret=s3cret-alice", "invalid_request"),
    (URLENCODED, b"grant_type=client_credentials&client_id=alice", "invalid_request"),
    (URLENCODED, b"grant_type=client_credentials&client_id=&client_secret=x", "invalid_request"),
    (URLENCODED, b"grant_type=password&client_id=alice&client_secret=x", "unsupported_grant_type"),
]


def test_malformed_token_requests_are_400_in_the_oauth_shape(secured_server: Server) -> None:
    for content_type, body, error in MALFORMED:
        headers = {"Content-Type": content_type} if content_type else {}
        reply = requests.post(secured_server.url + TOKENS, data=body, headers=headers, timeout=60)
        assert_oauth_error(reply, 400, error)


def test_an_unknown_client_and_a_wrong_secret_answer_alike(secured_server: Server) -> None:
    url = secured_server.url
    wrong = ask_token(url, "alice", "not-alices-secret")
    unknown = ask_token(url, "nobody-here", "not-alices-secret")
    ill_formed = ask_token(url, "no body/here", "not-alices-secret")
    for reply in (wrong, unknown, ill_formed):
        assert_oauth_error(reply, 401, "invalid_client")
    assert wrong.json() == unknown.json() == ill_formed.json()


# --- failure limits -----------------------------------------------------------------------


def test_failed_attempts_are_limited_per_client_and_per_address(tmp_path: Path) -> None:
    env = {
        "METASTORE_AUTH_CLIENTS": clients(ALICE, BOB),
        "METASTORE_TOKEN_FAILURES_PER_CLIENT": "3",
        "METASTORE_TOKEN_FAILURES_PER_ADDRESS": "6",
        "METASTORE_TOKEN_FAILURE_WINDOW_S": "600",  # nothing leaves the window during the test
    }
    with node(tmp_path, env) as process:
        url = process.url
        for _ in range(8):  # successes are no failures
            token_of(url, *BOB)
        for _ in range(3):  # address: 3 failures
            assert_oauth_error(ask_token(url, "alice", "wrong-secret"), 401, "invalid_client")
        limited = ask_token(url, "alice", "wrong-secret")
        assert 1 <= assert_retry_later(limited, 429, "TooManyRequestsException") <= 600
        # the id is held back, even with the right secret (else guessing could go on)
        assert_retry_later(ask_token(url, *ALICE), 429, "TooManyRequestsException")
        assert config_status(url, token_of(url, *BOB)) == 200  # other ids are not
        for client in ("mallory", "mallory", "trudy"):  # unknown ids count alike: 6 failures
            assert_oauth_error(ask_token(url, client, "wrong-secret"), 401, "invalid_client")
        for client, secret in (("carol", "wrong-secret"), BOB):  # the address is held back
            assert_retry_later(ask_token(url, client, secret), 429, "TooManyRequestsException")
        with pytest.raises(TooManyRequestsError, match="TooManyRequestsException"):
            RestCatalog(
                "bob", uri=url, credential=clients(BOB), **{"oauth2-server-uri": url + TOKENS}
            )


# --- hashing off the event loop -------------------------------------------------------------


async def _burst(url: str, client_ids: list[str]) -> tuple[list[Any], int]:
    """Wrong secrets for ``client_ids`` sent at once, and a /health among them."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:

        async def token(client: str) -> Any:
            async with session.post(url + TOKENS, data=form(client, "wrong-secret")) as reply:
                return reply.status, await reply.json(), dict(reply.headers)

        async def health() -> int:
            async with session.get(url + "/health") as reply:
                return reply.status

        *replies, health_status = await asyncio.gather(*map(token, client_ids), health())
        return replies, health_status


def test_secrets_are_hashed_off_the_event_loop_for_known_and_unknown_ids(tmp_path: Path) -> None:
    """One hashing thread and no queue: a token request that arrives while another one's
    secret is being hashed is answered 503 at once. Such an answer can only exist if the
    event loop serves requests while a hash runs, so seeing one proves the hash is off
    the loop; a burst of only unknown ids producing one proves unknown ids are hashed too
    (they cost what a real client costs). Nothing here depends on how long a hash takes:
    the bursts are repeated until concurrent requests overlap, which on a free loop
    happens in the first round or so, and with hashing on the loop never."""
    env = {
        "METASTORE_AUTH_CLIENTS": clients(ALICE),
        "METASTORE_TOKEN_HASH_THREADS": "1",
        "METASTORE_TOKEN_HASH_QUEUE": "0",
        "METASTORE_TOKEN_FAILURES_PER_CLIENT": "1000000",
        "METASTORE_TOKEN_FAILURES_PER_ADDRESS": "1000000",
    }
    with node(tmp_path, env) as process:
        for name, ids in (
            ("known", lambda r: ["alice"] * 8),
            ("unknown", lambda r: [f"ghost-{r}-{i}" for i in range(8)]),
        ):
            busy: list[Any] = []
            for round_ in range(30):
                replies, health = asyncio.run(_burst(process.url, ids(round_)))
                assert health == 200
                assert {status for status, _, _ in replies} <= {401, 503}, replies
                busy = [r for r in replies if r[0] == 503]
                if busy:
                    break
            assert busy, f"{name} ids: no request was answered while a secret was being hashed"
            _, body, headers = busy[0]
            assert body["error"]["type"] == "SlowDownException" and headers["Retry-After"] == "1"
        assert config_status(process.url, token_of(process.url, *ALICE)) == 200


# --- revocation ---------------------------------------------------------------------------


def test_removed_or_rotated_clients_lose_their_tokens_across_restarts(tmp_path: Path) -> None:
    """The configured list is the truth at every start: a client no longer listed gets no
    token and its tokens stop working; a rotated secret revokes the tokens issued
    before; a client listed again with its old secret does not get its old tokens back."""
    port = free_port()
    with node(tmp_path, {"METASTORE_AUTH_CLIENTS": clients(ALICE, BOB)}, port) as process:
        alice_1, bob_1 = token_of(process.url, *ALICE), token_of(process.url, *BOB)
        assert config_status(process.url, alice_1) == config_status(process.url, bob_1) == 200

    with node(tmp_path, {"METASTORE_AUTH_CLIENTS": clients(ALICE)}, port) as process:
        assert config_status(process.url, bob_1) == 401
        assert_oauth_error(ask_token(process.url, *BOB), 401, "invalid_client")
        assert config_status(process.url, alice_1) == 200  # unchanged: still valid

    alice_rotated = ("alice", "alice-secret-2")
    with node(tmp_path, {"METASTORE_AUTH_CLIENTS": clients(alice_rotated)}, port) as process:
        assert config_status(process.url, alice_1) == 401
        assert_oauth_error(ask_token(process.url, *ALICE), 401, "invalid_client")
        alice_2 = token_of(process.url, *alice_rotated)
        assert config_status(process.url, alice_2) == 200

    env = {"METASTORE_AUTH_CLIENTS": clients(alice_rotated, BOB)}
    with node(tmp_path, env, port) as process:
        assert config_status(process.url, bob_1) == 401  # a new record: a new generation
        assert config_status(process.url, token_of(process.url, *BOB)) == 200
        assert config_status(process.url, alice_2) == 200


@pytest.mark.slow
def test_a_removed_client_is_refused_by_every_node_of_a_cluster(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Client records replicate through the changelog. A one-node cluster issues tokens,
    restarts with bob removed (it owns every partition, so its bootstrap deletes bob's
    record); a second node that then joins learns the deletion and alice's record from
    the log alone: it refuses bob's token and accepts the token alice got before."""
    prefix = f"a{uuid.uuid4().hex[:10]}"
    topics.create(ClusterConfig(kafka_bootstrap, prefix=prefix, cluster=prefix, partitions=4))
    args = (
        "--kafka", kafka_bootstrap, "--topic-prefix", prefix, "--cluster-id", prefix,
        "--partitions", "4",
    )  # fmt: skip
    base = {"METASTORE_AUTH": "on", "METASTORE_CLUSTER_SECRET": uuid.uuid4().hex * 2}
    port = free_port()

    def cluster_node(i: int, listed: str, port: int | None = None) -> NodeProcess:
        return NodeProcess(
            tmp_path / f"node{i}" / "data",
            port=port,
            extra_args=args,
            env={**base, "METASTORE_AUTH_CLIENTS": listed},
            log_path=tmp_path / f"node{i}.log",
        )

    with closing(cluster_node(0, clients(ALICE, BOB), port).start(120)) as first:
        alice_token, bob_token = token_of(first.url, *ALICE), token_of(first.url, *BOB)
        assert config_status(first.url, bob_token) == 200
    with (
        closing(cluster_node(0, clients(ALICE), port).start(120)) as first,
        closing(cluster_node(1, clients(ALICE)).start(120)) as second,
    ):
        for process in (first, second):
            assert _refused_soon(process.url, bob_token), process.log_tail()
            assert_oauth_error(ask_token(process.url, *BOB), 401, "invalid_client")
            assert config_status(process.url, alice_token) == 200
    for i in (0, 1):
        log = (tmp_path / f"node{i}.log").read_text(errors="replace")
        assert "Traceback" not in log, log[-5000:]


def _refused_soon(url: str, token: str, within_s: float = 60.0) -> bool:
    """A node is healthy once its own bootstrap is done, but the other node's view may
    apply the deletion a moment later: wait for it (bounded), as a client would."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if config_status(url, token) == 401:
            return True
        time.sleep(0.1)
    return False
