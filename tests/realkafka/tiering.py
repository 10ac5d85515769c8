"""A real broker that tiers, with Kafka's own ``LocalTieredStorage`` (``kafka-storage`` test jar,
loaded child-first with :data:`GATE_CLASS`: an upload holds after its ``.log`` while
``<remote_dir>/hold-uploads`` exists) or the Aiven plugin; admin, produce, metadata helpers."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicCollection, TopicPartition
from confluent_kafka import admin as ka

from tests.realkafka.broker import AIVEN_RSM, Broker
from tests.realkafka.jars import CACHE, kafka_libs, local_tiered_storage_dir

LOCAL_TIERED_STORAGE = "org.apache.kafka.server.log.remote.storage.LocalTieredStorage"
AIVEN_FILESYSTEM = "io.aiven.kafka.tieredstorage.storage.filesystem.FileSystemStorage"
METADATA_TOPIC = "__remote_log_metadata"
GATE_CLASS = "tieredgateway.GatedTransferer"
HOLD_FILE = "hold-uploads"
WAIT_S = 60.0
_TOPIC = (
    "remote.storage.enable=true local.retention.ms=1000 retention.ms=-1 file.delete.delay.ms=1000"
)
COPY_STARTED, COPY_FINISHED, DELETE_STARTED, DELETE_FINISHED = range(4)  # segment states

_GATE_SOURCE = """package tieredgateway; import java.io.*; import java.nio.ByteBuffer;
import java.nio.channels.FileChannel; import org.apache.kafka.server.log.remote.storage.Transferer;
public final class GatedTransferer implements Transferer {
  public void transfer(File from, File to) throws IOException {
    if (from.exists()) java.nio.file.Files.copy(from.toPath(), to.toPath());
    File gate = new File(to.getParentFile().getParentFile().getParentFile(), "hold-uploads");
    try { while (to.getName().endsWith(".log") && gate.exists()) Thread.sleep(50); }
    catch (InterruptedException e) { throw new InterruptedIOException(); } }
  public void transfer(ByteBuffer from, File to) throws IOException {
    if (from == null || !from.hasRemaining()) return;
    try (FileChannel ch = new FileOutputStream(to, false).getChannel()) { ch.write(from); } } }
"""


def gate_jar() -> Path:
    """``GatedTransferer`` compiled against the test jar, once."""
    jar = CACHE / "gated-transferer" / "gated-transferer.jar"
    if not jar.exists():
        source = jar.parent / "GatedTransferer.java"
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text(_GATE_SOURCE)
        classes, cp = jar.parent / "classes", f"{kafka_libs()}/*:{local_tiered_storage_dir()}/*"
        subprocess.run(["javac", "-cp", cp, "-d", str(classes), str(source)], check=True)
        subprocess.run(["jar", "cf", str(jar), "-C", str(classes), "."], check=True)
    return jar


@dataclass(frozen=True)
class MetaRecord:
    partition: int
    offset: int
    key: bytes | None
    value: bytes


@dataclass(frozen=True)
class Event:
    """The identity and state of a metadata value (apiKey 0, 1 or 2); see :func:`summarize`."""

    api_key: int
    topic: str
    topic_id: uuid.UUID
    partition: int
    segment_id: uuid.UUID | None  # None: a partition delete
    start_offset: int | None  # apiKey 0 only, as end_offset
    end_offset: int | None
    state: int


def _uvarint(b: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while b[i] & 0x80:
        value, shift, i = value | (b[i] & 0x7F) << shift, shift + 7, i + 1
    return value | b[i] << shift, i + 1


def _skip_tags(b: bytes, i: int) -> int:
    count, i = _uvarint(b, i)
    for _ in range(count):
        size, i = _uvarint(b, _uvarint(b, i)[1])
        i += size
    return i


def summarize(value: bytes) -> Event:
    """Decode just enough of a value (spec §6.2-6.4), independently of the product's serde."""
    api_key, i = _uvarint(value, _uvarint(value, 0)[1])  # after the frame version
    length, i = _uvarint(value, _uvarint(value, i)[1])  # after the record version
    topic, i = value[i : i + length - 1].decode(), i + length - 1
    topic_id = uuid.UUID(bytes=value[i : i + 16])
    (partition,) = struct.unpack_from(">i", value, i + 16)
    i = _skip_tags(value, i + 20)
    if api_key == 2:  # broker id, event time, state
        return Event(2, topic, topic_id, partition, None, None, None, value[i + 12])
    segment_id = uuid.UUID(bytes=value[i : i + 16])
    i = _skip_tags(value, i + 16)
    start = end = None
    if api_key == 0:  # start, end, broker id, max time, event time, epochs, size
        start, end = struct.unpack_from(">qq", value, i)
        n, i = _uvarint(value, i + 36)
        for _ in range(n - 1):
            i = _skip_tags(value, i + 12)
        i += 4
    else:  # broker id, event time
        i += 12
    custom, i = _uvarint(value, i)
    state = value[i + max(custom - 1, 0)]
    return Event(api_key, topic, topic_id, partition, segment_id, start, end, state)


States = dict[uuid.UUID, tuple[int, int]]


def segment_states(records: Iterable[MetaRecord], topic: str) -> States:
    """segment id -> (start offset, last state) of ``topic``'s segments."""
    states: States = {}
    for r in records:
        e = summarize(r.value)
        if e.topic == topic and e.segment_id is not None:
            start = e.start_offset if e.start_offset is not None else -1
            states[e.segment_id] = (states.get(e.segment_id, (start, 0))[0], e.state)
    return states


class TieringBroker(Broker):
    """A tiering broker: ``LocalTieredStorage`` under ``remote_dir`` (``plugin_dir`` None) or
    the Aiven plugin from ``plugin_dir`` with its filesystem backend rooted at ``remote_dir``;
    ``rsm`` adds to or overrides the ``rsm.config.*`` settings."""

    def __init__(self, home: Path, remote_dir: Path, *, plugin_dir: Path | None = None,
                 rsm: Mapping[str, str] | None = None) -> None:  # fmt: skip
        self.remote_dir = remote_dir
        self._admin: tuple[ka.AdminClient, str] | None = None
        remote_dir.mkdir(parents=True, exist_ok=True)
        if plugin_dir is None:
            plugin_dir = home / "rsm-class-path"
            plugin_dir.mkdir(parents=True, exist_ok=True)
            for jar in (*local_tiered_storage_dir().glob("*.jar"), gate_jar()):
                if not (plugin_dir / jar.name).exists():
                    (plugin_dir / jar.name).symlink_to(jar)
            settings = {"dir": str(remote_dir), "transferer.class": GATE_CLASS}
            rsm_class = LOCAL_TIERED_STORAGE
        else:
            settings = {"storage.backend.class": AIVEN_FILESYSTEM, "chunk.size": "4096"}
            settings["storage.root"], rsm_class = str(remote_dir), AIVEN_RSM
        super().__init__(kafka_libs(), home, plugin_dir, settings | dict(rsm or {}), rsm_class)

    @property
    def admin(self) -> ka.AdminClient:
        """Kept: a dropped client fails its pending futures with _DESTROY."""
        if self._admin is None or self._admin[1] != self.bootstrap:
            self._admin = (ka.AdminClient({"bootstrap.servers": self.bootstrap}), self.bootstrap)
        return self._admin[0]

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def create_tiered_topic(self, topic: str, partitions: int = 1, segment_ms: int = 1000,
                            **config: str) -> None:  # fmt: skip
        """``remote.storage.enable``, segments rolled by time (on the next append after
        ``segment_ms``), local copies gone a second after upload, ``retention.ms=-1``;
        ``config``: more topic settings, ``_`` for ``.``."""
        settings = dict(kv.split("=") for kv in _TOPIC.split()) | {"segment.ms": str(segment_ms)}
        settings |= {k.replace("_", "."): v for k, v in config.items()}
        self.create_topics([ka.NewTopic(topic, partitions, 1, config=settings)])

    def topic_id(self, topic: str) -> str:
        """As Kafka prints it: URL-safe base64, 22 characters."""
        future = self.admin.describe_topics(TopicCollection([topic]))[topic]
        return str(future.result(30).topic_id)

    def set_retention_ms(self, topic: str, retention_ms: int) -> None:
        op = ka.AlterConfigOpType.SET
        entry = ka.ConfigEntry("retention.ms", str(retention_ms), incremental_operation=op)
        resource = ka.ConfigResource(ka.ResourceType.TOPIC, topic, incremental_configs=[entry])
        for future in self.admin.incremental_alter_configs([resource]).values():
            future.result(30)

    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """DeleteRecords before ``offset``; the new low watermark."""
        futures = self.admin.delete_records([TopicPartition(topic, partition, offset)])
        return int(next(iter(futures.values())).result(30).low_watermark)

    def delete_topic(self, topic: str) -> None:
        for future in self.admin.delete_topics([topic], operation_timeout=30).values():
            future.result(30)

    def produce(self, topic: str, records: Iterable[tuple[bytes | None, bytes]],
                partition: int = 0) -> list[int]:  # fmt: skip
        """Produce and flush; the offsets written, in order."""
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 0, "acks": "all"})
        offsets: list[int] = []

        def done(err: object, msg: object) -> None:
            if err is not None:
                raise RuntimeError(f"produce failed: {err}")
            offsets.append(msg.offset())  # type: ignore[attr-defined]

        for key, value in records:
            producer.produce(topic, value, key, partition=partition, on_delivery=done)
        if producer.flush(30) != 0:
            raise RuntimeError("produce: records still in flight after 30 s")
        return offsets

    def produce_segments(self, topic: str, segments: int, per_segment: int = 10,
                         partition: int = 0) -> list[list[int]]:  # fmt: skip
        """``segments`` segments of ``per_segment`` records, each rolled by the next append
        (the topic's ``segment.ms`` must be 1000), the last by a trailer record; the offsets.
        With a small ``local.retention.ms`` the trailer's segment rolls and tiers too."""
        written = []
        for s in range(segments):
            batch = [(f"k{s}-{i}".encode(), f"v{s}-{i}".encode() * 20) for i in range(per_segment)]
            written.append(self.produce(topic, batch, partition))
            time.sleep(1.3)
        self.produce(topic, [(b"trailer", b"trailer")], partition)
        return written

    def metadata_records(self, timeout_s: float = 30.0) -> list[MetaRecord]:
        """``__remote_log_metadata`` from the start to the end offsets at the call ([] while
        the topic does not exist)."""
        config = {"bootstrap.servers": self.bootstrap, "group.id": "tiering-harness"}
        consumer = Consumer(config | {"enable.auto.commit": False})
        try:
            meta = consumer.list_topics(METADATA_TOPIC, timeout=10).topics[METADATA_TOPIC]
            if meta.error is not None:
                return []
            marks = {p: consumer.get_watermark_offsets(TopicPartition(METADATA_TOPIC, p), 10)
                     for p in meta.partitions}  # fmt: skip
            ends = {p: high for p, (low, high) in marks.items() if high > low}
            consumer.assign([TopicPartition(METADATA_TOPIC, p, OFFSET_BEGINNING) for p in ends])
            out: list[MetaRecord] = []
            deadline = time.monotonic() + timeout_s
            while ends:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{METADATA_TOPIC}: not read to {ends} in {timeout_s} s")
                if (msg := consumer.poll(0.5)) is None or msg.error():
                    continue  # librdkafka retries transient errors itself; the deadline bounds
                p, offset = msg.partition() or 0, msg.offset() or 0
                out.append(MetaRecord(p, offset, msg.key(), msg.value() or b""))
                if offset + 1 >= ends.get(p, 0):
                    ends.pop(p, None)
            return sorted(out, key=lambda r: (r.partition, r.offset))
        finally:
            consumer.close()

    def wait_states(self, topic: str, done: Callable[[States], bool], timeout_s: float = WAIT_S
                    ) -> States:  # fmt: skip
        """Until ``done(segment_states)`` holds for ``topic``; bounded."""
        deadline = time.monotonic() + timeout_s
        while not done(states := segment_states(self.metadata_records(), topic)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: not there within {timeout_s} s: {states}")
            time.sleep(0.5)
        return states

    def wait_uploaded(self, topic: str, count: int, timeout_s: float = WAIT_S) -> States:
        """Until ``count`` segments of ``topic`` are COPY_SEGMENT_FINISHED."""
        finished = lambda s: sum(st == COPY_FINISHED for _, st in s.values()) >= count  # noqa: E731
        return self.wait_states(topic, finished, timeout_s)

    def kill_mid_upload(self, topic: str, partition: int = 0, timeout_s: float = WAIT_S
                        ) -> tuple[uuid.UUID, float]:  # fmt: skip
        """``LocalTieredStorage`` only: hold uploads, roll a segment, wait for a new
        COPY_SEGMENT_STARTED without FINISHED (its ``.log`` is written, nothing else), SIGKILL.
        The held segment id and the seconds from the roll to the kill. The hold stays:
        :meth:`release_uploads` before a restart."""
        (self.remote_dir / HOLD_FILE).touch()
        before = set(segment_states(self.metadata_records(), topic))
        started = time.monotonic()
        self.produce_segments(topic, 1, partition=partition)

        def held(s: States) -> list[uuid.UUID]:
            return [k for k, (_, st) in s.items() if k not in before and st == COPY_STARTED]

        states = self.wait_states(topic, lambda s: bool(held(s)), timeout_s)
        self.kill()
        return held(states)[0], time.monotonic() - started

    def release_uploads(self) -> None:  # the hold of kill_mid_upload
        (self.remote_dir / HOLD_FILE).unlink(missing_ok=True)

    def remote_files(self) -> list[Path]:
        """Every file and folder under ``remote_dir`` (relative), sorted."""
        return sorted(p.relative_to(self.remote_dir) for p in self.remote_dir.rglob("*"))
