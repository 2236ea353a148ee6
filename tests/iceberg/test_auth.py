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

from harness.node import NodeProcess
from harness.process import free_port
from metastore.cluster import topics
from metastore.cluster.cluster_config import ClusterConfig
from metastore.model.changes import CreateEntity, DeleteEntity
from metastore.model.keys import EntityKey, Kind
from metastore.security.hashing import hash_secret
from metastore.security.signing import LEGACY_KEY, TOKEN_KEYS
from tests.iceberg.conftest import Server
from tests.security.stores import offline_store

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


def token_status(url: str, token: str) -> int:
    """200 for a token the node accepts (whoami needs no grant), else its refusal."""
    headers = {"Authorization": f"Bearer {token}"}
    return requests.get(url + "/api/v1/whoami", headers=headers, timeout=60).status_code


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
        for client in ("alice", "alice@default", "alice"):  # one principal; address: 3
            assert_oauth_error(ask_token(url, client, "wrong-secret"), 401, "invalid_client")
        limited = ask_token(url, "alice@default", "wrong-secret")
        assert 1 <= assert_retry_later(limited, 429, "TooManyRequestsException") <= 600
        # the id is held back, even with the right secret (else guessing could go on)
        assert_retry_later(ask_token(url, *ALICE), 429, "TooManyRequestsException")
        assert token_status(url, token_of(url, *BOB)) == 200  # other ids are not
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
        assert token_status(process.url, token_of(process.url, *ALICE)) == 200


# --- seeding -------------------------------------------------------------------------------


def principals_call(
    url: str, token: str, method: str, path: str = "", body: Any = None
) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"}
    return requests.request(
        method, f"{url}/api/v1/tenants/default/principals{path}", json=body, headers=headers,
        timeout=60,
    )  # fmt: skip


def test_configured_clients_seed_principals_that_the_api_then_manages(tmp_path: Path) -> None:
    """The configured list only creates the principals that do not exist: a restart with a
    shorter list or another secret changes nothing stored; a principal deleted through
    the API (its tokens die at once) is created anew by the next start that lists it,
    under a new generation, so its old tokens stay dead."""
    port = free_port()
    admin = {"METASTORE_AUTH_ADMINS": "alice"}
    with node(tmp_path, {"METASTORE_AUTH_CLIENTS": clients(ALICE, BOB), **admin}, port) as process:
        alice_1, bob_1 = token_of(process.url, *ALICE), token_of(process.url, *BOB)
        assert token_status(process.url, alice_1) == token_status(process.url, bob_1) == 200

    alice_other = ("alice", "alice-secret-2")
    with node(tmp_path, {"METASTORE_AUTH_CLIENTS": clients(alice_other), **admin}, port) as process:
        assert token_status(process.url, bob_1) == 200  # not listed: still there
        assert token_status(process.url, alice_1) == 200  # the stored secret is kept
        assert_oauth_error(ask_token(process.url, *alice_other), 401, "invalid_client")
        reply = principals_call(process.url, alice_1, "DELETE", "/bob")
        assert reply.status_code == 204, reply.text
        assert token_status(process.url, bob_1) == 401
        assert_oauth_error(ask_token(process.url, *BOB), 401, "invalid_client")

    with node(tmp_path, {"METASTORE_AUTH_CLIENTS": clients(ALICE, BOB), **admin}, port) as process:
        assert token_status(process.url, bob_1) == 401  # a new record: a new generation
        assert token_status(process.url, token_of(process.url, *BOB)) == 200
        assert token_status(process.url, alice_1) == 200


def test_client_records_of_earlier_versions_become_principals(tmp_path: Path) -> None:
    """A data directory written by an earlier version holds ``client:<id>`` records and
    a single ``token-key``: the first start turns each client into a service principal
    with the same secret and drops the old records, in commits."""
    with node(tmp_path, {}):
        pass  # a fresh node writes the default tenant, as every version did
    with offline_store(tmp_path / "data") as store:
        carol = ("carol", "carol-secret-1")
        salt = bytes(range(16))
        legacy = {"salt": salt.hex(), "hash": hash_secret(carol[1], salt), "generation": "g1"}
        store.commit(
            CreateEntity(EntityKey(Kind.SYSTEM, (), "client:carol"), legacy),
            CreateEntity(EntityKey(Kind.SYSTEM, (), "client:bob"), {"hash": "unreadable"}),
            DeleteEntity(TOKEN_KEYS),  # the key of an earlier version instead
            CreateEntity(LEGACY_KEY, {"key": "00" * 32}),
        )
    with node(tmp_path, {"METASTORE_AUTH_ADMINS": "carol"}) as process:
        token = token_of(process.url, *carol)
        assert token_status(process.url, token) == 200
        reply = principals_call(process.url, token, "GET")
        assert reply.status_code == 200, reply.text
        listed = {p["name"]: p for p in reply.json()["principals"]}
        assert set(listed) == {"carol"}, listed  # bob's record was not one a version wrote
        assert listed["carol"]["type"] == "service" and not listed["carol"]["disabled"]
    with offline_store(tmp_path / "data") as store:
        names = store.system_names()
        assert "principal:carol" in names and "token-keys" in names, names
        assert not {n for n in names if n.startswith("client:")} and "token-key" not in names


@pytest.mark.slow
def test_a_deleted_principal_is_refused_by_a_node_that_joins_later(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Principal records replicate through the changelog. A one-node cluster issues
    tokens and deletes bob through the API; a second node that then joins learns the
    deletion and alice's record from the log alone: it refuses bob's token and accepts
    the token alice got before."""
    prefix = f"a{uuid.uuid4().hex[:10]}"
    topics.create(ClusterConfig(kafka_bootstrap, prefix=prefix, cluster=prefix, partitions=4))
    args = (
        "--kafka", kafka_bootstrap, "--topic-prefix", prefix, "--cluster-id", prefix,
        "--partitions", "4",
    )  # fmt: skip
    base = {
        "METASTORE_AUTH": "on",
        "METASTORE_CLUSTER_SECRET": uuid.uuid4().hex * 2,
        "METASTORE_AUTH_ADMINS": "alice",
    }
    port = free_port()

    def cluster_node(i: int, listed: str, port: int | None = None) -> NodeProcess:
        return NodeProcess(
            tmp_path / f"node{i}" / "data",
            port=port,
            extra_args=args,
            env={
                **base,
                "METASTORE_AUTH_CLIENTS": listed,
                "METASTORE_WAREHOUSE": (tmp_path / "warehouse").as_uri(),
            },
            log_path=tmp_path / f"node{i}.log",
        )

    with closing(cluster_node(0, clients(ALICE, BOB), port).start(120)) as first:
        alice_token, bob_token = token_of(first.url, *ALICE), token_of(first.url, *BOB)
        assert token_status(first.url, bob_token) == 200
        reply = principals_call(first.url, alice_token, "DELETE", "/bob")
        assert reply.status_code == 204, reply.text
    with (
        closing(cluster_node(0, clients(ALICE), port).start(120)) as first,
        closing(cluster_node(1, clients(ALICE)).start(120)) as second,
    ):
        for process in (first, second):
            assert _refused_soon(process.url, bob_token), process.log_tail()
            assert_oauth_error(ask_token(process.url, *BOB), 401, "invalid_client")
            assert token_status(process.url, alice_token) == 200
    for i in (0, 1):
        log = (tmp_path / f"node{i}.log").read_text(errors="replace")
        assert "Traceback" not in log, log[-5000:]


def _refused_soon(url: str, token: str, within_s: float = 60.0) -> bool:
    """A node is healthy once its own bootstrap is done, but the other node's view may
    apply the deletion a moment later: wait for it (bounded), as a client would."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if token_status(url, token) == 401:
            return True
        time.sleep(0.1)
    return False
