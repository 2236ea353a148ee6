"""The rules every server setting must satisfy, checked once at startup.

A node that starts on a setting it does not understand fails open (``auth=ON``
was once read as "not on"), so each rule here refuses anything it does not
recognise, exactly, and says which setting is wrong in one line. Messages of
secret settings never quote the value.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import math
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

from metastore.errors import bounded

MIN_SECRET_CHARS = 8
MAX_SECRET_CHARS = 1024
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_FORMATS = ("text", "json")  # metastore.util.logs: lines for people, or one JSON object per line
AUTH_MODES = ("on", "off", "auto")
CLIENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
TOPIC_NAME_PART = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
CLAIM_PART = re.compile(r"^[A-Za-z0-9_:/-]{1,128}$")
_HOST_LABEL = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
_URI = re.compile(r"^[a-z][a-z0-9+.-]*://\S+$")
_BOOTSTRAP_PROTO = re.compile(r"^[A-Za-z_]+://")


MAX_PROBLEM_CHARS = 500  # a refusal is one line an operator reads


class ConfigError(ValueError):
    """One setting is unusable; ``where`` names it as the operator wrote it (an
    environment variable, a flag, or the setting's own name)."""

    def __init__(self, setting: str, problem: str, where: str | None = None) -> None:
        self.setting = setting
        self.problem = bounded(problem, MAX_PROBLEM_CHARS)  # it may quote a long value
        self.where = where or setting
        super().__init__(f"{self.where}: {self.problem}")

    def named(self, where: str) -> ConfigError:
        return ConfigError(self.setting, self.problem, where)


_INTEGER = re.compile(r"^[+-]?[0-9]+$")
_NUMBER = re.compile(r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$")


def integer(text: str) -> int:
    """``text`` as an integer written with ASCII digits only (ValueError otherwise).
    Python's ``int`` also reads other scripts' digits (``'٢٥٣٠٠'`` is 25300) and
    underscores and spaces: a setting is read as an operator would, or refused."""
    if _INTEGER.match(text) is None:
        raise ValueError(f"not an integer: {text!r}")
    return int(text)


def number(text: str) -> float:
    """``text`` as a finite decimal number in ASCII (ValueError otherwise: ``float`` also
    reads other scripts' digits, ``nan`` and ``inf``)."""
    if _NUMBER.match(text) is None:
        raise ValueError(f"not a number: {text!r}")
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"not a finite number: {text!r}")
    return value


def decimal(text: str) -> float:
    """A command-line flag's number: ``number``'s ASCII digits, but ``nan`` and ``inf``
    reach the flag's own range check, which names the flag and the bounds."""
    if text.strip().lstrip("+-").lower() in ("nan", "inf", "infinity"):
        return float(text)
    if _NUMBER.match(text) is None:
        raise ValueError(f"not a number: {text!r}")
    return float(text)


def check_type(setting: str, value: object, type_name: str) -> None:
    """``value`` is of the declared type (a bool is not an int, an int is a float)."""
    expected: tuple[type, ...] = {
        "bool": (bool,),
        "int": (int,),
        "float": (int, float),
        "str": (str,),
    }.get(type_name, (object,))
    if not isinstance(value, expected) or (type_name != "bool" and isinstance(value, bool)):
        raise ConfigError(setting, f"must be {type_name}, got {type(value).__name__}")


def check_range(setting: str, value: float, low: float, high: float) -> None:
    """Finite and within ``[low, high]`` (nan and infinities are refused)."""
    if not math.isfinite(value) or not low <= value <= high:
        bounds = f"between {_num(low)} and {_num(high)}"
        if not math.isfinite(high):
            bounds = f"finite and >= {_num(low)}"
        raise ConfigError(setting, f"must be {bounds}, got {value!r}")


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def check_host(setting: str, host: str) -> None:
    """An IP address or a DNS name (what the node binds or names)."""
    if _is_ip(host):
        return
    labels = host.rstrip(".").split(".")
    if not host or len(host) > 253 or not all(_HOST_LABEL.fullmatch(x) for x in labels):
        raise ConfigError(setting, f"must be an IP address or a host name, got {host!r}")


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


@functools.lru_cache(maxsize=64)  # asked on every request (``auth_enabled``)
def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bootstrap(setting: str, servers: str) -> None:
    """``[proto://]host[:port][,...]`` as Kafka clients take it (an IPv6 host in brackets)."""
    for server in servers.split(","):
        address = _BOOTSTRAP_PROTO.sub("", server, count=1)
        if address.startswith("["):
            host, _, port = address[1:].partition("]")
            port = port.removeprefix(":") if port.startswith(":") else (port or "9092")
        else:
            host, sep, port = address.partition(":")
            port = port if sep else "9092"
        ok = port.isdigit() and 0 < int(port) < 65536 and _is_hostish(host)
        if not ok:
            raise ConfigError(setting, f"must be host:port[,host:port...], got {servers!r}")


def _is_hostish(host: str) -> bool:
    try:
        check_host("", host)
    except ConfigError:
        return False
    return True


def check_url(setting: str, url: str) -> None:
    """An absolute ``http(s)://host[:port][/path]`` URL (how peers reach this node)."""
    try:
        parts = urlsplit(url)  # raises on an unclosed "[" (an IPv6 host)
        if parts.port == 0:  # reading it raises past 65535 or on a non-number
            raise ValueError(url)
    except ValueError:
        raise ConfigError(setting, f"must be an http:// or https:// URL, got {url!r}") from None
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or not _is_hostish(parts.hostname)
        or parts.username is not None
        or parts.query
        or parts.fragment
        or any(c.isspace() for c in url)
    ):
        raise ConfigError(setting, f"must be an http:// or https:// URL, got {url!r}")


def check_checkpoint_dir(setting: str, path: str, *, cluster: bool) -> None:
    """A directory holding a RocksDB database, for a cluster node's view to start from
    (whether it is a view of this node's topics is checked when the node starts)."""
    if not cluster:
        raise ConfigError(
            setting,
            "applies only in cluster mode (--kafka or METASTORE_KAFKA): it starts a node's view",
        )
    where = Path(path)
    try:
        is_dir, has_database = where.is_dir(), (where / "CURRENT").is_file()
    except OSError as exc:  # a name too long for the file system, say
        raise ConfigError(setting, f"cannot be read: {exc.strerror}") from None
    if not is_dir:
        raise ConfigError(setting, f"{path!r} is not a directory")
    if not has_database:
        raise ConfigError(
            setting,
            f"{path!r} holds no RocksDB database (name a checkpoint of a view, or the --out "
            "of metastore rebuild)",
        )


def check_publish_events(setting: str, enabled: bool, *, cluster: bool) -> None:
    """Change events are published by the partition owners of a cluster, into their Kafka
    transactions: an embedded node has no topic to publish to (its feed is the HTTP one)."""
    if enabled and not cluster:
        raise ConfigError(
            setting,
            "needs cluster mode (--kafka): an embedded node publishes no Kafka events; read"
            " its change feed at GET /api/v1/tenants/{t}/catalogs/{c}/events",
        )


def check_choice(setting: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(setting, f"must be one of {', '.join(choices)}, got {value!r}")


# what the Iceberg API may join namespace levels with besides 0x1F: URL-safe characters
# (unreserved in RFC 3986, so clients send them as they are); control characters other
# than 0x1F are refused in names, so they could not separate anything
NAMESPACE_SEPARATORS = ".-_~"


def parse_namespace_separator(setting: str, value: str) -> str:
    """``%1F`` (the default), or one of ``NAMESPACE_SEPARATORS`` as itself or URL-encoded
    (``.`` or ``%2E``) -> the character."""
    char = unquote(value)
    if char == "\x1f" or (len(char) == 1 and char in NAMESPACE_SEPARATORS):
        return char
    allowed = ", ".join(f"%{ord(c):02X} ({c})" for c in NAMESPACE_SEPARATORS)
    raise ConfigError(setting, f"must be %1F (the default) or one of {allowed}, got {value!r}")


def check_pattern(setting: str, value: str, pattern: re.Pattern[str], what: str) -> None:
    if not pattern.fullmatch(value):
        raise ConfigError(setting, f"must be {what}, got {value!r}")


def check_uri(setting: str, value: str) -> None:
    """A location URI such as ``file:///srv/warehouse`` or ``s3://bucket/path``."""
    segments = value.split("://", 1)[-1].split("/")
    if not _URI.fullmatch(value) or ".." in segments:
        raise ConfigError(setting, f"must be a URI like s3://bucket/path, got {value!r}")


def parse_string_map(setting: str, text: str) -> dict[str, str]:
    """A JSON object of strings; the value is secret, so the message never quotes it."""
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        value = None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ConfigError(setting, "must be a JSON object whose values are strings")
    return value


def check_secret(secret: str) -> str:
    """A client secret: 8-1024 characters, no control characters, no surrounding
    whitespace (a pasted newline is a mistake, not part of a secret). The message
    never quotes it."""
    if not MIN_SECRET_CHARS <= len(secret) <= MAX_SECRET_CHARS:
        raise ValueError(f"the secret must be {MIN_SECRET_CHARS}-{MAX_SECRET_CHARS} characters")
    if secret != secret.strip() or any(ord(c) < 32 or ord(c) == 127 for c in secret):
        raise ValueError("the secret must not have control characters or surrounding spaces")
    return secret


def check_claim(setting: str, claim: str) -> None:
    """A token claim name, or a dotted path into nested claims (``realm_access.roles``)."""
    if not all(CLAIM_PART.fullmatch(part) for part in claim.split(".")):
        raise ConfigError(
            setting,
            f"must be a claim name or a dotted path of them (A-Z a-z 0-9 _ : / -), got {claim!r}",
        )
