"""Why a node cannot start, as one line naming the problem and its fix.

``metastore serve`` turns the failures an operator can fix into that line on stderr
and exit status 2: an address another process listens on, a data directory another
process has open or that holds no database of this release, brokers the node cannot
reach, changelog topics that would lose data, a CPU the system will not pin it to.
Anything else is a defect, and its traceback is the report.
"""

from __future__ import annotations

import errno

from metastore.config.server_config import ServerConfig
from metastore.persistence.rocksdb import StoreFormatError, StoreLocked, StoreUnreadable
from metastore.util.cpu_pinning import PinRefused

ADDRESS_ERRNOS = (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES)
_OTHER_DIR = "point --data-dir at this release's data directory or at an empty one"


def address(config: ServerConfig, exc: OSError) -> str:
    """The node cannot listen on its address."""
    reason = exc.strerror or str(exc)
    if exc.errno == errno.EADDRINUSE:
        fix = "stop the process listening there or choose another --port"
    elif exc.errno == errno.EACCES:
        fix = "choose a port above 1023 or give the node the right to bind it"
    else:
        fix = "use an address of this machine for --host"
    return f"host/port: cannot listen on {config.host}:{config.port} ({reason}); {fix}"


def refusal(exc: BaseException, config: ServerConfig) -> str | None:
    """The line for a startup failure an operator can fix; None for any other."""
    data_dir = str(config.data_dir)
    if isinstance(exc, StoreLocked):
        return (
            f"data_dir: {data_dir!r} is in use by another process ({exc.message}); stop the "
            "node that uses it, or give this one its own --data-dir"
        )
    if isinstance(exc, StoreFormatError):
        return (
            f"data_dir: {data_dir!r} holds a database of another format ({exc.message}); "
            f"{_OTHER_DIR}"
        )
    if isinstance(exc, StoreUnreadable):
        return (
            f"data_dir: {data_dir!r} holds no database this release can open ({exc.message}); "
            f"{_OTHER_DIR}"
        )
    if isinstance(exc, OSError) and exc.errno in ADDRESS_ERRNOS:
        return address(config, exc)
    if isinstance(exc, PinRefused):
        return f"pin_cpu: {exc.message}; name another CPU in METASTORE_PIN_CPU, or leave it empty"
    return _cluster(exc, config)


def _cluster(exc: BaseException, config: ServerConfig) -> str | None:
    if not config.kafka:
        return None
    from metastore.cluster.topics import TopicsError, UnsafeTopics
    from metastore.node.contexts import cluster_config

    if isinstance(exc, TopicsError):
        connection = cluster_config(config).connection()
        return (
            f"kafka: cannot reach the brokers ({exc.message}; {connection}); check --kafka "
            "(METASTORE_KAFKA) and the Kafka connection settings (METASTORE_KAFKA_PROPERTIES), "
            "and that the brokers are up"
        )
    if isinstance(exc, UnsafeTopics):
        first = exc.message.splitlines()[0]
        return f"kafka: {first} {'; '.join(exc.problems)}"
    return None
