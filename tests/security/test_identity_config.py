"""Identity settings fail closed: service admins and the identity provider are checked at
startup, a bad value is one line naming its variable (exit status 2 from serve)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from metastore.config.server_config import ServerConfig
from metastore.util.setting_rules import ConfigError
from tests.config.test_config import assert_refused, serve
from tests.security.test_oidc_keys import ec_jwk, rsa_jwk

ISSUER = "https://idp.example.com/realms/acme"
PROVIDER = {
    "METASTORE_OIDC_ISSUER": ISSUER,
    "METASTORE_OIDC_AUDIENCE": "metastore",
    "METASTORE_OIDC_JWKS_URL": "https://idp.example.com/realms/acme/certs",
}


def jwks_file(tmp_path: Path, content: object) -> str:
    path = tmp_path / "jwks.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


REFUSED: list[tuple[dict[str, str], str, str]] = [
    # (settings, variable named, part of the message)
    ({"METASTORE_AUTH_ADMINS": "al ice"}, "METASTORE_AUTH_ADMINS", "entry 1 is not a principal id"),
    ({"METASTORE_AUTH_ADMINS": "root,"}, "METASTORE_AUTH_ADMINS", "entry 2 is not a principal id"),
    ({"METASTORE_AUTH_ADMINS": "a@b@c"}, "METASTORE_AUTH_ADMINS", "entry 1 is not a principal id"),
    ({"METASTORE_AUTH_ADMINS": "ops@"}, "METASTORE_AUTH_ADMINS", "entry 1 is not a principal id"),
    ({"METASTORE_AUTH_ADMINS": "anonymous"}, "METASTORE_AUTH_ADMINS", "is reserved"),
    ({"METASTORE_AUTH_ADMINS": "admin:root"}, "METASTORE_AUTH_ADMINS", "must be service or user"),
    ({"METASTORE_AUTH_ADMINS": "user:"}, "METASTORE_AUTH_ADMINS", "entry 1 is not a principal id"),
    # with a provider, a bare id of its tenant could be a service principal or a user
    ({**PROVIDER, "METASTORE_AUTH_ADMINS": "ops"}, "METASTORE_AUTH_ADMINS", "write service:ops"),
    (
        {**PROVIDER, "METASTORE_OIDC_TENANT": "acme", "METASTORE_AUTH_ADMINS": "root,ops@acme"},
        "METASTORE_AUTH_ADMINS",
        "entry 2 (ops@acme) is in the identity provider's tenant acme",
    ),
    ({"METASTORE_AUTH_CLIENTS": "system:long-enough"}, "METASTORE_AUTH_CLIENTS", "reserved"),
    # a setting not given is named by its variable, the name the operator would set
    ({"METASTORE_OIDC_AUDIENCE": "metastore"}, "METASTORE_OIDC_ISSUER", "not set"),
    ({"METASTORE_OIDC_ROLES_CLAIM": "roles"}, "METASTORE_OIDC_ISSUER", "not set"),
    ({**PROVIDER, "METASTORE_OIDC_ISSUER": "acme"}, "METASTORE_OIDC_ISSUER", "https:// URL"),
    ({**PROVIDER, "METASTORE_OIDC_AUDIENCE": ""}, "METASTORE_OIDC_AUDIENCE", "not set"),
    ({**PROVIDER, "METASTORE_OIDC_AUDIENCE": "a b"}, "METASTORE_OIDC_AUDIENCE", "no spaces"),
    ({**PROVIDER, "METASTORE_OIDC_JWKS_URL": ""}, "METASTORE_OIDC_JWKS_URL", "exactly one of"),
    ({**PROVIDER, "METASTORE_OIDC_JWKS_FILE": "/x"}, "METASTORE_OIDC_JWKS_URL", "exactly one"),
    ({**PROVIDER, "METASTORE_OIDC_JWKS_URL": "file:///k"}, "METASTORE_OIDC_JWKS_URL", "https://"),
    (
        {**PROVIDER, "METASTORE_OIDC_PRINCIPAL_CLAIM": "a..b"},
        "METASTORE_OIDC_PRINCIPAL_CLAIM",
        "claim",
    ),
    ({**PROVIDER, "METASTORE_OIDC_ROLES_CLAIM": "ro les"}, "METASTORE_OIDC_ROLES_CLAIM", "claim"),
    ({**PROVIDER, "METASTORE_OIDC_TENANT": "-x"}, "METASTORE_OIDC_TENANT", "invalid tenant"),
    (
        {**PROVIDER, "METASTORE_OIDC_LEEWAY_S": "301"},
        "METASTORE_OIDC_LEEWAY_S",
        "between 0 and 300",
    ),
    ({**PROVIDER, "METASTORE_OIDC_LEEWAY_S": "-1"}, "METASTORE_OIDC_LEEWAY_S", "between 0 and 300"),
    ({**PROVIDER, "METASTORE_OIDC_JWKS_REFRESH_S": "nan"}, "METASTORE_OIDC_JWKS_REFRESH_S", "nan"),
    (
        {**PROVIDER, "METASTORE_OIDC_JWKS_MAX_AGE_S": "0"},
        "METASTORE_OIDC_JWKS_MAX_AGE_S",
        "between 1",
    ),
]


@pytest.mark.parametrize(("env", "variable", "problem"), REFUSED)
def test_a_bad_identity_setting_is_refused_naming_it(
    env: dict[str, str], variable: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        ServerConfig.load({}, env=env)
    message = str(refused.value)
    assert message.startswith(f"{variable}: ") and problem in message, message
    assert "\n" not in message and "long-enough" not in message


def test_a_jwks_file_must_be_readable_and_hold_a_signing_key(tmp_path: Path) -> None:
    base = {k: v for k, v in PROVIDER.items() if k != "METASTORE_OIDC_JWKS_URL"}
    for content, problem in (
        ("not json", "not a JWKS"),
        ({"keys": []}, "not a JWKS"),
        ({"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "h"}]}, "no signing key"),
    ):
        env = {**base, "METASTORE_OIDC_JWKS_FILE": jwks_file(tmp_path, content)}
        with pytest.raises(ConfigError, match=problem) as refused:
            ServerConfig.load({}, env=env)
        assert str(refused.value).startswith("METASTORE_OIDC_JWKS_FILE: ")
    env = {**base, "METASTORE_OIDC_JWKS_FILE": str(tmp_path / "missing.json")}
    with pytest.raises(ConfigError, match="cannot read it"):
        ServerConfig.load({}, env=env)


def test_accepted_identity_settings(tmp_path: Path) -> None:
    config = ServerConfig.load({}, env={"METASTORE_AUTH_ADMINS": "root,ops@acme,bob@default"})
    admins = {("service", "root"), ("service", "ops@acme"), ("service", "bob")}
    assert config.service_admins == admins
    assert config.oidc is None
    env = {
        **PROVIDER,
        "METASTORE_AUTH_CLIENTS": "root:long-enough",
        "METASTORE_AUTH_ADMINS": "root,user:ops,service:svc,user:ana@acme,bob@acme",
    }
    assert ServerConfig.load({}, env=env).service_admins == {
        ("service", "root"),  # a bootstrap client: a service principal in the provider's tenant
        ("user", "ops"),
        ("service", "svc"),
        ("user", "ana@acme"),
        ("service", "bob@acme"),  # not the provider's tenant: no user there
    }
    keys = {"keys": [rsa_jwk("a"), ec_jwk("b")]}
    env = {
        "METASTORE_OIDC_ISSUER": ISSUER,
        "METASTORE_OIDC_AUDIENCE": "metastore",
        "METASTORE_OIDC_JWKS_FILE": jwks_file(tmp_path, keys),
        "METASTORE_OIDC_PRINCIPAL_CLAIM": "preferred_username",
        "METASTORE_OIDC_ROLES_CLAIM": "realm_access.roles",
        "METASTORE_OIDC_LEEWAY_S": "0",
    }
    oidc = ServerConfig.load({}, env=env).oidc
    assert oidc is not None and oidc.tenant == "default" and oidc.leeway_s == 0
    assert oidc.roles_claim == "realm_access.roles"


def test_serve_refuses_bad_identity_settings_with_one_line(tmp_path: Path) -> None:
    done = serve(tmp_path, env={"METASTORE_AUTH_ADMINS": "bad id"})
    assert_refused(done, "METASTORE_AUTH_ADMINS: entry 1 is not a principal id")
    done = serve(tmp_path, env={**PROVIDER, "METASTORE_OIDC_JWKS_FILE": str(tmp_path / "k")})
    assert_refused(done, "METASTORE_OIDC_JWKS_URL: set exactly one of METASTORE_OIDC_JWKS_URL")
