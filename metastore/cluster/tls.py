"""TLS between nodes (optional): HTTPS for the node's server and mutual TLS for peer calls.

With a certificate and key (``METASTORE_TLS_CERT``, ``METASTORE_TLS_KEY``, PEM
files) the node serves HTTPS and presents that certificate when it calls another
node. With a CA bundle as well (``METASTORE_TLS_CA``) the node verifies every
peer's server certificate against it, asks every client for a certificate, and
refuses node-to-node requests (``/internal/v1/*`` and forwarded writes) whose
connection did not present a certificate the CA signed. Ordinary API clients
need no certificate (the server asks but does not require one; a certificate that
is presented must verify, or the handshake fails). mTLS adds to the cluster
secret's signature, it does not replace it.
"""

from __future__ import annotations

import ssl

from metastore.util.setting_rules import ConfigError
from metastore.util.small_files import NotSmallFile, read_small_file

MAX_PEM_FILE_BYTES = 4 * 1024 * 1024  # a certificate, its key, or a CA bundle


def server_context(cert: str, key: str, ca: str = "") -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    if ca:
        context.load_verify_locations(cafile=ca)
        context.verify_mode = ssl.CERT_OPTIONAL  # API clients need none; peers are checked
    return context


def client_context(cert: str = "", key: str = "", ca: str = "") -> ssl.SSLContext:
    """How this node calls its peers: verifies them (against ``ca`` if given, else the
    system's CAs) and presents its own certificate when it has one."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca or None)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert:
        context.load_cert_chain(cert, key)
    return context


def check(cert: str, key: str, ca: str) -> None:
    """Startup validation: ``ConfigError`` with one clear line for a bad combination or file."""
    if bool(cert) != bool(key):
        setting = "tls_key" if cert else "tls_cert"
        raise ConfigError(setting, "not set; METASTORE_TLS_CERT and METASTORE_TLS_KEY go together")
    if ca and not cert:
        raise ConfigError(
            "tls_ca",
            "needs METASTORE_TLS_CERT and METASTORE_TLS_KEY (a node that checks its peers'"
            " certificates presents its own)",
        )
    if not cert:
        return
    for setting, path in (("tls_cert", cert), ("tls_key", key), ("tls_ca", ca)):
        if not path:
            continue
        try:  # OpenSSL would wait on a FIFO and read a device without end
            read_small_file(path, MAX_PEM_FILE_BYTES)
        except NotSmallFile as exc:
            raise ConfigError(setting, f"{path} {exc}") from None
        except OSError as exc:
            raise ConfigError(setting, f"cannot read {path}: {exc.strerror}") from None
    try:
        server_context(cert, key, ca)
        client_context(cert, key, ca)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError("tls_cert", f"certificate, key or CA unusable: {exc}") from None
