"""What a node says about itself as it starts and stops: one line each.

The serving line is the one an operator looks for first. Besides where the node
listens, it says what the settings made of it: embedded or cluster; whether auth is
on and why, since ``auto`` decides by the bound address (the same environment means
auth on in a container bound to all interfaces and off on a laptop bound to
loopback); and where the web console is. A node whose auth is off while
authentication settings are given warns once at startup (``ignored_line``), and a
node that stops says when and why (``stopped_line``), so a log shows each run's
beginning and end.
"""

from __future__ import annotations

from dataclasses import fields

from metastore.config.environment import ENV_PREFIX
from metastore.config.server_config import ServerConfig

# Settings that act only with auth on (besides every ``oidc_*``): with auth off they are
# read and checked, but no request is asked who it is, so they decide nothing.
AUTH_ONLY_SETTINGS = frozenset({"auth_clients", "auth_admins", "metrics_auth"})


def auth_summary(config: ServerConfig) -> str:
    """Whether auth is on and why: ``METASTORE_AUTH``'s word, or what ``auto`` made of
    the bound address (``ServerConfig.auth_enabled``)."""
    if config.auth == "on":
        return "auth on"
    if config.auth == "off":
        return "auth off (METASTORE_AUTH=off)"
    if config.auth_enabled:
        return f"auth on (auto: {config.host} is reachable from other machines)"
    return "auth off (auto: loopback only)"


def base_url(config: ServerConfig, scheme: str) -> str:
    """``scheme://host:port`` of the listening socket (an IPv6 host in brackets)."""
    host = f"[{config.host}]" if ":" in config.host else config.host
    return f"{scheme}://{host}:{config.port}"


def serving_line(config: ServerConfig, scheme: str) -> str:
    """The line a started node logs once it listens."""
    listening = base_url(config, scheme)
    # peers and browsers elsewhere reach a cluster node at its advertised URL
    console = (config.advertised_url.rstrip("/") or listening) + "/"
    mode = f"cluster (kafka {config.kafka})" if config.cluster_mode else "embedded"
    return (
        f"serving on {listening} (at most {config.max_connections} connections): {mode}, "
        f"{auth_summary(config)}, console at {console}"
    )


def ignored_auth_settings(config: ServerConfig) -> list[str]:
    """The variables of authentication settings given a value that auth off makes moot:
    every request is served unauthenticated, so no token is asked for and no identity
    provider or admin list is consulted (the listed clients are still created, ready
    for when auth is turned on)."""
    if config.auth_enabled:
        return []
    return [
        ENV_PREFIX + f.name.upper()
        for f in fields(config)
        if (f.name in AUTH_ONLY_SETTINGS or f.name.startswith("oidc_"))
        and getattr(config, f.name) != f.default
    ]


def ignored_line(config: ServerConfig) -> str | None:
    """The warning for ``ignored_auth_settings``, or None when there are none.

    A warning, not a refusal. ``auto`` on a laptop that reads the deployment's
    shared env file, identity provider and client list included, is a normal case
    that a refusal would break, and the operator who meant auth to be on reads in one
    line why it is not. Nor does the unsafe direction need a refusal: ``auto`` turns
    auth on as soon as the node is reachable from other machines, so a node serves
    the network unauthenticated only after an explicit ``METASTORE_AUTH=off``.
    """
    ignored = ignored_auth_settings(config)
    if not ignored:
        return None
    return (
        f"{', '.join(ignored)} set but ignored: {auth_summary(config)}, so no request is "
        "authenticated; set METASTORE_AUTH=on to use them"
    )


def stopped_line(served_s: float, why: str) -> str:
    """The line a node logs once it has stopped: every context closed, every
    in-flight request answered or cut off."""
    return f"stopped on {why} after serving {served_s:.1f} s"
