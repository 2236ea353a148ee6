"""A secured cluster: three real nodes with auth on and a cluster secret, then two nodes
over HTTPS with mutual TLS (certificates made here with the ``openssl`` command).

With auth on, nodes used to refuse each other's node-id lease calls (401) and exit at
startup; now every node-to-node request carries the node credential. Checked here:
the cluster forms (every node leased a distinct node id through the system
partition's owner), writes are forwarded to owners and recorded under the client's
own identity, a kill -9 of an owner fails over; a client without a token is refused
by every node; ``/internal/v1/*`` refuses anything that is not a node; a client
cannot pass a request off as forwarded.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import requests

from harness.cluster import Cluster, health, view_state
from harness.node import NodeProcess
from metastore.catalog.consistency import HEADER
from metastore.cluster.peer_auth import PeerKey
from metastore.cluster.protocol import FORWARDED_HEADER, SIGNATURE_HEADER

pytestmark = pytest.mark.slow

CLIENT, CLIENT_SECRET = "alice", "alice-secret-0123"
TIMEOUT = 60


def _env(secret: str) -> dict[str, str]:
    return {
        "METASTORE_AUTH": "on",
        "METASTORE_AUTH_CLIENTS": f"{CLIENT}:{CLIENT_SECRET}",
        "METASTORE_AUTH_ADMINS": CLIENT,  # these tests are about the nodes, not grants
        "METASTORE_CLUSTER_SECRET": secret,
        "METASTORE_CONSISTENCY_WAIT_S": "5",
    }


@pytest.fixture(scope="module")
def secret() -> str:
    return secrets.token_urlsafe(32)


@pytest.fixture(scope="module")
def cluster(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory, secret: str
) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("secured")
    nodes = Cluster(kafka_bootstrap, f"s{os.urandom(5).hex()}", root, env=_env(secret))
    try:
        yield nodes.start()
    finally:
        nodes.close()
    nodes.logs_without_tracebacks()


def bearer(url: str, session: requests.Session | None = None, **tls: Any) -> dict[str, str]:
    form = {"grant_type": "client_credentials", "client_id": CLIENT, "client_secret": CLIENT_SECRET}
    reply = (session or requests).post(f"{url}/v1/oauth/tokens", data=form, timeout=TIMEOUT, **tls)
    assert reply.status_code == 200, reply.text
    return {"Authorization": f"Bearer {reply.json()['access_token']}"}


def assert_refused(reply: requests.Response, status: int = 401) -> None:
    assert reply.status_code == status, f"{reply.request.method} {reply.url}: {reply.text}"
    error = reply.json()["error"]
    assert error["code"] == status and error["type"] and error["message"], reply.text


def node_ids(cluster: Cluster) -> list[int]:
    found = []
    for node in cluster.nodes:
        match = re.search(r"metastore ready: node id (\d+)", node.log_path.read_text())
        assert match, node.log_tail()
        found.append(int(match.group(1)))
    return found


def metric(node: NodeProcess, name: str) -> int:
    text = requests.get(node.url + "/metrics", timeout=TIMEOUT).text
    return int(next(line.split()[1] for line in text.splitlines() if line.startswith(name + " ")))


def new_catalog(cluster: Cluster, auth: dict[str, str]) -> tuple[str, str]:
    """A fresh tenant and catalog (created through the first node), and its token."""
    tenant = f"t{secrets.token_hex(4)}"
    url = cluster.nodes[0].url
    created = requests.post(
        f"{url}/api/v1/tenants", json={"name": tenant}, headers=auth, timeout=TIMEOUT
    )
    assert created.status_code == 201, created.text
    headers = {**auth, HEADER: created.headers[HEADER]}
    created = requests.post(
        f"{url}/api/v1/tenants/{tenant}/catalogs",
        json={"name": "c"},
        headers=headers,
        timeout=TIMEOUT,
    )
    assert created.status_code == 201, created.text
    return tenant, created.headers[HEADER]


# --- the cluster forms -----------------------------------------------------------------


def test_the_cluster_forms_with_auth_on_and_every_node_leases_an_id(cluster: Cluster) -> None:
    assert len(cluster.alive()) == 3
    ids = node_ids(cluster)
    assert len(set(ids)) == 3, ids
    # a node is ready (its /health says so) before each of its partitions' owners has
    # read its own barrier back: wait for that, then every partition has one owner
    owned = cluster.wait_balanced()
    assert sorted(p for ps in owned for p in ps) == list(range(cluster.config.partitions))


def test_a_client_without_a_token_is_refused_by_every_node(cluster: Cluster) -> None:
    auth = bearer(cluster.nodes[0].url)
    tenant, token = new_catalog(cluster, auth)
    path = f"/api/v1/tenants/{tenant}/catalogs/c/namespaces"
    for node in cluster.nodes:
        assert_refused(requests.get(node.url + path, timeout=TIMEOUT))
        assert_refused(requests.get(node.url + "/v1/config", timeout=TIMEOUT))
        written = requests.post(node.url + path, json={"namespace": ["anon"]}, timeout=TIMEOUT)
        assert_refused(written)
        assert health(node)["status"] == "ok"  # open paths stay open
    listed = requests.get(
        cluster.nodes[1].url + path, headers={**auth, HEADER: token}, timeout=TIMEOUT
    )
    assert listed.status_code == 200 and listed.json()["namespaces"] == [], listed.text


def test_a_compressed_write_is_forwarded_as_its_owner_reads_it(cluster: Cluster) -> None:
    """The forward sent the body as the client coded it but without its
    Content-Encoding: a gzip write through a node that did not own the catalog was a
    400 (the owner read gzip as JSON), through the owner a 201."""
    auth = bearer(cluster.nodes[0].url)
    tenant, token = new_catalog(cluster, auth)
    owner = cluster.wait_owner(cluster.partition(tenant, "c"))
    path = f"/api/v1/tenants/{tenant}/catalogs/c/namespaces"
    for i, node in enumerate(cluster.nodes):
        body = gzip.compress(json.dumps({"namespace": [f"zipped{i}"]}).encode())
        headers = {**auth, HEADER: token, "Content-Encoding": "gzip"}
        headers["Content-Type"] = "application/json"
        reply = requests.post(node.url + path, data=body, headers=headers, timeout=TIMEOUT)
        assert reply.status_code == 201, (node is owner, reply.text)
        token = reply.headers[HEADER]


def test_a_consistency_token_is_waited_for_only_when_a_node_issued_it_to_the_caller(
    cluster: Cluster,
) -> None:
    """A node waited for any token it was sent before it knew the sender: anyone could
    hold any request for the whole bound (then 503), and how long it waited told how
    far a partition's log (every tenant's writes) had come. Now a token is checked,
    then waited for, after authentication, and its tag covers its partition and offset."""
    auth = bearer(cluster.nodes[0].url)
    tenant, token = new_catalog(cluster, auth)
    partition, _, tag = token.split(":")
    path = f"/api/v1/tenants/{tenant}/catalogs/c/namespaces"
    far = f"{partition}:99999999999999999999:{tag}"  # the real tag, moved far ahead
    for node in cluster.nodes:
        anonymous = {HEADER: far}
        assert_refused(
            requests.get(node.url + "/api/v1/whoami", headers=anonymous, timeout=TIMEOUT)
        )
        # the path names the tenant: its tag is checked at once (moved: no node issued it)
        assert_refused(requests.get(node.url + path, headers=anonymous, timeout=TIMEOUT), 400)
        assert requests.get(node.url + "/health", headers=anonymous, timeout=TIMEOUT).ok
        moved = requests.get(node.url + path, headers={**auth, HEADER: far}, timeout=TIMEOUT)
        assert moved.status_code == 400 and "as it came" in moved.text, moved.text
        issued = requests.get(node.url + path, headers={**auth, HEADER: token}, timeout=TIMEOUT)
        assert issued.status_code == 200, issued.text


def test_writes_forward_to_owners_under_the_clients_identity(cluster: Cluster) -> None:
    auth = bearer(cluster.nodes[1].url)  # tokens of one node are valid on every node
    tenant, token = new_catalog(cluster, auth)
    owner = cluster.wait_owner(cluster.partition(tenant, "c"))
    others = [n for n in cluster.nodes if n is not owner]
    before = [metric(n, "metastore_forwarded_total") for n in others]
    path = f"/api/v1/tenants/{tenant}/catalogs/c/namespaces"
    # names with "/" and a namespace separator travel percent-encoded: a forward must
    # send the path exactly as received (a decoded one names another resource)
    namespace = ["a/b", "c d"]
    encoded = quote("\x1f".join(namespace), safe="")
    steps = [
        (others[0], path, {"namespace": namespace[:1]}),
        (others[1], path, {"namespace": namespace}),
        (others[1], f"{path}/{encoded}/tables", {"name": "t/1"}),
        (others[0], f"{path}/{encoded}/properties", {"updates": {"k": "v"}}),
    ]
    for node, target, body in steps:
        reply = requests.post(
            node.url + target, json=body, headers={**auth, HEADER: token}, timeout=TIMEOUT
        )
        assert reply.status_code in (200, 201), reply.text
        token = reply.headers[HEADER]
    after = [metric(n, "metastore_forwarded_total") for n in others]
    assert all(a > b for a, b in zip(after, before, strict=True)), (before, after)
    tables = requests.get(
        f"{owner.url}{path}/{encoded}/tables", headers={**auth, HEADER: token}, timeout=TIMEOUT
    ).json()["tables"]
    assert [t["name"] for t in tables] == ["t/1"]
    commits = requests.get(
        f"{owner.url}/api/v1/tenants/{tenant}/catalogs/c/commits",
        headers={**auth, HEADER: token},
        timeout=TIMEOUT,
    ).json()["commits"]
    assert [c["principal"] for c in commits[:4]] == [CLIENT] * 4


def test_a_node_with_another_secret_stops_with_one_line(
    kafka_bootstrap: str, tmp_path: Path, secret: str
) -> None:
    """Its node-id lease call is refused (401) by the owner of the system partition: it
    stops with exit status 2 and one line naming the cause, no traceback."""
    prefix = f"w{os.urandom(5).hex()}"
    members = Cluster(kafka_bootstrap, prefix, tmp_path / "members", size=1, env=_env(secret))
    intruder = Cluster(
        kafka_bootstrap, prefix, tmp_path / "intruder", size=1, env=_env(secrets.token_urlsafe(32))
    ).nodes[0]
    try:
        members.start()  # one node: it owns the system partition
        members.wait_balanced()  # its owner is ready: the intruder's lease call is answered
        intruder.spawn()
        assert intruder.proc is not None
        assert intruder.proc.wait(TIMEOUT) == 2, intruder.log_tail()
    finally:
        intruder.kill()
        members.close()
    output = intruder.log_path.read_text()
    assert "Traceback" not in output, output
    last = output.strip().splitlines()[-1]
    assert last.startswith("metastore: invalid configuration: the node at "), output
    assert members.nodes[0].url in last and "METASTORE_CLUSTER_SECRET" in last, last
    assert [line for line in output.splitlines() if line.startswith("metastore:")] == [last]
    members.logs_without_tracebacks()


# --- the internal endpoints serve nodes only -------------------------------------------


def _signed(
    secret: str, node: NodeProcess, method: str, path: str, body: bytes = b"", **extra: str
) -> dict[str, str]:
    authorization = extra.get("Authorization")
    headers = PeerKey(secret).sign(
        method, node.url, path, body, sender="http://tests", authorization=authorization
    )
    return {**headers, **extra}


def test_internal_endpoints_refuse_anything_that_is_not_a_node(
    cluster: Cluster, secret: str
) -> None:
    auth = bearer(cluster.nodes[0].url)
    lease = json.dumps(
        {
            "key": {"tenant": "x", "catalog": "y", "type": "z", "id": "1"},
            "expected_token": None,
            "new": None,
        }
    ).encode()
    other = secrets.token_urlsafe(32)
    for node in cluster.nodes:
        view = node.url + "/internal/v1/view"
        updateables = node.url + "/internal/v1/updateables"
        assert_refused(requests.get(view, timeout=TIMEOUT))
        assert_refused(requests.get(view, headers=auth, timeout=TIMEOUT))  # a client is no node
        assert_refused(requests.post(updateables, data=lease, timeout=TIMEOUT))
        assert_refused(requests.post(updateables, data=lease, headers=auth, timeout=TIMEOUT))
        wrong_secret = _signed(other, node, "GET", "/internal/v1/view")
        assert_refused(requests.get(view, headers=wrong_secret, timeout=TIMEOUT))
        # a signature made for one request does not carry over to another
        for_view = _signed(secret, node, "GET", "/internal/v1/view")
        assert_refused(requests.post(updateables, data=lease, headers=for_view, timeout=TIMEOUT))
        empty = _signed(secret, node, "POST", "/internal/v1/updateables", b"{}")
        assert_refused(requests.post(updateables, data=lease, headers=empty, timeout=TIMEOUT))
        # the credential itself works, once, for the node it names
        good = _signed(secret, node, "GET", "/internal/v1/view")
        assert requests.get(view, headers=good, timeout=TIMEOUT).status_code == 200
        assert_refused(requests.get(view, headers=good, timeout=TIMEOUT))  # replayed
        elsewhere = next(n for n in cluster.nodes if n is not node)
        misdirected = _signed(secret, elsewhere, "GET", "/internal/v1/view")
        assert_refused(requests.get(view, headers=misdirected, timeout=TIMEOUT))
    assert view_state(cluster.nodes[0], secret)["digest"]


def test_a_client_cannot_forge_a_forwarded_write(cluster: Cluster, secret: str) -> None:
    auth = bearer(cluster.nodes[0].url)
    tenant, token = new_catalog(cluster, auth)
    owner = cluster.wait_owner(cluster.partition(tenant, "c"))
    path = f"/api/v1/tenants/{tenant}/catalogs/c/namespaces"
    body = json.dumps({"namespace": ["forged"]}).encode()
    plain = {**auth, HEADER: token, "Content-Type": "application/json"}
    for node in cluster.nodes:
        forged = {**plain, FORWARDED_HEADER: "http://10.0.0.9:8181"}
        assert_refused(requests.post(node.url + path, data=body, headers=forged, timeout=TIMEOUT))
        forged[SIGNATURE_HEADER] = "v1 1 " + "0" * 32 + " AAAA"
        assert_refused(requests.post(node.url + path, data=body, headers=forged, timeout=TIMEOUT))
    # a node's signature does not stand in for the client: no token, no write
    unauthenticated = {"Content-Type": "application/json", HEADER: token}
    signed = _signed(secret, owner, "POST", path, body)
    assert_refused(
        requests.post(
            owner.url + path, data=body, headers={**unauthenticated, **signed}, timeout=TIMEOUT
        )
    )
    # the same request, signed, with the client's token: the owner accepts it as forwarded
    signed = _signed(secret, owner, "POST", path, body, **plain)
    accepted = requests.post(owner.url + path, data=body, headers=signed, timeout=TIMEOUT)
    assert accepted.status_code == 201, accepted.text
    listed = requests.get(
        owner.url + path, headers={**auth, HEADER: accepted.headers[HEADER]}, timeout=TIMEOUT
    ).json()["namespaces"]
    assert [n["namespace"] for n in listed] == [
        ["forged"]
    ]  # exactly one: every refused attempt wrote nothing


# --- failover ----------------------------------------------------------------------------


def test_an_owner_killed_with_kill_9_fails_over(cluster: Cluster) -> None:
    """Last in this module: it kills a node of the shared cluster."""
    auth = bearer(cluster.nodes[0].url)
    tenant, token = new_catalog(cluster, auth)
    owner = cluster.wait_owner(cluster.partition(tenant, "c"))
    survivors = [n for n in cluster.nodes if n is not owner]
    owner.kill()
    path = f"/api/v1/tenants/{tenant}/catalogs/c/namespaces"
    # the survivor forwards (retrying for up to forward_timeout_s) until a new owner answers
    reply = requests.post(
        survivors[0].url + path,
        json={"namespace": ["after"]},
        headers={**auth, HEADER: token},
        timeout=120,
    )
    assert reply.status_code == 201, reply.text
    new_owner = cluster.wait_owner(cluster.partition(tenant, "c"), among=survivors)
    assert new_owner in survivors
    listed = requests.get(
        survivors[1].url + path, headers={**auth, HEADER: reply.headers[HEADER]}, timeout=TIMEOUT
    )
    assert [n["namespace"] for n in listed.json()["namespaces"]] == [["after"]], listed.text


# --- HTTPS and mutual TLS ----------------------------------------------------------------


class HttpsNode(NodeProcess):
    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def _self_signed(subject: str, key: Path, certificate: Path) -> None:
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", subject,
        "-keyout", str(key), "-out", str(certificate),
    )  # fmt: skip


def make_certificates(folder: Path) -> dict[str, Path]:
    """A CA, a node certificate for 127.0.0.1 signed by it, and a stranger's self-signed one."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        name: folder / f"{name}.pem"
        for name in ("ca", "ca-key", "node", "node-key", "stranger", "stranger-key")
    }
    _self_signed("/CN=metastore test CA", files["ca-key"], files["ca"])
    csr = folder / "node.csr"
    _openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        str(files["node-key"]),
        "-out",
        str(csr),
    )
    extensions = folder / "san.cnf"
    extensions.write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n")
    _openssl(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(files["ca"]),
        "-CAkey",
        str(files["ca-key"]),
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        str(extensions),
        "-out",
        str(files["node"]),
    )
    _self_signed("/CN=127.0.0.1", files["stranger-key"], files["stranger"])
    return files


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_nodes_over_https_with_mutual_tls(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    certs = make_certificates(tmp_path / "certs")
    monkeypatch.setenv("SSL_CERT_FILE", str(certs["ca"]))  # the helpers' health checks
    secret = secrets.token_urlsafe(32)
    env = {
        **_env(secret),
        "METASTORE_TLS_CERT": str(certs["node"]),
        "METASTORE_TLS_KEY": str(certs["node-key"]),
        "METASTORE_TLS_CA": str(certs["ca"]),
    }
    nodes = Cluster(
        kafka_bootstrap,
        f"m{os.urandom(5).hex()}",
        tmp_path / "nodes",
        size=2,
        env=env,
        node_type=HttpsNode,
    )
    try:
        nodes.start()  # node-id leases over HTTPS, with client certificates
        ca = str(certs["ca"])
        first, second = nodes.nodes
        assert requests.get(first.url + "/health", verify=ca, timeout=TIMEOUT).status_code == 200
        with pytest.raises(requests.exceptions.SSLError):  # the nodes' CA, not the system's
            requests.get(first.url + "/health", verify=True, timeout=TIMEOUT)
        session = requests.Session()
        session.trust_env = False  # REQUESTS_CA_BUNDLE would replace the CA given here
        session.verify = ca
        auth = bearer(first.url, session)  # an API client needs no certificate
        tenant = f"t{secrets.token_hex(4)}"
        made = session.post(
            f"{second.url}/api/v1/tenants", json={"name": tenant}, headers=auth, timeout=TIMEOUT
        )
        assert made.status_code == 201, made.text
        owner = nodes.wait_owner(nodes.partition(tenant, "c"))
        other = second if owner is first else first
        made = session.post(
            f"{other.url}/api/v1/tenants/{tenant}/catalogs",
            json={"name": "c"},
            headers={**auth, HEADER: made.headers[HEADER]},
            timeout=TIMEOUT,
        )
        assert made.status_code == 201, made.text  # forwarded over mutual TLS
        assert metric_tls(other, ca, "metastore_forwarded_total") > 0

        # a valid signature is not enough without a certificate the CA signed
        path = "/internal/v1/view"
        signed = PeerKey(secret).sign("GET", first.url, path, b"", sender="http://tests")
        assert_refused(session.get(first.url + path, headers=signed, timeout=TIMEOUT))
        signed = PeerKey(secret).sign("GET", first.url, path, b"", sender="http://tests")
        with_cert = session.get(
            first.url + path,
            headers=signed,
            timeout=TIMEOUT,
            cert=(str(certs["node"]), str(certs["node-key"])),
        )
        assert with_cert.status_code == 200, with_cert.text
        # a stranger's certificate: the node drops the connection (TLS 1.3 checks it
        # after the client's side of the handshake, so the client sees a disconnect)
        with pytest.raises(requests.exceptions.ConnectionError):
            session.get(
                first.url + "/health",
                timeout=TIMEOUT,
                cert=(str(certs["stranger"]), str(certs["stranger-key"])),
            )
    finally:
        nodes.close()
    nodes.logs_without_tracebacks()


def metric_tls(node: NodeProcess, ca: str, name: str) -> int:
    text = requests.get(node.url + "/metrics", verify=ca, timeout=TIMEOUT).text
    return int(next(line.split()[1] for line in text.splitlines() if line.startswith(name + " ")))
