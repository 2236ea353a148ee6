"""Frozen server configuration: defaults < environment (METASTORE_*) < command-line flags.

Every setting is checked once, in ``ServerConfig.__post_init__`` (rules in
``metastore.util.setting_rules``): a value the node does not recognise stops it with
one line naming the setting as the operator wrote it, never a silent fallback.
Secret settings are kept out of ``describe()`` and out of error messages.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import cast

from metastore.catalog.quotas import Quota
from metastore.cluster import tls
from metastore.cluster.cluster_config import (
    MAX_PARTITIONS,
    BrokerProfile,
    load_properties,
    parse_profile,
)
from metastore.cluster.peer_auth import (
    MIN_SECRET_LENGTH,
    SECRET_ENV,
    SECRET_FILE_ENV,
    resolve_secret,
)
from metastore.config.environment import (
    ENV_PREFIX,
    parse_variable,
    refuse_unknown_variables,
    setting_names,
)
from metastore.engine.commits import DEFAULT_MAX_OBJECT_BYTES
from metastore.engine.paging import MAX_PAGE_SIZE
from metastore.errors import BadRequest, InvalidName
from metastore.iceberg.bounded_input import DEFAULT_READ_LIMIT
from metastore.model.locations import Location, is_inside
from metastore.model.names import check_system_name
from metastore.persistence.base import DEFAULT_RECENT_HEADS
from metastore.security.oidc import OidcSettings
from metastore.security.principal_settings import parse_admins, parse_clients
from metastore.storage import io_rules
from metastore.storage.catalog_storage import NodeStorage
from metastore.storage.credentials import (
    NODE_IO_ENV,
    Credentials,
    CredentialSources,
    io_key_problem,
    is_secret_key,
)
from metastore.storage.remote_signing import RemoteSigning
from metastore.storage.settings import parse_prefix
from metastore.storage.vending import VendingSettings
from metastore.util import cpu_pinning
from metastore.util.setting_rules import (
    AUTH_MODES,
    LOG_FORMATS,
    LOG_LEVELS,
    TOPIC_NAME_PART,
    ConfigError,
    check_bootstrap,
    check_checkpoint_dir,
    check_choice,
    check_host,
    check_pattern,
    check_publish_events,
    check_range,
    check_type,
    check_uri,
    check_url,
    is_loopback,
    parse_namespace_separator,
    parse_string_map,
)

KiB, MiB, GiB = 1024, 1024**2, 1024**3
DAY_S = 86_400.0

DEFAULT_MAX_METADATA_FILE_BYTES = DEFAULT_READ_LIMIT  # a metadata file of some 50,000 snapshots

# Settings whose values are never printed (describe(), error messages).
SECRETS = frozenset({"warehouse_io", "auth_clients"})
SECRETS |= {"cluster_secret", "kafka_properties"}  # cluster security

# Inclusive bounds of every numeric setting: a value outside is a typo or a unit
# mistake (seconds for milliseconds), not a wish.
RANGES: dict[str, tuple[float, float]] = {
    "port": (1, 65535),
    "max_body_bytes": (KiB, GiB),
    "max_object_bytes": (KiB, 64 * MiB),
    "max_changes_per_commit": (1, 100_000),
    "cache_bytes": (MiB, 1024 * GiB),
    "iceberg_load_cache_bytes": (0, 1024 * GiB),
    "max_metadata_file_bytes": (64 * KiB, 16 * GiB),
    "index_embedded_bytes": (256, 16 * MiB),
    "index_stripe_bytes": (KiB, 32 * MiB),
    "recent_heads": (0, 10_000),
    "lease_seconds": (1, DAY_S),
    "gc_reclaim_s": (1, DAY_S),
    "partitions": (1, MAX_PARTITIONS),
    "session_timeout_ms": (1_000, 3_600_000),
    "forward_timeout_s": (0.001, 3_600),
    "consistency_wait_s": (0.001, 3_600),
    "token_ttl_seconds": (1, DAY_S),
    "oidc_leeway_s": (0, 300),
    "oidc_jwks_refresh_s": (0, 3_600),
    "oidc_jwks_max_age_s": (1, DAY_S),
    "token_failures_per_client": (1, 1_000_000),
    "token_failures_per_address": (1, 1_000_000),
    "token_failure_window_s": (1, DAY_S),
    "token_hash_threads": (1, 64),
    "token_hash_queue": (0, 100_000),
    "header_timeout_s": (0.1, 3_600),
    "body_timeout_s": (0.1, 3_600),
    "max_connections": (1, 1_000_000),
    "quota_requests_per_second": (0, 1_000_000),
    "quota_burst": (0, 1_000_000),
    "quota_max_namespaces": (0, 1_000_000_000_000),
    "quota_max_tables": (0, 1_000_000_000_000),
    "quota_max_views": (0, 1_000_000_000_000),
}


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8181
    data_dir: Path = Path("./data")
    fsync: bool = True  # fsync every group commit (durable across power loss)
    max_body_bytes: int = 1024 * 1024  # request bodies larger than this get 413
    max_object_bytes: int = DEFAULT_MAX_OBJECT_BYTES  # a serialized object larger -> 413
    max_changes_per_commit: int = 1000
    # --- HTTP connections: a slow or idle client holds one for a bounded time ---
    # a request head must arrive within this; also the idle keep-alive limit, so keep it
    # above clients' own idle limit (aiohttp's client, used to forward writes: 15 s)
    header_timeout_s: float = 30.0
    body_timeout_s: float = 60.0  # the whole body must arrive within this, else 408
    max_connections: int = 1024  # concurrent connections; past this: 503 and closed
    cache_bytes: int = 128 * 1024 * 1024  # decoded immutable objects
    iceberg_load_cache_bytes: int = 64 * 1024 * 1024  # Iceberg loads' metadata text; 0: off
    # one file of a catalog's storage the node reads whole: a registered metadata file, a
    # manifest list a rebase reads (clients write them; ``iceberg/bounded_input.py``)
    max_metadata_file_bytes: int = DEFAULT_MAX_METADATA_FILE_BYTES
    index_embedded_bytes: int = 4 * 1024  # spill the embedded index past this (see ARCHITECTURE)
    index_stripe_bytes: int = 64 * 1024  # split a spilled index stripe past this
    recent_heads: int = DEFAULT_RECENT_HEADS
    lease_seconds: float = 60.0  # snowflake node-id lease
    # a full collection of everything, frozen objects included, this often (node/heap.py)
    gc_reclaim_s: float = 600.0
    default_tenant: str = "default"
    default_catalog: str = "default"
    # what the Iceberg API joins namespace levels with besides 0x1F, URL-encoded as
    # /v1/config advertises it (metastore/http/params.py; the same on every node)
    iceberg_namespace_separator: str = "%1F"
    log_level: str = "INFO"
    log_format: str = "text"  # text | json (one object per line, with the request's context)
    # the CPU the node's interpreter threads run on ("" = any; metastore/util/cpu_pinning.py)
    pin_cpu: str = ""
    # --- cluster mode (``kafka`` set): see docs/ARCHITECTURE.md "Cluster mode" ---
    kafka: str = ""  # bootstrap servers; empty = embedded mode
    advertised_url: str = ""  # how peers reach this node; default http://host:port
    topic_prefix: str = "metastore"  # topics <prefix>.refs and <prefix>.objects
    cluster_id: str = "metastore"  # transactional.id = <cluster_id>.<refs topic>.<p>
    partitions: int = 12  # must match the topics (checked at startup)
    session_timeout_ms: int = 6000  # owner crash detection
    forward_timeout_s: float = 30.0  # a forwarded write gives up (503) after this
    consistency_wait_s: float = 10.0  # a read given a consistency token waits at most this
    # owners also produce each commit's change events to <prefix>.events, in its transaction
    publish_events: bool = False
    # the broker the cluster runs on: kafka (Apache Kafka, conformant) or tansu
    # (metastore.cluster.cluster_config.BROKER_PROFILES: what each can be trusted with)
    broker_profile: str = "kafka"
    # a checkpoint of a view (another node's, or `metastore rebuild --out`) to start an
    # empty view from, so the node reads only the tail ("" = read the whole log)
    restore_from: str = ""
    # --- storage: catalogs carry their own (metastore/storage/settings.py); these only seed
    # the storage of a catalog created without one: <warehouse>/<tenant>/<catalog>
    # ("" = <data_dir>/warehouse, refused in cluster mode: not shared by the nodes)
    warehouse: str = ""
    warehouse_io: str = ""  # FileIO properties as JSON, e.g. {"s3.endpoint": ...} (secret)
    warehouse_credentials: str = ""  # {"env": NAME} or {"file": PATH}: the seeded secrets
    # {"role-arn": ..., "duration-seconds": ..., "sts-endpoint": ...}: the seeded storage's
    # credential vending (metastore/storage/vending.py; an s3:// warehouse only; "" = none)
    warehouse_vending: str = ""
    # {"enabled": ..., "endpoints": [...]}: the seeded storage's remote signing
    # (metastore/storage/remote_signing.py; an s3:// warehouse only; "" = offered on request)
    warehouse_remote_signing: str = ""
    credentials_dir: str = "/run/secrets"  # credential files are read only inside it
    storage_roots: str = ""  # comma-separated prefixes every catalog's storage lies in ("" = any)
    # --- authentication: see metastore/security/authenticator.py ---
    auth: str = "auto"  # on | off | auto (off iff bound to a loopback address)
    # "id:secret,id2:secret2": service principals of the default tenant created at startup
    # if they do not exist yet; after that the API manages them (secret)
    auth_clients: str = ""
    auth_admins: str = ""  # "id,user:name@tenant": principals holding the service-admin role
    metrics_auth: bool = False  # /metrics for service admins only (else open, like /health)
    # external identity provider (OIDC): tokens it signs name users of oidc_tenant
    oidc_issuer: str = ""  # e.g. https://idp.example.com/realms/acme ("" = none)
    oidc_audience: str = ""  # the token's aud must hold it
    oidc_jwks_url: str = ""  # the provider's keys: a URL, or a file (exactly one)
    oidc_jwks_file: str = ""
    oidc_principal_claim: str = "sub"  # names the principal; a dotted path for nested claims
    oidc_roles_claim: str = ""  # the principal's roles (a list or space-separated string)
    oidc_tenant: str = ""  # the users' tenant ("" = default_tenant)
    oidc_leeway_s: float = 60.0  # clock skew allowed on exp, nbf and iat
    oidc_jwks_refresh_s: float = 30.0  # an unknown kid re-reads the keys at most this often
    oidc_jwks_max_age_s: float = 900.0  # keys older than this are read again
    token_ttl_seconds: int = 3600
    # failed token requests allowed per client id, and per source address, per window;
    # past that the token endpoint answers 429 with Retry-After
    token_failures_per_client: int = 10
    token_failures_per_address: int = 100
    token_failure_window_s: float = 60.0
    # secrets are hashed on these threads, never on the event loop; requests past
    # threads + queue answer 503 at once instead of waiting in line
    token_hash_threads: int = 2
    token_hash_queue: int = 32
    # --- per-tenant quotas (metastore/catalog/quotas.py): the node's defaults, which a tenant's
    # quota.* properties replace; 0 = no limit ---
    quota_requests_per_second: float = 0.0  # per tenant and node (a token bucket)
    quota_burst: int = 0  # requests a tenant may send at once (0 = one second's worth)
    quota_max_namespaces: int = 0  # live namespaces of a tenant, all its catalogs together
    quota_max_tables: int = 0
    quota_max_views: int = 0
    # --- cluster security: see metastore/cluster/peer_auth.py, tls.py, cluster_config.py ---
    # node-to-node HMAC key, the same on every node, >= 32 characters (secret); or a file
    # holding it. Required in cluster mode with auth on.
    cluster_secret: str = ""
    cluster_secret_file: str = ""
    tls_cert: str = ""  # PEM: serve HTTPS with it and present it to peers
    tls_key: str = ""  # PEM private key of tls_cert
    tls_ca: str = ""  # PEM bundle: peers must present a certificate it signed (mutual TLS)
    # librdkafka properties for every Kafka client (TLS, SASL): a JSON object (secret
    # values masked), or a file of key=value lines; guarantee-breaking keys are refused
    kafka_properties: str = ""
    kafka_properties_file: str = ""

    def __post_init__(self) -> None:
        for f in fields(self):
            check_type(f.name, getattr(self, f.name), str(f.type))
        # Absolute from here on: the node reports paths under it to clients (its
        # checkpoints, which ``metastore audit --url`` opens from its own directory),
        # and a relative path would mean something else wherever it is read.
        if not Path(self.data_dir).is_absolute():
            object.__setattr__(self, "data_dir", Path(self.data_dir).absolute())
        for f in fields(self):
            low, high = RANGES.get(f.name, (0, math.inf))
            if str(f.type) in ("int", "float"):  # unlisted: at least finite, not negative
                check_range(f.name, getattr(self, f.name), low, high)
        check_host("host", self.host)
        check_choice("log_level", self.log_level.upper(), LOG_LEVELS)
        check_choice("log_format", self.log_format, LOG_FORMATS)
        for name in ("default_tenant", "default_catalog"):
            try:
                check_system_name(name.replace("_", " "), getattr(self, name))
            except InvalidName as exc:
                raise ConfigError(name, exc.message) from None
        self.namespace_separator  # noqa: B018 - refuses anything but one URL-safe character
        self.pinned_cpu  # noqa: B018 - refuses a CPU this process may not run on
        if self.index_stripe_bytes < self.index_embedded_bytes:
            raise ConfigError("index_stripe_bytes", f"must be >= {ENV_PREFIX}INDEX_EMBEDDED_BYTES")
        if self.max_object_bytes < 2 * self.index_stripe_bytes:
            raise ConfigError(
                "max_object_bytes", f"must be at least twice {ENV_PREFIX}INDEX_STRIPE_BYTES"
            )
        self._check_cluster()
        if self.warehouse:
            check_uri("warehouse", self.warehouse)
        parse_string_map("warehouse_io", self.warehouse_io)
        check_choice("auth", self.auth, AUTH_MODES)
        parse_clients("auth_clients", self.auth_clients)
        self.oidc  # noqa: B018 - refuses an incomplete or unusable identity provider
        self.service_admins  # noqa: B018 - after oidc: a bare id in its tenant is ambiguous
        self._check_cluster_security()  # after auth: it depends on auth_enabled
        self._check_storage()

    def _check_cluster(self) -> None:
        if self.kafka:
            check_bootstrap("kafka", self.kafka)
        if self.advertised_url:
            check_url("advertised_url", self.advertised_url)
        if self.kafka and self.host in ("0.0.0.0", "::") and not self.advertised_url:
            raise ConfigError(
                "advertised_url",
                "not set; required when binding all interfaces in cluster mode: how peers"
                " reach this node (--advertised-url or METASTORE_ADVERTISED_URL)",
            )
        part = "1-200 of A-Z a-z 0-9 . _ -"
        check_pattern("topic_prefix", self.topic_prefix, TOPIC_NAME_PART, part)
        check_pattern("cluster_id", self.cluster_id, TOPIC_NAME_PART, part)
        check_publish_events("publish_events", self.publish_events, cluster=self.cluster_mode)
        parse_profile(self.broker_profile)
        if self.restore_from:
            check_checkpoint_dir("restore_from", self.restore_from, cluster=self.cluster_mode)

    def _check_cluster_security(self) -> None:
        secret = self.cluster_key  # reads the file: unreadable, empty or short is refused
        if self.cluster_mode and self.auth_enabled and not secret:
            raise ConfigError(
                "cluster_secret",
                "not set; cluster mode with auth on needs a cluster secret, the same on every"
                f" node ({SECRET_ENV} or {SECRET_FILE_ENV}, at least {MIN_SECRET_LENGTH}"
                " characters)",
                SECRET_ENV,
            )
        tls.check(self.tls_cert, self.tls_key, self.tls_ca)
        if self.tls_cert and self.advertised_url.startswith("http://"):
            raise ConfigError("advertised_url", "must be https:// when the node serves TLS")
        self.kafka_client_properties  # noqa: B018 - refuses guarantee-breaking properties

    def _check_storage(self) -> None:
        if self.warehouse:
            try:
                parse_prefix(self.warehouse, "the warehouse")
            except BadRequest as exc:
                raise ConfigError("warehouse", exc.message) from None
        if self.cluster_mode and not self.warehouse:
            raise ConfigError(
                "warehouse",
                "not set; a cluster needs shared storage, and the default (under this node's"
                " data directory) is not shared: set METASTORE_WAREHOUSE to an S3 bucket"
                " (s3://bucket/path) or a file:// path every node mounts",
            )
        for key, value in self.warehouse_properties.items():
            problem = None if is_secret_key(key) else io_key_problem(key)
            if problem is not None:
                raise ConfigError("warehouse_io", problem)
            try:
                io_rules.check_value(key, value)
            except BadRequest as exc:
                raise ConfigError("warehouse_io", exc.message.removeprefix("storage ")) from None
        self.seed_credentials  # noqa: B018 - refuses a malformed or doubled reference
        self.seed_vending  # noqa: B018 - refuses malformed vending settings
        self.seed_remote_signing  # noqa: B018 - refuses a malformed remote-signing setting
        if self.credentials_dir and not Path(self.credentials_dir).is_absolute():
            raise ConfigError("credentials_dir", "must be an absolute path")
        roots = self.storage_root_list  # refuses malformed prefixes
        if roots and not any(
            is_inside(self.warehouse_root, root, allow_equal=True) for root in roots
        ):
            raise ConfigError(
                "storage_roots", f"does not cover the warehouse {self.warehouse_root}"
            )

    @property
    def seed_credentials(self) -> Credentials | None:
        """Where the seeded storage's secrets are: ``warehouse_credentials``, else the
        secret keys of ``warehouse_io`` (by reference to that setting), else none."""
        secret_io = any(is_secret_key(key) for key in self.warehouse_properties)
        if not self.warehouse_credentials:
            return Credentials(env=NODE_IO_ENV) if secret_io else None
        try:
            value = json.loads(self.warehouse_credentials)
            reference = Credentials.from_json(value, "a credentials reference")
        except ValueError:
            raise ConfigError(
                "warehouse_credentials", 'must be {"env": NAME} or {"file": PATH} as JSON'
            ) from None
        except BadRequest as exc:
            raise ConfigError("warehouse_credentials", exc.message) from None
        if secret_io:
            raise ConfigError(
                "warehouse_credentials",
                f"set, and {NODE_IO_ENV} holds secret keys too: give credentials in one place",
            )
        return reference

    @property
    def seed_remote_signing(self) -> RemoteSigning:
        """The seeded storage's remote signing (``warehouse_remote_signing``)."""
        if not self.warehouse_remote_signing:
            return RemoteSigning()
        try:
            value = json.loads(self.warehouse_remote_signing)
        except ValueError:
            raise ConfigError("warehouse_remote_signing", "must be a JSON object") from None
        if not self.warehouse_root.startswith("s3://"):
            raise ConfigError(
                "warehouse_remote_signing",
                "signs S3 requests: set an s3:// METASTORE_WAREHOUSE",
            )
        try:
            return RemoteSigning.from_json(value)
        except BadRequest as exc:
            raise ConfigError("warehouse_remote_signing", exc.message) from None

    @property
    def seed_vending(self) -> VendingSettings | None:
        """The seeded storage's credential vending (``warehouse_vending``), or none."""
        if not self.warehouse_vending:
            return None
        try:
            value = json.loads(self.warehouse_vending)
        except ValueError:
            raise ConfigError("warehouse_vending", "must be a JSON object") from None
        if not self.warehouse_root.startswith("s3://"):
            raise ConfigError(
                "warehouse_vending", "vends S3 credentials: set an s3:// METASTORE_WAREHOUSE"
            )
        try:
            return VendingSettings.from_json(value, self.warehouse_properties.get("s3.endpoint"))
        except BadRequest as exc:
            raise ConfigError("warehouse_vending", exc.message) from None

    @property
    def storage_root_list(self) -> tuple[Location, ...]:
        try:
            return tuple(
                parse_prefix(part, "a storage root")
                for part in self.storage_roots.split(",")
                if self.storage_roots
            )
        except BadRequest as exc:
            raise ConfigError("storage_roots", exc.message) from None

    def node_storage(self) -> NodeStorage:
        """What every catalog's storage is seeded from on this node: its warehouse, its
        storage roots, the credentials of its process and its vending and signing."""
        return NodeStorage(
            self.warehouse_root,
            self.warehouse_properties,
            self.seed_credentials,
            CredentialSources.of_process(self.credentials_dir, self.warehouse_io),
            self.storage_root_list,
            self.data_dir.resolve(),
            self.seed_vending,
            self.seed_remote_signing,
        )

    def quota_defaults(self) -> Quota:
        """A tenant's quotas where it has none of its own: the ``METASTORE_QUOTA_*``
        settings."""
        return Quota(
            self.quota_requests_per_second,
            self.quota_burst,
            self.quota_max_namespaces,
            self.quota_max_tables,
            self.quota_max_views,
        )

    @property
    def cluster_key(self) -> str:
        """The cluster secret (from the setting or its file), or "" when none is set."""
        return resolve_secret(self.cluster_secret, self.cluster_secret_file)

    @property
    def kafka_broker_profile(self) -> BrokerProfile:
        return parse_profile(self.broker_profile)

    @property
    def kafka_client_properties(self) -> dict[str, str]:
        return load_properties(self.kafka_properties, self.kafka_properties_file)

    @property
    def cluster_mode(self) -> bool:
        return bool(self.kafka)

    @property
    def url(self) -> str:
        """How other nodes reach this one (forwarded writes)."""
        scheme = "https" if self.tls_cert else "http"
        return self.advertised_url.rstrip("/") or f"{scheme}://{self.host}:{self.port}"

    @property
    def warehouse_root(self) -> str:
        return self.warehouse or self.data_dir.resolve().joinpath("warehouse").as_uri()

    @property
    def warehouse_properties(self) -> dict[str, str]:
        return parse_string_map("warehouse_io", self.warehouse_io)

    @property
    def auth_enabled(self) -> bool:
        """On unless turned off, or ``auto`` on a node only reachable from this machine."""
        if self.auth == "off":
            return False
        return self.auth != "auto" or not is_loopback(self.host)

    @property
    def clients(self) -> dict[str, str]:
        return parse_clients("auth_clients", self.auth_clients)

    @property
    def service_admins(self) -> frozenset[tuple[str, str]]:
        """(kind, principal id) of each ``auth_admins`` entry (``parse_admins``)."""
        provider = self.oidc
        tenant = provider.tenant if provider is not None else None
        return parse_admins("auth_admins", self.auth_admins, tenant, self.clients.keys())

    @property
    def namespace_separator(self) -> str:
        """The character ``iceberg_namespace_separator`` names (0x1F by default)."""
        return parse_namespace_separator(
            "iceberg_namespace_separator", self.iceberg_namespace_separator
        )

    @property
    def oidc(self) -> OidcSettings | None:
        """The external identity provider, or None when no ``oidc_*`` setting names one."""
        named = [self.oidc_issuer, self.oidc_audience, self.oidc_jwks_url, self.oidc_jwks_file]
        named += [self.oidc_roles_claim, self.oidc_tenant]
        if not any(named) and self.oidc_principal_claim == "sub":
            return None
        return OidcSettings(
            self.oidc_issuer,
            self.oidc_audience,
            self.oidc_jwks_url,
            self.oidc_jwks_file,
            self.oidc_principal_claim,
            self.oidc_roles_claim,
            self.oidc_tenant or self.default_tenant,
            self.oidc_leeway_s,
            self.oidc_jwks_refresh_s,
            self.oidc_jwks_max_age_s,
        )

    @property
    def pinned_cpu(self) -> int | None:
        """The CPU ``pin_cpu`` names, or None when the node's threads may run anywhere."""
        try:
            return cpu_pinning.parse(self.pin_cpu)
        except ValueError as exc:
            raise ConfigError("pin_cpu", str(exc)) from None

    @property
    def max_page_size(self) -> int:
        return MAX_PAGE_SIZE

    @classmethod
    def load(
        cls, overrides: Mapping[str, object], env: Mapping[str, str] | None = None
    ) -> ServerConfig:
        """Defaults, then METASTORE_<FIELD> environment variables, then ``overrides`` (flags;
        a key whose value is None is a flag the command has but was not given).

        A refused setting is reported under the name the operator gave it by, or would
        (``setting_names``), never as the field: a rule that names its own variable
        (``ConfigError.where``) keeps it when the setting was not given.
        """
        env = os.environ if env is None else env
        refuse_unknown_variables(env, {ENV_PREFIX + f.name.upper() for f in fields(cls)})
        values: dict[str, object] = {}
        for f in fields(cls):
            variable = ENV_PREFIX + f.name.upper()
            raw = env.get(variable)
            if raw is not None:
                values[f.name] = parse_variable(
                    f.name, variable, str(f.type), raw, secret=f.name in SECRETS
                )
        given = set(values)
        for name, value in overrides.items():
            if value is not None:
                values[name] = value
                given.add(name)
        if "data_dir" in values:
            values["data_dir"] = Path(str(values["data_dir"]))
        try:
            return cls(**values)  # type: ignore[arg-type]
        except ConfigError as exc:
            if exc.setting not in given and exc.where != exc.setting:
                raise exc from None  # its rule named the variable to set
            raise exc.named(cls.names(overrides, env).get(exc.setting, exc.where)) from None

    @classmethod
    def names(cls, overrides: Mapping[str, object], env: Mapping[str, str]) -> dict[str, str]:
        """Each setting by the name the operator knows it by (``setting_names``)."""
        return setting_names([f.name for f in fields(cls)], overrides, env)

    def describe(self) -> dict[str, object]:
        values = {f.name: str(getattr(self, f.name)) for f in fields(self)}
        return {k: "***" if k in SECRETS and v else v for k, v in values.items()}


def env_int(env: Mapping[str, str], variable: str, default: int) -> int:
    """A whole-number node setting read outside ``ServerConfig`` (a job that reads the
    node's files with the node's bound), parsed and bounded as the node does."""
    raw = env.get(variable)
    if raw is None:
        return default
    name = variable.removeprefix(ENV_PREFIX).lower()
    value = cast(int, parse_variable(name, variable, "int", raw, secret=name in SECRETS))
    low, high = RANGES[name]
    try:
        check_range(name, value, low, high)
    except ConfigError as exc:
        raise exc.named(variable) from None
    return value
