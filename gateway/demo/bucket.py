"""Write the demo bucket: broker folders for every demo topic, tiered into a local bucket.

Layout under ``root`` (which must be new or empty)::

    root/bucket/                 the filesystem store root: file://<root>/bucket
    root/bucket/demo/...         the objects, under the key prefix "demo/"
    root/keys/demo.pem           a fresh RSA-2048 key pair (PKCS#8 PEM): --key-pair demo=<path>
    root/segments/<topic>-<p>/   the broker partition folders that were tiered

Segments are tiered as ``RemoteLogManager`` would: a segment's event time is five minutes after
its last batch; the re-uploaded segment of ``inventory`` gets a new segment id, broker 1 and an
event time one second later, so a bucket scan (event-time order) lets it displace the first
upload, as Kafka's metadata cache does. Objects are put in event-time order.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import urlencode

from Crypto.PublicKey import RSA

from gateway.demo.log import PartitionLog, PartitionStats
from gateway.demo.topics import DEMO_KEY_ID, TOPICS, DemoTopic
from gateway.errors import ConfigurationError
from gateway.kafka.demo import DEMO_BASE_TIMESTAMP
from gateway.kafka.uuids import encode_uuid
from gateway.remote.keyring import KeyRing
from gateway.remote.tiering import (
    SegmentObjects,
    build_segment_objects,
    read_segment_dir,
    segment_metadata,
    upload_segment,
)
from gateway.storage.filesystem import FilesystemStore

DEMO_KEY_PREFIX: Final = "demo/"
DEFAULT_BASE_URL: Final = "http://127.0.0.1:8080"
UPLOAD_DELAY_MS: Final = 5 * 60 * 1000  # from a segment's last batch to its upload
REUPLOAD_DELAY_MS: Final = 1000
LEADER_BROKER: Final = 0
REUPLOAD_BROKER: Final = 1


@dataclass(frozen=True, slots=True)
class PartitionSummary:
    partition: int
    segments: int  # distinct segments (offset ranges)
    uploads: int  # manifests in the bucket: more than segments when one was uploaded twice
    records: int  # data records, aborted ones included
    control_records: int
    aborted_records: int
    first_offset: int
    last_offset: int  # may be a transaction marker's
    first_timestamp: int
    last_timestamp: int
    leader_epochs: tuple[int, ...]

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


@dataclass(frozen=True, slots=True)
class TopicSummary:
    name: str
    topic_id: uuid.UUID
    description: str
    partitions: tuple[PartitionSummary, ...]
    chunk_size: int
    compressed: bool  # the tiered chunks (not the producer's batches)
    encrypted_with: str | None

    @property
    def topic_id_text(self) -> str:
        """Kafka's ``Uuid.toString()``, as in the object keys."""
        return encode_uuid(self.topic_id)

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions)

    def partition(self, number: int) -> PartitionSummary:
        return self.partitions[number]


@dataclass(frozen=True, slots=True)
class DemoBucket:
    root: Path
    store_url: str
    key_prefix: str
    key_pair_path: Path
    topics: tuple[TopicSummary, ...]

    @property
    def key_pair_spec(self) -> str:
        """``ID=PATH`` for ``--key-pair``."""
        return f"{DEMO_KEY_ID}={self.key_pair_path}"

    @property
    def serve_args(self) -> list[str]:
        """The ``serve`` options that serve this bucket."""
        return [
            "--store",
            self.store_url,
            "--key-prefix",
            self.key_prefix,
            "--key-pair",
            self.key_pair_spec,
        ]

    def topic(self, name: str) -> TopicSummary:
        for topic in self.topics:
            if topic.name == name:
                return topic
        raise KeyError(name)

    def example_requests(self, base_url: str = DEFAULT_BASE_URL) -> list[str]:
        """Three ``curl`` commands: a fetch, a ListOffsets by timestamp, a read_committed
        fetch across an aborted transaction."""
        base = base_url.rstrip("/")
        clicks = self.topic("clicks.v2-raw").partition(1)
        middle = (clicks.first_timestamp + clicks.last_timestamp) // 2
        queries = (
            ("orders", 0, "records", {"offset": 0, "max_bytes": 4096}),
            ("clicks.v2-raw", 1, "offsets", {"timestamp": middle}),
            ("payments", 0, "records", {"offset": 0, "isolation_level": "read_committed"}),
        )
        return [
            f"curl '{base}/v1/topics/{name}/partitions/{p}/{what}?{urlencode(query)}'"
            for name, p, what, query in queries
        ]


def _fresh_root(root: Path) -> Path:
    root = root.resolve()
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise ConfigurationError(f"{root}: the demo bucket needs a new or empty folder")
    root.mkdir(parents=True, exist_ok=True)
    return root


def _write_key_pair(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pem = RSA.generate(2048).export_key(format="PEM", pkcs=8)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # a private key
    with os.fdopen(fd, "wb") as out:
        out.write(pem)


def _tier(
    topic: DemoTopic, partition: int, folder: Path, keys: KeyRing
) -> Iterator[SegmentObjects]:
    """The objects of every segment of ``folder``, plus the re-upload if this is its partition."""
    for index, segment in enumerate(read_segment_dir(folder, include_active=True)):
        uploads = 2 if topic.reupload == (partition, index) else 1
        for upload in range(uploads):  # the second a re-upload by the next leader
            meta = segment_metadata(
                segment, topic=topic.name, topic_id=topic.topic_id, partition=partition
            )
            event_ms = meta.max_timestamp_ms + UPLOAD_DELAY_MS + upload * REUPLOAD_DELAY_MS
            meta = dataclasses.replace(
                meta,
                event_timestamp_ms=event_ms,
                broker_id=REUPLOAD_BROKER if upload else LEADER_BROKER,
            )
            yield build_segment_objects(
                segment, meta, key_prefix=DEMO_KEY_PREFIX, options=topic.options, keys=keys
            )


def _summary(
    partition: int, stats: PartitionStats, objects: list[SegmentObjects]
) -> PartitionSummary:
    metas = [o.manifest.remote_log_segment_metadata for o in objects]
    ends = [m.end_offset for m in metas if m is not None]
    return PartitionSummary(
        partition=partition,
        segments=stats.segments,
        uploads=len(objects),
        records=stats.records,
        control_records=stats.control_records,
        aborted_records=stats.aborted_records,
        first_offset=0,
        last_offset=max(ends),
        first_timestamp=stats.first_timestamp,
        last_timestamp=stats.last_timestamp,
        leader_epochs=tuple(stats.epochs),
    )


def prepare_demo_bucket(root: Path) -> tuple[DemoBucket, list[SegmentObjects]]:
    """Write the key pair and the broker folders; build (not upload) every segment's objects,
    in upload order. CPU work only: call it from a worker thread in async code."""
    root = _fresh_root(root)
    key_path = root / "keys" / f"{DEMO_KEY_ID}.pem"
    _write_key_pair(key_path)
    keys = KeyRing.from_specs([f"{DEMO_KEY_ID}={key_path}"])
    summaries: list[TopicSummary] = []
    uploads: list[SegmentObjects] = []
    for topic in TOPICS:
        partitions, topic_uploads = [], []
        for partition in range(topic.partitions):
            folder = root / "segments" / f"{topic.name}-{partition}"
            log = PartitionLog(folder, base_timestamp=DEMO_BASE_TIMESTAMP)
            topic.fill(log, random.Random(f"{topic.name}-{partition}"), partition)
            stats = log.close()
            objects = list(_tier(topic, partition, folder, keys))
            partitions.append(_summary(partition, stats, objects))
            topic_uploads += objects
        summaries.append(
            TopicSummary(
                name=topic.name,
                topic_id=topic.topic_id,
                description=topic.description,
                partitions=tuple(partitions),
                chunk_size=topic.options.chunk_size,
                compressed=any(o.manifest.compression for o in topic_uploads),
                encrypted_with=topic.options.encrypt_with,
            )
        )
        uploads += topic_uploads
    uploads.sort(key=_event_time)
    bucket = DemoBucket(
        root=root,
        store_url=(root / "bucket").as_uri(),
        key_prefix=DEMO_KEY_PREFIX,
        key_pair_path=key_path,
        topics=tuple(summaries),
    )
    return bucket, uploads


def _event_time(objects: SegmentObjects) -> int:
    meta = objects.manifest.remote_log_segment_metadata
    return -1 if meta is None else meta.event_timestamp_ms


async def write_demo_bucket_async(root: Path) -> DemoBucket:
    """:func:`write_demo_bucket` for callers already inside an event loop."""
    bucket, uploads = await asyncio.to_thread(prepare_demo_bucket, root)
    store_root = bucket.root / "bucket"
    store_root.mkdir()
    store = FilesystemStore(store_root)
    try:
        for objects in uploads:
            await upload_segment(store, objects)
    finally:
        await store.close()
    return bucket


def write_demo_bucket(root: Path) -> DemoBucket:
    """Write the demo bucket under ``root`` (new or empty); see the module docstring."""
    return asyncio.run(write_demo_bucket_async(root))
