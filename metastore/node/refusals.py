"""Why a node cannot start, as one line naming the problem and its fix.

``metastore serve`` turns the failures an operator can fix into that line on stderr
and exit status 2: an address another process listens on, a data directory another
process has open or that holds no database of this release, brokers the node cannot
reach, changelog topics that would lose data, a CPU the system will not pin it to.
Anything else is a defect, and its traceback is the report.
"""

from __future__ import annotations

import errno
from collections.abc import Mapping

from metastore.config.server_config import ServerConfig
from metastore.persistence.rocksdb import StoreFormatError, StoreLocked, StoreUnreadable
from metastore.util.cpu_pinning import PinRefused

ADDRESS_ERRNOS = (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES)

Names = Mapping[str, str]  # each setting as the operator gave it (``ServerConfig.names``)


def address(config: ServerConfig, exc: OSError, names: Names) -> str:
    """The node cannot listen on its address: the line names the setting to change."""
    reason = exc.strerror or str(exc)
    if exc.errno == errno.EADDRINUSE:
        setting = names["port"]
        fix = f"stop the process listening there or choose another {setting}"
    elif exc.errno == errno.EACCES:
        setting = names["port"]
        fix = "choose a port above 1023 or give the node the right to bind it"
    else:
        setting = names["host"]
        fix = f"use an address of this machine for {setting}"
    return f"{setting}: cannot listen on {config.host}:{config.port} ({reason}); {fix}"


def refusal(exc: BaseException, config: ServerConfig, names: Names) -> str | None:
    """The line for a startup failure an operator can fix; None for any other."""
    data_dir, named = str(config.data_dir), names["data_dir"]
    other_dir = f"point {named} at this release's data directory or at an empty one"
    if isinstance(exc, StoreLocked):
        return (
            f"{named}: {data_dir!r} is in use by another process ({exc.message}); stop the "
            f"node that uses it, or give this one its own {named}"
        )
    if isinstance(exc, StoreFormatError):
        return (
            f"{named}: {data_dir!r} holds a database of another format ({exc.message}); {other_dir}"
        )
    if isinstance(exc, StoreUnreadable):
        return (
            f"{named}: {data_dir!r} holds no database this release can open ({exc.message}); "
            f"{other_dir}"
        )
    if isinstance(exc, OSError) and exc.errno in ADDRESS_ERRNOS:
        return address(config, exc, names)
    if isinstance(exc, PinRefused):
        return f"{names['pin_cpu']}: {exc.message}; name another CPU, or leave it empty"
    return _cluster(exc, config, names)


def _cluster(exc: BaseException, config: ServerConfig, names: Names) -> str | None:
    if not config.kafka:
        return None
    from metastore.cluster.topics import TopicsError, UnsafeTopics
    from metastore.node.contexts import cluster_config

    if isinstance(exc, TopicsError):
        connection = cluster_config(config).connection()
        kafka = names["kafka"]
        return (
            f"{kafka}: cannot reach the brokers ({exc.message}; {connection}); check {kafka} "
            f"and the Kafka connection settings ({names['kafka_properties']}), "
            "and that the brokers are up"
        )
    if isinstance(exc, UnsafeTopics):
        first = exc.message.splitlines()[0]
        return f"{names['kafka']}: {first} {'; '.join(exc.problems)}"
    return None
