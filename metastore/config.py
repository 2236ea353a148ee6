"""Frozen server configuration: defaults < environment (METASTORE_*) < command-line flags.

Validated once at startup; a bad value stops the process with a message naming
the setting. Nothing here is secret yet; when secrets arrive they are kept out
of ``describe()``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from metastore.commits import DEFAULT_MAX_OBJECT_BYTES
from metastore.paging import MAX_PAGE_SIZE
from metastore.persistence.base import DEFAULT_RECENT_HEADS

ENV_PREFIX = "METASTORE_"


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8181
    data_dir: Path = Path("./data")
    fsync: bool = True  # fsync every group commit (durable across power loss)
    max_body_bytes: int = 1024 * 1024  # request bodies larger than this get 413
    max_object_bytes: int = DEFAULT_MAX_OBJECT_BYTES  # a serialized object larger -> 413
    max_changes_per_commit: int = 1000
    cache_bytes: int = 128 * 1024 * 1024  # decoded immutable objects
    index_embedded_bytes: int = 4 * 1024  # spill the embedded index past this (see ARCHITECTURE)
    index_stripe_bytes: int = 64 * 1024  # split a spilled index stripe past this
    recent_heads: int = DEFAULT_RECENT_HEADS
    lease_seconds: float = 60.0  # snowflake node-id lease
    default_tenant: str = "default"
    default_catalog: str = "default"
    log_level: str = "INFO"
    # --- cluster mode (``kafka`` set): see docs/ARCHITECTURE.md "Cluster mode" ---
    kafka: str = ""  # bootstrap servers; empty = embedded mode
    advertised_url: str = ""  # how peers reach this node; default http://host:port
    topic_prefix: str = "metastore"  # topics <prefix>.refs and <prefix>.objects
    cluster_id: str = "metastore"  # transactional.id = <cluster_id>.<refs topic>.<p>
    partitions: int = 12  # must match the topics (checked at startup)
    session_timeout_ms: int = 6000  # owner crash detection
    forward_timeout_s: float = 30.0  # a forwarded write gives up (503) after this
    consistency_wait_s: float = 10.0  # a read given a consistency token waits at most this
    # Iceberg REST: table files under <warehouse>/<tenant>/<catalog>/ ("" = <data_dir>/warehouse)
    warehouse: str = ""
    warehouse_io: str = ""  # FileIO properties as JSON, e.g. {"s3.endpoint": ...} (secret)
    auth: str = "auto"  # on | off | auto (off iff bound to loopback)
    auth_clients: str = ""  # "id:secret,id2:secret2", stored hashed at startup (secret)
    token_ttl_seconds: int = 3600

    def __post_init__(self) -> None:
        positive = (
            "port",
            "max_body_bytes",
            "max_object_bytes",
            "max_changes_per_commit",
            "cache_bytes",
            "index_embedded_bytes",
            "index_stripe_bytes",
            "lease_seconds",
            "partitions",
            "session_timeout_ms",
            "forward_timeout_s",
            "consistency_wait_s",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if not 0 < self.port < 65536:
            raise ValueError("port must be 1-65535")
        if self.index_stripe_bytes < self.index_embedded_bytes:
            raise ValueError("index_stripe_bytes must be >= index_embedded_bytes")
        if self.max_object_bytes < 2 * self.index_stripe_bytes:
            raise ValueError("max_object_bytes must be at least twice index_stripe_bytes")
        if self.recent_heads < 0:
            raise ValueError("recent_heads must be >= 0")
        if self.kafka and self.host in ("0.0.0.0", "::", "") and not self.advertised_url:
            raise ValueError(
                "advertised_url is required when binding all interfaces in cluster mode"
            )
        if self.advertised_url and not self.advertised_url.startswith(("http://", "https://")):
            raise ValueError("advertised_url must start with http:// or https://")

    @property
    def cluster_mode(self) -> bool:
        return bool(self.kafka)

    @property
    def url(self) -> str:
        """How other nodes reach this one (forwarded writes)."""
        return self.advertised_url.rstrip("/") or f"http://{self.host}:{self.port}"
        if self.auth not in ("on", "off", "auto"):
            raise ValueError("auth must be on, off or auto")
        if self.token_ttl_seconds <= 0:
            raise ValueError("token_ttl_seconds must be positive")
        if self.warehouse_io:
            try:
                io = json.loads(self.warehouse_io)
            except ValueError:
                io = None
            if not isinstance(io, dict) or not all(isinstance(v, str) for v in io.values()):
                raise ValueError("warehouse_io must be a JSON object of strings")
        for pair in filter(None, self.auth_clients.split(",")):
            if ":" not in pair or not pair.split(":", 1)[0] or not pair.split(":", 1)[1]:
                raise ValueError("auth_clients must be id:secret pairs separated by commas")

    @property
    def warehouse_root(self) -> str:
        return self.warehouse or self.data_dir.resolve().joinpath("warehouse").as_uri()

    @property
    def warehouse_properties(self) -> dict[str, str]:
        value: dict[str, str] = json.loads(self.warehouse_io) if self.warehouse_io else {}
        return value

    @property
    def auth_enabled(self) -> bool:
        if self.auth == "auto":
            return self.host not in ("127.0.0.1", "localhost", "::1")
        return self.auth == "on"

    @property
    def clients(self) -> dict[str, str]:
        pairs = (p.split(":", 1) for p in self.auth_clients.split(",") if p)
        return {client: secret for client, secret in pairs}

    @property
    def max_page_size(self) -> int:
        return MAX_PAGE_SIZE

    @classmethod
    def load(
        cls, overrides: Mapping[str, object], env: Mapping[str, str] | None = None
    ) -> ServerConfig:
        """Defaults, then METASTORE_<FIELD> environment variables, then ``overrides``."""
        env = os.environ if env is None else env
        values: dict[str, object] = {}
        for f in fields(cls):
            raw = env.get(ENV_PREFIX + f.name.upper())
            if raw is not None:
                values[f.name] = _parse(f.name, str(f.type), raw)
        values.update({k: v for k, v in overrides.items() if v is not None})
        if "data_dir" in values:
            values["data_dir"] = Path(str(values["data_dir"]))
        return cls(**values)  # type: ignore[arg-type]

    def describe(self) -> dict[str, object]:
        secret = ("warehouse_io", "auth_clients")
        values = {f.name: str(getattr(self, f.name)) for f in fields(self)}
        return {k: "***" if k in secret and v else v for k, v in values.items()}


def _parse(name: str, type_name: str, raw: str) -> object:
    try:
        if type_name == "bool":
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if type_name == "int":
            return int(raw)
        if type_name == "float":
            return float(raw)
    except ValueError:
        raise ValueError(
            f"{ENV_PREFIX}{name.upper()}: cannot parse {raw!r} as {type_name}"
        ) from None
    return raw
