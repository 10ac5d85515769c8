"""A single-node KRaft broker (broker and controller in one JVM) on loopback, with tiered
storage on, the topic-based RLMM, and a RemoteStorageManager on a class path of its own.

Started as ``java -cp libs/* kafka.Kafka server.properties`` after ``StorageTool format``; ready
when its listener accepts; stopped by its pid. ``restart`` keeps the log and metadata folders
(the leader epoch moves), ``close`` removes them.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from tests.fixtures.ports import LOCALHOST, free_port, listening_ports

START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0

_SETTINGS = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "inter.broker.listener.name": "PLAINTEXT",
    "num.partitions": "1",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "auto.create.topics.enable": "false",
    "log.retention.check.interval.ms": "1000",
    "log.initial.task.delay.ms": "1000",
    "log.segment.delete.delay.ms": "1000",
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": "1000",
    "remote.log.metadata.manager.listener.name": "PLAINTEXT",
    "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
    "rlmm.config.remote.log.metadata.topic.num.partitions": "1",
    "remote.fetch.max.wait.ms": "5000",
    "message.max.bytes": "4194304",
    "replica.fetch.max.bytes": "4194304",
}


AIVEN_RSM = "io.aiven.kafka.tieredstorage.RemoteStorageManager"

_TIERING = re.compile(r"remote\.log\.|rlmm\.")


class BrokerError(RuntimeError):
    """The broker did not start or stop in time."""


class Broker:
    """One KRaft broker; ``rsm`` are the ``rsm.config.*`` settings (without the prefix),
    ``rsm_class`` the RemoteStorageManager loaded from ``plugin_dir``."""

    def __init__(
        self,
        libs: Path,
        home: Path,
        plugin_dir: Path | None,
        rsm: Mapping[str, str],
        rsm_class: str = AIVEN_RSM,
    ) -> None:
        """``plugin_dir`` None: a broker without tiered storage (no RemoteStorageManager)."""
        self.libs, self.home, self.plugin_dir = libs, home, plugin_dir
        self.rsm, self.rsm_class = dict(rsm), rsm_class
        self.port, self.controller_port = free_port(), free_port()
        self.log_dir = home / "logs"
        self.proc: subprocess.Popen[bytes] | None = None
        self.cluster_id = ""

    @property
    def bootstrap(self) -> str:
        return f"{LOCALHOST}:{self.port}"

    def properties(self) -> dict[str, str]:
        settings = dict(_SETTINGS)
        settings |= {
            "listeners": f"PLAINTEXT://{LOCALHOST}:{self.port},CONTROLLER://{LOCALHOST}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{LOCALHOST}:{self.port}",
            "controller.quorum.voters": f"1@{LOCALHOST}:{self.controller_port}",
            "log.dirs": str(self.log_dir),
        }
        if self.plugin_dir is None:
            return {k: v for k, v in settings.items() if not _TIERING.match(k)}
        settings["remote.log.storage.manager.class.name"] = self.rsm_class
        settings["remote.log.storage.manager.class.path"] = f"{self.plugin_dir}/*"
        settings |= {f"rsm.config.{k}": v for k, v in self.rsm.items()}
        return settings

    def format_args(self) -> list[str]:
        """More ``StorageTool format`` arguments (a subclass's SCRAM credentials)."""
        return []

    def _java(self, main: str, *args: str) -> list[str]:
        # IPv4 sockets: its listener then shows in /proc/PID/net/tcp (listening_ports)
        return [
            "java",
            "-Xmx768m",
            "-Djava.net.preferIPv4Stack=true",
            "-cp",
            f"{self.libs}/*",
            main,
            *args,
        ]

    def start(self) -> None:
        """Format (once) and start; ready when the listener accepts. A first start whose port
        was taken since :func:`free_port` chose it starts again on other ports."""
        for attempt in range(3):
            try:
                self._start()
                return
            except BrokerError as e:
                if "Address already in use" not in str(e) or attempt == 2:
                    raise
                shutil.rmtree(self.home, ignore_errors=True)
                self.cluster_id = ""
                self.port, self.controller_port = free_port(), free_port()

    def _start(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        config = self.home / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        (self.home / "log4j2.yaml").write_text(_LOG4J)
        if not self.cluster_id:
            self.cluster_id = self._run("kafka.tools.StorageTool", "random-uuid").strip()
            self._run(
                "kafka.tools.StorageTool",
                "format",
                "-t",
                self.cluster_id,
                "-c",
                str(config),
                *self.format_args(),
            )
        env = dict(os.environ, LOG_DIR=str(self.home))
        command = self._java("kafka.Kafka", str(config))
        command.insert(1, f"-Dlog4j2.configurationFile={self.home / 'log4j2.yaml'}")
        command.insert(1, f"-Dkafka.logs.dir={self.home}")
        with (self.home / "broker.out").open("ab") as out:
            self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BrokerError(f"broker exited with {self.proc.returncode}: {self.tail()}")
            if self.port in listening_ports(self.proc.pid):  # its own socket, not a stranger's
                return
            time.sleep(0.2)
        self.stop()
        raise BrokerError(f"broker did not listen within {START_TIMEOUT_S:.0f} s: {self.tail()}")

    def _run(self, main: str, *args: str) -> str:
        done = subprocess.run(self._java(main, *args), capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise BrokerError(f"{main} {' '.join(args)} failed: {done.stdout}{done.stderr}")
        return done.stdout

    def create_topics(self, topics: list[NewTopic]) -> None:
        """Create ``topics``, again while the broker is not registered yet (listening comes
        before KRaft has unfenced it: "only 0 broker(s) are registered"), bounded."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        deadline = time.monotonic() + START_TIMEOUT_S
        todo = list(topics)
        while todo:
            failed = []
            for topic, future in zip(todo, admin.create_topics(todo).values(), strict=True):
                try:
                    future.result(30)
                except KafkaException as e:
                    if time.monotonic() > deadline:
                        raise BrokerError(f"topic {topic.topic} not created: {e}") from e
                    failed.append(topic)
            todo = failed
            if todo:
                time.sleep(0.5)

    def tail(self, lines: int = 40) -> str:
        path = self.home / "broker.out"
        return (
            "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
            if path.exists()
            else ""
        )

    def stop(self) -> None:
        """SIGTERM by pid (a controlled shutdown), SIGKILL after the timeout."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def restart(self) -> None:
        """Stop and start again on the same ports and folders (a new leader epoch)."""
        self.stop()
        self._start()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.home, ignore_errors=True)


_LOG4J = """Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: WARN
      AppenderRef:
        - ref: STDOUT
    Logger:
      - name: kafka.log.remote
        level: INFO
      - name: io.aiven
        level: INFO
      - name: org.apache.kafka.server.log.remote
        level: INFO
"""
