"""Apache Kafka brokers (KRaft) the tests and benchmarks run on, as child processes.

The broker is Kafka's own, from Maven Central (``harness/maven/kafka/pom.xml``, fetched
into ``.jars/kafka/`` by ``harness.jars``), started as Kafka's quickstart does: format
the storage, then run ``kafka.Kafka`` with a properties file. Each broker here is
combined (broker and controller in one process) on free loopback ports; a
``KafkaCluster`` of three replicates everything three times with
``min.insync.replicas=2``, so one broker may die without losing an acknowledged write
and two may not. Each is stopped by PID (SIGKILL, or SIGTERM for a clean shutdown)
and can be started again on its own disk.

Formatting runs Kafka's ``StorageTool`` once per process (a JVM start, some seconds)
into a template; every broker's log directory then gets that bootstrap checkpoint and
a ``meta.properties`` of its own (node id, directory id, cluster id), which is what the
tool writes for each.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from confluent_kafka.admin import AdminClient

from harness import jars
from harness.process import free_port, kill_pid

JAVA = os.environ.get("JAVA_HOME", "")
# Small and quick to start: the tests' brokers hold megabytes, and two cores run them
# beside the nodes. C1 only (TieredStopAtLevel=1) starts a broker in about half the
# time; a benchmark's broker gets the full JIT (``quick_start=False``).
JVM_FLAGS = ("-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-Djava.awt.headless=true")
QUICK_JVM_FLAGS = ("-XX:TieredStopAtLevel=1", "-Xshare:auto")
LOG4J = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = file
logger.state.name = state.change.logger
logger.state.level = warn
logger.request.name = kafka.request.logger
logger.request.level = warn
"""


def java() -> str:
    return str(Path(JAVA) / "bin" / "java") if JAVA else "java"


def kafka_uuid() -> str:
    """A Kafka ``Uuid`` as its tools make one: 16 random bytes, URL-safe base64, never
    starting with ``-`` (a command line would read it as an option; Kafka draws again)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


@functools.cache
def _template() -> Path:
    """A log directory formatted by Kafka's own tool, once per process: its
    ``bootstrap.checkpoint`` (the metadata version) is what every broker starts from."""
    root = Path(tempfile.mkdtemp(prefix="kafka-format-"))
    properties = root / "server.properties"
    data = root / "data"
    properties.write_text(
        "process.roles=broker,controller\nnode.id=1\n"
        "controller.quorum.voters=1@127.0.0.1:9\n"
        "listeners=PLAINTEXT://127.0.0.1:9,CONTROLLER://127.0.0.1:8\n"
        "controller.listener.names=CONTROLLER\n"
        f"log.dirs={data}\n"
    )
    run = subprocess.run(
        [
            *(java(), *JVM_FLAGS, *QUICK_JVM_FLAGS, "-cp", jars.classpath("kafka")),
            *("kafka.tools.StorageTool", "format", "-t", kafka_uuid(), "-c", str(properties)),
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )
    checkpoint = data / "bootstrap.checkpoint"
    if run.returncode != 0 or not checkpoint.is_file():
        raise RuntimeError(f"kafka-storage format failed: {(run.stdout + run.stderr)[-2000:]}")
    return checkpoint


def format_log_dir(log_dir: Path, node_id: int, cluster_id: str) -> None:
    """What ``kafka-storage format`` leaves in one log directory, unless it is there."""
    if (log_dir / "meta.properties").is_file():
        return  # a restart on its own disk
    log_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_template(), log_dir / "bootstrap.checkpoint")
    (log_dir / "meta.properties").write_text(
        f"node.id={node_id}\ndirectory.id={kafka_uuid()}\nversion=1\ncluster.id={cluster_id}\n"
    )


def wait_listed(admin: AdminClient, names: list[str], timeout: float = 30.0) -> None:
    """Until every topic of ``names`` shows in the metadata ``admin`` is answered: Kafka
    answers a create once its controller committed it, and its brokers learn of the
    topic a moment later (a listing in between would not name it)."""
    deadline = time.monotonic() + timeout
    while True:
        listed = admin.list_topics(timeout=timeout).topics
        if all(name in listed and not listed[name].error for name in names):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topics {names} not listed after {timeout:.0f}s")
        time.sleep(0.05)


class KafkaBroker:
    """One combined KRaft node of a ``KafkaCluster`` (or alone: a cluster of one)."""

    def __init__(
        self,
        node_id: int,
        root: Path,
        cluster_id: str,
        settings: Mapping[str, str],
        quick_start: bool = True,
    ) -> None:
        self.node_id = node_id
        self.root = root
        self.cluster_id = cluster_id
        self.port = free_port()
        self.controller_port = free_port()
        self.settings = dict(settings)
        self.quick_start = quick_start
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = root / "broker.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def voter(self) -> str:
        return f"{self.node_id}@127.0.0.1:{self.controller_port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    @property
    def running(self) -> bool:
        return self.pid is not None

    def _properties(self, voters: str) -> Path:
        log_dir = self.root / "data"
        format_log_dir(log_dir, self.node_id, self.cluster_id)
        values = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://{self.bootstrap},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.bootstrap}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(log_dir),
            **self.settings,
        }
        path = self.root / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
        (self.root / "log4j2.properties").write_text(
            LOG4J.format(
                log=self.log_path, level=os.environ.get("METASTORE_TEST_KAFKA_LOG", "INFO")
            )
        )
        return path

    def start(self, voters: str) -> None:
        """Run the broker (not waiting for it: ``KafkaCluster.wait_ready`` does)."""
        if self.running:
            return
        properties = self._properties(voters)
        flags = [*JVM_FLAGS, *(QUICK_JVM_FLAGS if self.quick_start else ())]
        log4j = f"-Dlog4j2.configurationFile={self.root / 'log4j2.properties'}"
        out = (self.root / "broker.out").open("ab")
        self.proc = subprocess.Popen(
            [java(), *flags, log4j, "-cp", jars.classpath("kafka"), "kafka.Kafka", str(properties)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a signal to the tests' group never reaches it
        )
        out.close()

    def kill(self) -> None:
        """SIGKILL by PID: a crash, the disk as it was."""
        kill_pid(self.proc)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM: a controlled shutdown (leadership moved away first), then reaped."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def pause(self) -> None:
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGCONT)

    def log_tail(self, chars: int = 3000) -> str:
        text = ""
        for path in (self.root / "broker.out", self.log_path):
            with contextlib.suppress(OSError):
                text += path.read_text(errors="replace")[-chars:]
        return text


def settings_for_tests(size: int) -> dict[str, str]:
    """Broker settings for tests: every replica everywhere, quick groups and
    transactions, internal topics of a few partitions (50 by default: each new group
    coordinator load would wait for them)."""
    isr = str(min(2, size))
    return {
        "num.partitions": "1",
        "default.replication.factor": str(size),
        "min.insync.replicas": isr,
        "offsets.topic.replication.factor": str(size),
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": str(size),
        "transaction.state.log.min.isr": isr,
        "transaction.state.log.num.partitions": "4",
        "group.initial.rebalance.delay.ms": "0",
        # the tests' nodes detect a departed owner in 3 s (tests/conftest.py)
        "group.min.session.timeout.ms": "500",
        "group.consumer.min.session.timeout.ms": "500",
        "group.consumer.min.heartbeat.interval.ms": "100",
        "share.coordinator.state.topic.replication.factor": str(size),
        "share.coordinator.state.topic.min.isr": isr,
        "auto.create.topics.enable": "false",
        "log.cleaner.backoff.ms": "1000",
        "unclean.leader.election.enable": "false",
    }


class KafkaCluster:
    """``size`` combined KRaft brokers on loopback; ``bootstrap`` names them all."""

    def __init__(
        self,
        root: Path,
        size: int = 1,
        settings: Mapping[str, str] | None = None,
        quick_start: bool = True,
    ) -> None:
        self.root = root
        self.cluster_id = kafka_uuid()
        merged = {**settings_for_tests(size), **(settings or {})}
        self.brokers = [
            KafkaBroker(i + 1, root / f"broker{i + 1}", self.cluster_id, merged, quick_start)
            for i in range(size)
        ]
        self.voters = ",".join(b.voter for b in self.brokers)
        self.started_s = 0.0  # start to ready, of the last start()

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    def start(self, timeout: float = 120.0) -> KafkaCluster:
        begun = time.monotonic()
        for broker in self.brokers:
            broker.start(self.voters)
        self.wait_ready(timeout)
        self.started_s = time.monotonic() - begun
        return self

    def restart(self, broker: KafkaBroker, timeout: float = 120.0) -> None:
        """Start one broker again on its own disk, and wait until the cluster sees it."""
        broker.start(self.voters)
        self.wait_ready(timeout, brokers=[broker])

    def wait_ready(self, timeout: float, brokers: list[KafkaBroker] | None = None) -> None:
        """Every broker (or ``brokers``) registered with the controller and answering
        its own listener."""
        wanted = brokers or self.brokers
        deadline = time.monotonic() + timeout
        for broker in wanted:
            # a readiness probe of brokers started here, plaintext on loopback by design
            admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
            while True:
                if broker.proc is not None and broker.proc.poll() is not None:
                    raise RuntimeError(
                        f"kafka broker {broker.node_id} exited with {broker.proc.returncode}:"
                        f"\n{broker.log_tail()}"
                    )
                with contextlib.suppress(Exception):
                    seen = admin.list_topics(timeout=1.0).brokers
                    if broker.node_id in seen and len(seen) >= self._expected():
                        break
                if time.monotonic() > deadline:
                    self.close()
                    raise TimeoutError(
                        f"kafka broker {broker.node_id} on {broker.bootstrap} not ready after"
                        f" {timeout:.0f}s:\n{broker.log_tail()}"
                    )
                time.sleep(0.1)

    def _expected(self) -> int:
        return sum(1 for b in self.brokers if b.running)

    def leader_of(self, topic: str, partition: int) -> KafkaBroker:
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[partition].leader
        return next(b for b in self.brokers if b.node_id == leader)

    def close(self) -> None:
        for broker in self.brokers:
            broker.kill()

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
