"""A small tiered bucket for the Spark tests, and the records it must read back.

Batches come from independent encoders (kafka-python, aiokafka's pure-Python and C builders,
rotating), markers and LogAppendTime via ``as_broker``; the broker side (segment files and
their indexes) is our ``SegmentWriter`` and the upload our tiering writer, as a broker with
the Aiven plugin would do. The expected records are computed from the generator's own inputs,
never by decoding: read_committed by brute force (a transactional batch is aborted when its
producer's next marker is an ABORT), not from transaction indexes.

Every topic mixes producer codecs (none, gzip, snappy, lz4, zstd), transactions committed and
aborted across segment rolls, headers, null keys and values, a LogAppendTime batch and leader
epoch changes; the topics differ in the chunk transforms (compression x encryption). Partition
0 of ``plain`` has its second segment uploaded twice (the later upload displaces the first).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import struct
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from Crypto.PublicKey import RSA

from gateway.kafka.writer import SegmentWriter
from gateway.remote.keyring import KeyRing
from gateway.remote.tiering import (
    SegmentObjects,
    TieringOptions,
    build_segment_objects,
    read_segment_dir,
    segment_metadata,
    upload_segment,
)
from gateway.storage.filesystem import FilesystemStore
from tests.unit.kafka.independent import BUILDERS, Rec, as_broker, build

BASE_TS = 1_700_000_000_000
KEY_ID = "k1"
PREFIX = "tiered/"
BUILDER_NAMES = list(BUILDERS)


@dataclass(frozen=True)
class Expected:
    offset: int
    timestamp: int  # ms
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    epoch: int
    aborted: bool


@dataclass
class PartitionData:
    records: list[Expected] = field(default_factory=list)
    stamps: list[tuple[int, int]] = field(default_factory=list)  # (offset, ts), markers too
    end_offset: int = 0  # one past the last offset
    segments: int = 0

    def committed(self) -> list[Expected]:
        return [r for r in self.records if not r.aborted]


@dataclass(frozen=True)
class TopicSpec:
    name: str
    options: TieringOptions
    partitions: int = 2


TOPICS = (
    TopicSpec("plain", TieringOptions(chunk_size=1024)),
    TopicSpec("zipped", TieringOptions(chunk_size=1500, compression=True)),
    TopicSpec("sealed", TieringOptions(chunk_size=2048, encrypt_with=KEY_ID)),
    TopicSpec(
        "zipped-sealed",
        TieringOptions(chunk_size=1024, compression=True, encrypt_with=KEY_ID),
        partitions=1,
    ),
)


@dataclass
class Bucket:
    root: Path
    store_url: str
    key_pairs: tuple[str, ...]
    topics: dict[str, dict[int, PartitionData]]

    def options(self, topic: str, **extra: str) -> dict[str, str]:
        return {
            "store": self.store_url,
            "keyPrefix": PREFIX,
            "keyPairs": ",".join(self.key_pairs),
            "topic": topic,
            **extra,
        }


def _record(rng: random.Random, ts: int) -> Rec:
    key = None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 12))
    value = None if rng.random() < 0.05 else rng.randbytes(rng.randint(0, 300))
    headers: list[tuple[str, bytes | None]] = []
    for i in range(rng.choice((0, 0, 1, 2))):
        headers.append((f"h{i}-é", None if rng.random() < 0.3 else rng.randbytes(5)))
    return Rec(0, ts, key, value, headers)


def _marker(pid: int, abort: bool, offset: int, ts: int, epoch: int) -> bytes:
    key = struct.pack(">hh", 0, 0 if abort else 1)
    value = struct.pack(">hi", 0, 7)
    raw = build("kafka-python", offset, [Rec(0, ts, key, value, [])], transactional=True,
                producer_id=pid, producer_epoch=0)  # fmt: skip
    return as_broker(raw, control=True, leader_epoch=epoch)


def fill_partition(folder: Path, rng: random.Random, batches: int = 60) -> PartitionData:
    """Append ``batches`` steps to a new partition folder, rolling every 11 to 17 steps."""
    writer = SegmentWriter(base_offset=0, index_interval_bytes=300)
    data = PartitionData()
    epochs = {0: 0, batches // 3: 2, batches // 2: 3}  # step -> new leader epoch
    epoch, seq, codec = 0, 0, 0
    open_txn: list[int] = []  # indexes into data.records of the open transaction
    txn_pid = 4242
    roll_at = rng.randint(11, 17)
    for step in range(batches):
        epoch = epochs.get(step, epoch)
        ts = BASE_TS + step * 1000
        offset = writer.next_offset
        if open_txn and rng.random() < 0.35:
            abort = rng.random() < 0.5
            writer.append(_marker(txn_pid, abort, offset, ts, epoch))
            for i in open_txn:
                data.records[i] = dataclasses.replace(data.records[i], aborted=abort)
            open_txn = []
            data.stamps.append((offset, ts))
        else:
            transactional = rng.random() < 0.4
            recs = [
                dataclasses.replace(_record(rng, ts + i), offset_delta=i)
                for i in range(rng.randint(1, 8))
            ]
            codec = (codec + 1) % 5
            raw = build(
                BUILDER_NAMES[step % len(BUILDER_NAMES)],
                offset,
                recs,
                codec=codec,
                transactional=transactional,
                producer_id=txn_pid if transactional else -1,
                producer_epoch=0 if transactional else -1,
                base_sequence=seq if transactional else -1,
            )
            if transactional:
                seq += len(recs)
            log_append = step == 7
            append_ts = ts + 500 if log_append else None
            writer.append(as_broker(raw, log_append_time=append_ts, leader_epoch=epoch))
            for r in recs:
                if transactional:
                    open_txn.append(len(data.records))
                stamp = append_ts if append_ts is not None else r.timestamp
                data.records.append(
                    Expected(
                        offset + r.offset_delta,
                        stamp,
                        int(log_append),
                        r.key,
                        r.value,
                        tuple(r.headers),
                        epoch,
                        False,
                    )
                )
                data.stamps.append((offset + r.offset_delta, stamp))
        if step + 1 == roll_at:
            writer.write(folder)
            writer = writer.next_segment()
            data.segments += 1
            roll_at += rng.randint(11, 17)
    if open_txn:  # close it: an open transaction would hold back read_committed
        offset = writer.next_offset
        writer.append(_marker(txn_pid, False, offset, BASE_TS + batches * 1000, epoch))
        data.stamps.append((offset, BASE_TS + batches * 1000))
    writer.write(folder)
    data.segments += 1
    data.end_offset = writer.next_offset
    return data


def _key_pair(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pem = RSA.generate(2048).export_key(format="PEM", pkcs=8)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(pem)


def write_bucket(root: Path, topics: tuple[TopicSpec, ...] = TOPICS) -> Bucket:
    key_path = root / "keys" / f"{KEY_ID}.pem"
    _key_pair(key_path)
    keys = KeyRing.from_specs([f"{KEY_ID}={key_path}"])
    uploads: list[tuple[int, SegmentObjects]] = []
    expected: dict[str, dict[int, PartitionData]] = {}
    for spec in topics:
        topic_id = uuid.uuid5(uuid.NAMESPACE_URL, spec.name)
        expected[spec.name] = {}
        for p in range(spec.partitions):
            folder = root / "segments" / f"{spec.name}-{p}"
            expected[spec.name][p] = fill_partition(folder, random.Random(f"{spec.name}-{p}"))
            for index, segment in enumerate(read_segment_dir(folder, include_active=True)):
                again = spec.name == "plain" and p == 0 and index == 1
                for upload in range(2 if again else 1):
                    meta = segment_metadata(
                        segment, topic=spec.name, topic_id=topic_id, partition=p
                    )
                    event = meta.max_timestamp_ms + 300_000 + upload * 1000
                    meta = dataclasses.replace(meta, event_timestamp_ms=event, broker_id=upload)
                    objects = build_segment_objects(
                        segment, meta, key_prefix=PREFIX, options=spec.options, keys=keys
                    )
                    uploads.append((event, objects))
    uploads.sort(key=lambda u: u[0])
    (root / "bucket").mkdir()

    async def put_all() -> None:
        store = FilesystemStore(root / "bucket")
        try:
            for _, objects in uploads:
                await upload_segment(store, objects)
        finally:
            await store.close()

    asyncio.run(put_all())
    return Bucket(root, (root / "bucket").as_uri(), (f"{KEY_ID}={key_path}",), expected)


def rows_of(records: list[Expected], topic: str, partition: int) -> list[tuple[object, ...]]:
    """Expected rows as (topic, partition, offset, key, value, ts ms, type, epoch, headers)."""
    return [
        (topic, partition, r.offset, r.key, r.value, r.timestamp, r.timestamp_type, r.epoch,
         r.headers)
        for r in records
    ]  # fmt: skip
