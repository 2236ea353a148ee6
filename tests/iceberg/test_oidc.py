"""Tokens of an external identity provider against a real node. The test is the provider:
it makes its own RSA and EC keys and serves their JWKS over real HTTP from a local
server, rotates them, and signs tokens; the node fetches the keys itself."""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm
from pyiceberg.catalog.rest import RestCatalog

from harness.node import NodeProcess
from tests.iceberg.test_auth import node

ISSUER = "https://idp.test/realms/acme"
AUDIENCE = "metastore"
SERVICE = ("svc", "svc-secret-1")


class SigningKey:
    def __init__(self, algorithm: str) -> None:
        self.kid = uuid.uuid4().hex[:12]
        self.algorithm = algorithm
        if algorithm == "RS256":
            self.private: Any = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            self.jwk = json.loads(RSAAlgorithm.to_jwk(self.private.public_key()))
        else:
            self.private = ec.generate_private_key(ec.SECP256R1())
            self.jwk = json.loads(ECAlgorithm.to_jwk(self.private.public_key()))
        self.jwk |= {"kid": self.kid, "use": "sig", "alg": algorithm}

    def public_pem(self) -> bytes:
        return bytes(
            self.private.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )


class Provider:
    """An identity provider: a JWKS served over HTTP (per path, so each node can have its
    own and its reads can be counted), and tokens signed with its keys."""

    def __init__(self) -> None:
        self.rsa, self.ec = SigningKey("RS256"), SigningKey("ES256")
        self.published: dict[str, list[SigningKey]] = {}
        self.reads: Counter[str] = Counter()
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                keys = provider.published.get(self.path)
                provider.reads[self.path] += 1
                body = json.dumps({"keys": [k.jwk for k in keys or []]}).encode()
                self.send_response(200 if keys is not None else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_port}{path}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()

    def claims(self, subject: str, **changes: Any) -> dict[str, Any]:
        now = int(time.time())
        claims = {
            "iss": ISSUER,
            "aud": [AUDIENCE, "account"],
            "sub": str(uuid.uuid4()),
            "preferred_username": subject,
            "realm_access": {"roles": ["reader", "writer"]},
            "iat": now,
            "exp": now + 300,
        }
        claims.update(changes)
        return {k: v for k, v in claims.items() if v is not None}

    def token(self, subject: str, key: SigningKey | None = None, **changes: Any) -> str:
        key = key or self.rsa
        headers = {"kid": key.kid}
        return jwt.encode(
            self.claims(subject, **changes), key.private, algorithm=key.algorithm, headers=headers
        )


@pytest.fixture(scope="module")
def provider() -> Iterator[Provider]:
    idp = Provider()
    yield idp
    idp.close()


def provider_env(provider: Provider, path: str, **more: str) -> dict[str, str]:
    provider.published.setdefault(path, [provider.rsa, provider.ec])
    return {
        "METASTORE_AUTH_CLIENTS": ":".join(SERVICE),
        # ops: a provider user; keeper: a service principal that does not exist (yet)
        "METASTORE_AUTH_ADMINS": "user:ops,service:keeper",
        "METASTORE_OIDC_ISSUER": ISSUER,
        "METASTORE_OIDC_AUDIENCE": AUDIENCE,
        "METASTORE_OIDC_JWKS_URL": provider.url(path),
        "METASTORE_OIDC_PRINCIPAL_CLAIM": "preferred_username",
        "METASTORE_OIDC_ROLES_CLAIM": "realm_access.roles",
        "METASTORE_OIDC_LEEWAY_S": "30",
        "METASTORE_OIDC_JWKS_REFRESH_S": "0",
        **more,
    }


@pytest.fixture(scope="module")
def oidc_node(
    provider: Provider, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[NodeProcess]:
    with node(tmp_path_factory.mktemp("oidc"), provider_env(provider, "/main")) as process:
        yield process


def call(url: str, token: str, method: str = "GET", path: str = "/api/v1/whoami", **kw: Any) -> Any:
    headers = {"Authorization": f"Bearer {token}"}
    return requests.request(method, url + path, headers=headers, timeout=60, **kw)


def test_rs256_and_es256_tokens_name_a_user_with_its_roles(
    provider: Provider, oidc_node: NodeProcess
) -> None:
    for key in (provider.rsa, provider.ec):
        reply = call(oidc_node.url, provider.token("ana", key))
        assert reply.status_code == 200, reply.text
        assert reply.json() == {
            "id": "ana",
            "tenant": "default",
            "name": "ana",
            "kind": "user",
            "roles": ["reader", "writer"],
            "service-admin": False,
        }
    spaced = provider.token("ana", realm_access={"roles": "writer reader bad/role"})
    assert call(oidc_node.url, spaced).json()["roles"] == ["reader", "writer"]
    assert call(oidc_node.url, provider.token("ops")).json()["service-admin"] is True


def test_a_user_commits_under_its_name_on_both_apis(
    provider: Provider, oidc_node: NodeProcess
) -> None:
    token = provider.token("ops")
    catalog = f"c{uuid.uuid4().hex[:8]}"
    reply = call(
        oidc_node.url, token, "POST", "/api/v1/tenants/default/catalogs", json={"name": catalog}
    )
    assert reply.status_code == 201, reply.text
    client = RestCatalog("idp", uri=oidc_node.url, warehouse=catalog, token=token)
    client.create_namespace(("sales",))
    client.close()
    history = call(oidc_node.url, token, path=f"/api/v1/tenants/default/catalogs/{catalog}/commits")
    assert {c["principal"] for c in history.json()["commits"]} == {"ops"}, history.text


def test_a_key_the_provider_rotates_in_is_fetched_on_first_use(
    provider: Provider, oidc_node: NodeProcess
) -> None:
    new = SigningKey("RS256")
    stranger = provider.token("ana", new)
    assert call(oidc_node.url, stranger).status_code == 401  # not published yet
    provider.published["/main"] = [new, provider.ec]  # the provider rotates its RSA key
    try:
        assert call(oidc_node.url, provider.token("ana", new)).status_code == 200
        assert call(oidc_node.url, stranger).status_code == 200  # the same key, now published
    finally:
        provider.published["/main"] = [provider.rsa, provider.ec]


def test_forged_and_foreign_tokens_are_refused(provider: Provider, oidc_node: NodeProcess) -> None:
    rsa_key, ec_key = provider.rsa, provider.ec
    now = int(time.time())
    other = SigningKey("RS256")
    claims = provider.claims("ana")
    header = {"alg": "HS256", "typ": "JWT", "kid": rsa_key.kid}
    raw = [
        base64.urlsafe_b64encode(json.dumps(part).encode()).decode().rstrip("=")
        for part in ({"alg": "none", "typ": "JWT", "kid": rsa_key.kid}, claims)
    ]
    refused = {
        "another issuer": provider.token("ana", rsa_key, iss="https://evil.test/realms/acme"),
        "another audience": provider.token("ana", rsa_key, aud="someone-else"),
        "no audience": provider.token("ana", rsa_key, aud=None),
        "expired past the leeway": provider.token("ana", rsa_key, iat=now - 900, exp=now - 60),
        "not yet valid": provider.token("ana", rsa_key, nbf=now + 600),
        "no expiry": provider.token("ana", rsa_key, exp=None),
        "signed by a stranger under a known kid": jwt.encode(
            claims, other.private, algorithm="RS256", headers={"kid": rsa_key.kid}
        ),
        "alg none": f"{raw[0]}.{raw[1]}.",
        "HS256 with the public key as secret": hs256(claims, rsa_key.public_pem(), header),
        "ES256 header on an RSA kid": jwt.encode(
            claims, ec_key.private, algorithm="ES256", headers={"kid": rsa_key.kid}
        ),
        "no principal claim": provider.token("ana", rsa_key, preferred_username=None),
        "an email for a name": provider.token("ana@example.com", rsa_key),
        "a reserved name": provider.token("system", rsa_key),
        "a service principal's name": provider.token(SERVICE[0], rsa_key),
    }
    for what, token in refused.items():
        reply = call(oidc_node.url, token)
        assert reply.status_code == 401, f"{what}: {reply.text}"
        assert reply.json()["error"]["type"] == "NotAuthorizedException", what
    assert call(oidc_node.url, provider.token("ana", rsa_key)).status_code == 200  # control
    # an expired token within the leeway still passes: clocks differ
    assert call(oidc_node.url, provider.token("ana", rsa_key, exp=now - 5)).status_code == 200


def hs256(claims: dict[str, Any], secret: bytes, header: dict[str, str]) -> str:
    """What PyJWT refuses to make (a PEM as an HMAC secret), made by hand: the attack."""
    import hashlib
    import hmac

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).decode().rstrip("=")

    head = b64(json.dumps(header).encode()) + "." + b64(json.dumps(claims).encode())
    signature = hmac.new(secret, head.encode(), hashlib.sha256).digest()
    return head + "." + b64(signature)


def test_a_disabled_user_record_refuses_that_users_tokens(
    provider: Provider, oidc_node: NodeProcess
) -> None:
    admin = provider.token("ops")
    bob = provider.token("bob")
    assert call(oidc_node.url, bob).status_code == 200  # no record needed
    users = "/api/v1/tenants/default/principals"
    body = {"name": "bob", "type": "user"}
    assert call(oidc_node.url, admin, "POST", users, json=body).status_code == 201
    assert call(oidc_node.url, bob).status_code == 200  # a record, enabled
    assert call(oidc_node.url, admin, "POST", users + "/bob/disable").status_code == 200
    reply = call(oidc_node.url, bob)
    assert reply.status_code == 401 and "disabled" in reply.json()["error"]["message"]
    assert call(oidc_node.url, provider.token("bob")).status_code == 401  # new tokens too
    assert call(oidc_node.url, admin, "POST", users + "/bob/enable").status_code == 200
    assert call(oidc_node.url, bob).status_code == 200


def test_a_provider_user_is_no_service_admin_by_a_service_principals_entry(
    provider: Provider, oidc_node: NodeProcess
) -> None:
    """``service:keeper`` names a service principal: while none exists (never created, or
    deleted), a provider user who signs in as keeper is an ordinary user."""
    keeper = provider.token("keeper")
    assert call(oidc_node.url, keeper).json()["service-admin"] is False
    tenant = call(oidc_node.url, keeper, "POST", "/api/v1/tenants", json={"name": "kept"})
    assert tenant.status_code == 403, tenant.text
    admin = provider.token("ops")
    users = "/api/v1/tenants/default/principals"
    made = call(oidc_node.url, admin, "POST", users, json={"name": "keeper"})
    assert made.status_code == 201, made.text
    assert call(oidc_node.url, admin, "DELETE", users + "/keeper").status_code == 204
    assert call(oidc_node.url, provider.token("keeper")).json()["service-admin"] is False


def test_principal_privileges_cannot_shut_out_a_provider_user(
    provider: Provider, oidc_node: NodeProcess
) -> None:
    """The provider's users hold their roles (tenant_admin too) by their tokens, so the
    node cannot tell whom a service principal of their name, or their disabled record,
    would shut out: in the provider's tenant that is a tenant admin's to do."""
    admin = provider.token("ops")
    base = "/api/v1/tenants/default"
    suffix = uuid.uuid4().hex[:6]
    helper, role = f"helper{suffix}", f"onboarding{suffix}"
    made = call(oidc_node.url, admin, "POST", base + "/principals", json={"name": helper})
    secret = made.json()["client-secret"]
    made = call(oidc_node.url, admin, "POST", base + "/principal-roles", json={"name": role})
    assert made.status_code == 201, made.text
    for privilege in ("PRINCIPAL_CREATE", "PRINCIPAL_WRITE_PROPERTIES"):
        grant = {"privilege": privilege}
        path = f"{base}/principal-roles/{role}/grants"
        assert call(oidc_node.url, admin, "POST", path, json=grant).status_code < 300
    member = {"principal": helper}
    path = f"{base}/principal-roles/{role}/principals"
    assert call(oidc_node.url, admin, "POST", path, json=member).status_code < 300
    token = requests.post(
        oidc_node.url + "/v1/oauth/tokens",
        data={"grant_type": "client_credentials", "client_id": helper, "client_secret": secret},
        timeout=60,
    ).json()["access_token"]
    boss, boss2 = f"boss{suffix}", f"bosstwo{suffix}"
    roles = {"roles": ["tenant_admin"]}
    shadow = call(oidc_node.url, token, "POST", base + "/principals", json={"name": boss})
    assert shadow.status_code == 403 and "shut out" in shadow.text, shadow.text
    assert call(oidc_node.url, provider.token(boss, realm_access=roles)).status_code == 200
    record = {"name": boss2, "type": "user"}
    assert call(oidc_node.url, token, "POST", base + "/principals", json=record).status_code == 201
    disabled = call(oidc_node.url, token, "POST", f"{base}/principals/{boss2}/disable")
    assert disabled.status_code == 403, disabled.text
    assert call(oidc_node.url, provider.token(boss2, realm_access=roles)).status_code == 200
    # a service principal's record is not a user's: the privilege disables it as ever
    worker = f"worker{suffix}"
    made = call(oidc_node.url, admin, "POST", base + "/principals", json={"name": worker})
    assert made.status_code == 201, made.text
    done = call(oidc_node.url, token, "POST", f"{base}/principals/{worker}/disable")
    assert done.status_code == 200, done.text


def test_unknown_kids_read_the_jwks_at_most_once_per_interval(
    provider: Provider, tmp_path: Path
) -> None:
    env = provider_env(provider, "/slow", METASTORE_OIDC_JWKS_REFRESH_S="3600")
    with node(tmp_path, env) as process:
        assert call(process.url, provider.token("ana")).status_code == 200
        assert provider.reads["/slow"] == 1
        for _ in range(20):
            stranger = SigningKey("RS256")
            assert call(process.url, provider.token("ana", stranger)).status_code == 401
        assert provider.reads["/slow"] == 1  # made-up kids never reach the provider
        assert call(process.url, provider.token("ana", provider.ec)).status_code == 200


def test_keys_from_a_file_and_a_tenant_from_settings(provider: Provider, tmp_path: Path) -> None:
    keys = tmp_path / "jwks.json"
    keys.write_text(json.dumps({"keys": [provider.ec.jwk]}))
    env = {
        "METASTORE_AUTH_CLIENTS": ":".join(SERVICE),
        "METASTORE_AUTH_ADMINS": "svc",
        "METASTORE_OIDC_ISSUER": ISSUER,
        "METASTORE_OIDC_AUDIENCE": AUDIENCE,
        "METASTORE_OIDC_JWKS_FILE": str(keys),
        "METASTORE_OIDC_TENANT": "acme",
    }
    with node(tmp_path, env) as process:
        token = provider.token("ana", provider.ec)
        reply = call(process.url, token)
        assert reply.status_code == 401, reply.text  # tenant acme does not exist yet
        service = requests.post(
            process.url + "/v1/oauth/tokens",
            data={
                "grant_type": "client_credentials",
                "client_id": SERVICE[0],
                "client_secret": SERVICE[1],
            },
            timeout=60,
        ).json()["access_token"]
        created = call(process.url, service, "POST", "/api/v1/tenants", json={"name": "acme"})
        assert created.status_code == 201, created.text
        me = call(process.url, token).json()
        assert me["id"] == me["name"] + "@acme" and me["tenant"] == "acme", me
        assert me["roles"] == [] and me["name"] == claims_sub(token)  # the default claim: sub
        assert call(process.url, provider.token("ana", provider.rsa)).status_code == 401


def claims_sub(token: str) -> str:
    return str(jwt.decode(token, options={"verify_signature": False})["sub"])
