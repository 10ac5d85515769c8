"""The bucket of the end-to-end HTTP benchmark: one topic, one partition, records of ~200 B
encoded by kafka-python's record builder (an independent encoder) in producer-sized batches,
laid down as broker segments of ``segment_mib`` by :class:`SegmentWriter` and tiered
uncompressed and unencrypted into a filesystem store (``file://``).

Built once per parameters under ``build/bench-http/<key>/`` and reused (a ``done`` file marks a
finished build).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import shutil
import struct
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from kafka.record.default_records import DefaultRecordBatchBuilder

from gateway.kafka.writer import SegmentWriter
from gateway.remote.keyring import KeyRing
from gateway.remote.tiering import (
    TieringOptions,
    build_segment_objects,
    read_segment_dir,
    segment_metadata,
    upload_segment,
)
from gateway.storage.filesystem import FilesystemStore

TOPIC: Final = "bench.http"
KEY_PREFIX: Final = "tiered/"
BATCH_RECORDS: Final = 74  # ~16 KiB batches, as a producer's default batch.size makes
BASE_TS: Final = 1_700_000_000_000
KEY: Final = b"user-%d"  # the key of the record at offset n
TOPIC_ID: Final = uuid.UUID("6b1c7c1e-5d1e-4f0e-9a51-000000000015")


@dataclass(frozen=True, slots=True)
class BenchBucket:
    root: Path  # the bucket folder: serve --store file://<root>
    records: int
    segments: int
    log_bytes: int
    logs: tuple[Path, ...]  # the .log objects, in offset order

    @property
    def store_url(self) -> str:
        return f"file://{self.root}"


def _values(rng: random.Random) -> list[bytes]:
    """1 000 JSON-like values of 200 B (half random hex), reused round robin."""
    return [
        (f'{{"id":{i},"user":"u{rng.randrange(999)}","d":"'.encode()
         + rng.randbytes(60).hex().encode() + b'"}').ljust(200)
        for i in range(1000)
    ]  # fmt: skip


def _batch(values: list[bytes], first: int, count: int) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
    for i in range(count):
        n = first + i
        builder.append(i, timestamp=BASE_TS + n, key=KEY % n, value=values[n % 1000], headers=[])
    raw = bytearray(builder.build())
    struct.pack_into(">q", raw, 0, first)  # the log assigns offsets; the CRC does not cover them
    struct.pack_into(">i", raw, 12, 0)  # the broker's partition leader epoch
    return bytes(raw)


def _write_segments(folder: Path, records: int, segment_bytes: int) -> None:
    values = _values(random.Random(15))
    writer = SegmentWriter(base_offset=0)
    offset = 0
    while offset < records:
        count = min(BATCH_RECORDS, records - offset)
        batch = _batch(values, offset, count)
        if writer.log and len(writer.log) + len(batch) > segment_bytes:
            writer.write(folder)
            writer = writer.next_segment()
        writer.append(batch)
        offset += count
    writer.write(folder)


async def _tier(folder: Path, root: Path) -> None:
    store = FilesystemStore(root)
    keys = KeyRing.from_specs([])
    for index, segment in enumerate(read_segment_dir(folder, include_active=True)):
        meta = segment_metadata(segment, topic=TOPIC, topic_id=TOPIC_ID, partition=0)
        meta = dataclasses.replace(meta, segment_id=uuid.UUID(int=index + 1))
        objects = build_segment_objects(
            segment, meta, key_prefix=KEY_PREFIX, options=TieringOptions(), keys=keys
        )
        await upload_segment(store, objects)


def bench_bucket(cache: Path, records: int, segment_mib: int) -> BenchBucket:
    """The bucket for these parameters, built under ``cache`` unless already there."""
    where = cache.resolve() / f"r{records}-s{segment_mib}MiB-v1"
    root = where / "bucket"
    if not (where / "done").exists():
        shutil.rmtree(where, ignore_errors=True)
        folder = where / "segments" / f"{TOPIC}-0"
        folder.mkdir(parents=True)
        _write_segments(folder, records, segment_mib * 1024 * 1024)
        root.mkdir()
        asyncio.run(_tier(folder, root))
        shutil.rmtree(where / "segments")
        (where / "done").write_text("ok\n")
    logs = sorted(root.rglob("*.log"), key=lambda p: int(p.name.split("-", 1)[0]))
    return BenchBucket(
        root=root,
        records=records,
        segments=len(logs),
        log_bytes=sum(p.stat().st_size for p in logs),
        logs=tuple(logs),
    )
