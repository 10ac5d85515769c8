"""The tiered history of the broker benchmark, built once by a real Kafka broker and cached.

A :class:`BenchBroker` tiers one topic of ``PARTITIONS`` partitions with the real Aiven plugin
(``TG_AIVEN_PLUGIN_DIR`` or ``/work/scratch/aiven-build/target/plugin``), its filesystem
backend rooted at the bucket folder (the object keys of an S3 bucket, one file each, so the
slow S3 stand-in serves the very objects the plugin wrote). Segments of ``SEGMENT_BYTES``,
chunks of ``CHUNK_BYTES``, no compression or encryption. Local retention is infinite while
building, so every data segment is both tiered and local: the broker home (log folders, KRaft
metadata, ``__remote_log_metadata``) and the bucket are cached together under
``build/bench-broker/<key>/``. Each partition ends with a one-record trailer (the append that
rolled the last data segment): it stays in the active segment, never tiered, and is not read.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from confluent_kafka import Producer
from confluent_kafka import admin as ka

from tests.realkafka.tiering import TieringBroker

TOPIC: Final = "backfill"
PARTITIONS: Final = 8
SEGMENT_BYTES: Final = 16 * 2**20
CHUNK_BYTES: Final = 4 * 2**20
VALUE_BYTES: Final = 1000
FORMAT: Final = 1  # bump when the bucket's shape changes
PLUGIN_ENV: Final = "TG_AIVEN_PLUGIN_DIR"
PLUGIN_DEFAULT: Final = Path("build/aiven-plugin")  # the plugin's jars (not on Maven Central)
BUILD_WAIT_S: Final = 900.0
CHECK_MASK: Final = (1 << 64) - 1


def plugin_dir() -> Path | None:
    value = os.environ.get(PLUGIN_ENV)
    path = Path(value) if value else PLUGIN_DEFAULT
    return path if path.is_dir() and any(path.glob("*.jar")) else None


def record_sum(offset: int, key: bytes | None, value: bytes | None) -> int:
    """One record's share of a partition's checksum (summed mod 2**64: order-free; offsets
    are checked contiguous separately)."""
    crc = zlib.crc32(value or b"", zlib.crc32(key or b""))
    return (crc * 0x9E3779B97F4A7C15 + offset) & CHECK_MASK


class BenchBroker(TieringBroker):
    """A tiering broker at Kafka's defaults where the harness's differ (``remote.fetch.max.
    wait.ms``) and a heap of ``heap``."""

    heap = "2g"
    extra: Mapping[str, str] = {}

    def properties(self) -> dict[str, str]:
        settings = super().properties()
        settings["remote.fetch.max.wait.ms"] = "500"  # Kafka's default
        return settings | dict(self.extra)

    def _java(self, main: str, *args: str) -> list[str]:
        command = super()._java(main, *args)
        return [f"-Xmx{self.heap}" if c.startswith("-Xmx") else c for c in command]


@dataclass(frozen=True)
class Built:
    """A cached build: ``home`` (the broker's folder, local segments included) and ``bucket``
    (the plugin's objects), the topic id, the cluster id, and per partition the end of the
    tiered records (the trailer's offset), their count and checksum."""

    where: Path
    topic_id: str
    cluster_id: str
    ends: dict[int, int]
    sums: dict[int, int]
    log_bytes: int

    @property
    def home(self) -> Path:
        return self.where / "home"

    @property
    def bucket(self) -> Path:
        return self.where / "bucket"

    @property
    def records(self) -> int:
        return sum(self.ends.values())

    @classmethod
    def load(cls, where: Path) -> Built:
        meta = json.loads((where / "built.json").read_text())
        return cls(
            where,
            meta["topic_id"],
            meta["cluster_id"],
            {int(p): e for p, e in meta["ends"].items()},
            {int(p): s for p, s in meta["sums"].items()},
            meta["log_bytes"],
        )


def build_key(mib: int) -> str:
    return (
        f"aiven-{mib}MiB-p{PARTITIONS}-seg{SEGMENT_BYTES >> 20}-chunk{CHUNK_BYTES >> 20}-"
        f"v{VALUE_BYTES}-f{FORMAT}"
    )


def plugin_settings() -> dict[str, str]:
    """``rsm.config.*`` for building: no compression, no encryption, 4 MiB chunks."""
    return {"chunk.size": str(CHUNK_BYTES), "compression.enabled": "false",
            "encryption.enabled": "false"}  # fmt: skip


def built_bucket(cache: Path, mib: int) -> Built:
    """The build of ``mib`` MiB of records, from the cache or made now."""
    plugin = plugin_dir()
    if plugin is None:
        raise SystemExit(
            f"no Aiven plugin (set {PLUGIN_ENV} or build {PLUGIN_DEFAULT}): the "
            "LocalTieredStorage fallback is not implemented in this benchmark"
        )
    where = cache.resolve() / build_key(mib)
    if (where / "built.json").exists():
        return Built.load(where)
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    broker = BenchBroker(where / "home", where / "bucket", plugin_dir=plugin,
                         rsm=plugin_settings())  # fmt: skip
    started = time.monotonic()
    try:
        broker.start()
        broker.create_topics([ka.NewTopic(TOPIC, PARTITIONS, 1, config={
            "remote.storage.enable": "true", "retention.ms": "-1",
            "local.retention.ms": "-2", "segment.bytes": str(SEGMENT_BYTES),
            "segment.ms": str(7 * 24 * 3600 * 1000), "file.delete.delay.ms": "1000",
        })])  # fmt: skip
        sums, counts = produce(broker.bootstrap, mib * 2**20)
        took = time.monotonic() - started
        print(f"  produced {sum(counts.values())} records in {took:.0f} s", flush=True)
        ends = roll_last(broker)
        if ends != counts:
            raise RuntimeError(f"trailer offsets {ends}, records written {counts}")
        wait_tiered(broker, where / "bucket", ends)
        topic_id = broker.topic_id(TOPIC)
    finally:
        broker.stop()
    log_bytes = sum(p.stat().st_size for p in (where / "home" / "logs").glob(f"{TOPIC}-*/*.log"))
    meta = {"topic_id": topic_id, "cluster_id": broker.cluster_id, "ends": ends, "sums": sums,
            "log_bytes": log_bytes}  # fmt: skip
    (where / "built.json").write_text(json.dumps(meta, indent=1))
    print(f"  built {where.name} in {time.monotonic() - started:.0f} s", flush=True)
    return Built.load(where)


def produce(bootstrap: str, total: int) -> tuple[dict[int, int], dict[int, int]]:
    """``total`` bytes of values, round-robin over the partitions in runs of 100 records:
    per partition the checksum and the count."""
    pool = os.urandom(2**22)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                         "batch.size": 2**20, "compression.type": "none",
                         "queue.buffering.max.kbytes": 2**18})  # fmt: skip
    sums = dict.fromkeys(range(PARTITIONS), 0)
    counts = dict.fromkeys(range(PARTITIONS), 0)
    failed: list[str] = []

    def done(err: object, msg: object) -> None:
        if err is not None:
            failed.append(str(err))
            return
        p = msg.partition()  # type: ignore[attr-defined]
        share = record_sum(msg.offset(), msg.key(), msg.value())  # type: ignore[attr-defined]
        sums[p] = (sums[p] + share) & CHECK_MASK
        counts[p] += 1

    n = total // VALUE_BYTES
    for i in range(n):
        at = (i * 7919) % (len(pool) - VALUE_BYTES)
        partition = (i // 100) % PARTITIONS
        while True:
            try:
                producer.produce(TOPIC, pool[at : at + VALUE_BYTES], b"k%d" % i,
                                 partition=partition, on_delivery=done)  # fmt: skip
                break
            except BufferError:
                producer.poll(0.1)
        if i % 10000 == 0:
            producer.poll(0)
    if producer.flush(300) != 0 or failed:
        raise RuntimeError(f"produce: {failed[:3]} (or records still in flight)")
    return sums, counts


def roll_last(broker: BenchBroker) -> dict[int, int]:
    """Roll every partition's last data segment by time (a trailer appended a second after
    ``segment.ms`` drops to 1000): the trailers' offsets."""
    op = ka.AlterConfigOpType.SET
    entry = ka.ConfigEntry("segment.ms", "1000", incremental_operation=op)
    resource = ka.ConfigResource(ka.ResourceType.TOPIC, TOPIC, incremental_configs=[entry])
    for future in broker.admin.incremental_alter_configs([resource]).values():
        future.result(30)
    time.sleep(2.5)
    ends: dict[int, int] = {}
    for p in range(PARTITIONS):
        (offset,) = broker.produce(TOPIC, [(b"trailer", b"trailer")], partition=p)
        ends[p] = offset
    return ends


def wait_tiered(broker: BenchBroker, bucket: Path, ends: dict[int, int]) -> None:
    """Until every partition's rolled segments have their manifest in the bucket and their
    COPY_SEGMENT_FINISHED in the metadata topic (all but the active one)."""
    logs = broker.log_dir
    rolled = {p: len(list((logs / f"{TOPIC}-{p}").glob("*.log"))) - 1 for p in ends}
    want = sum(rolled.values())
    deadline = time.monotonic() + BUILD_WAIT_S
    while True:
        manifests = len(list(bucket.rglob("*.rsm-manifest")))
        if manifests >= want:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{manifests} of {want} segments tiered in {BUILD_WAIT_S} s")
        time.sleep(1)
    broker.wait_uploaded(TOPIC, want, timeout_s=120)
