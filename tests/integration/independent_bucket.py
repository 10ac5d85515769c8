"""A bucket whose every batch comes from an independent encoder, for end-to-end tests.

Batches are built by kafka-python's and aiokafka's record builders (``tests.unit.kafka.
independent``); the broker-side rewrites (leader epoch, LogAppendTime, control markers) are
applied as a broker would; :class:`~gateway.kafka.writer.SegmentWriter` lays the bytes down as a
broker's segment files and the tiering writer uploads them with every transform combination.
What the gateway must return is kept from the *inputs* (:class:`Written`), never from decoding
the segments, so a decoder bug cannot hide behind its own expectations.

Every partition has: all five producer codecs, LogAppendTime batches, headers and nulls in
keys, values and header values, one record larger than any small ``max_bytes``, committed and
aborted transactions interleaved with plain batches, three leader epochs, several segments,
and one segment uploaded twice (the re-upload by the next leader displaces the first).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import random
import struct
import types
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final
from unittest import mock

import boto3
from Crypto.PublicKey import RSA

from gateway.kafka.codecs import Codec
from gateway.kafka.writer import SegmentWriter
from gateway.remote import transforms
from gateway.remote.keyring import KeyRing
from gateway.remote.tiering import (
    SegmentObjects,
    TieringOptions,
    build_segment_objects,
    read_segment_dir,
    segment_metadata,
    upload_segment,
)
from gateway.storage.base import ObjectStore
from gateway.storage.factory import open_store
from tests.unit.kafka.independent import Rec, as_broker, build

KEY_ID: Final = "e2e"
KEY_PREFIX: Final = "tiered/"
BASE_TS: Final = 1_700_000_000_000
BIG_VALUE: Final = 40_000  # one record larger than any small max_bytes
BATCHES: Final = 43  # the last transaction ends before the log does, as tiering needs
ROLL_EVERY: Final = 12  # four segments; two transactions span a roll (23-26, 33-36)
EPOCH_AT: Final = {0: 0, 14: 2, 30: 5}  # batch index -> new leader epoch
REUPLOADED_SEGMENT: Final = 1
CODECS: Final = (Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD)
BUILDER_NAMES: Final = ("kafka-python", "aiokafka-py", "aiokafka-c")


@dataclass(frozen=True, slots=True)
class Shape:
    """How much each partition holds; the defaults are the end-to-end tests' bucket. Smaller
    values keep every case (codecs, transactions, epochs, the re-upload) in fewer bytes."""

    batches: int = BATCHES
    roll_every: int = ROLL_EVERY
    big_value: int = BIG_VALUE
    max_value: int = 300  # other values are 0 to max_value - 1 bytes
    index_interval_bytes: int = 1024


@dataclass(frozen=True, slots=True)
class TopicSpec:
    name: str
    options: TieringOptions
    partitions: int = 1
    topic_id: uuid.UUID = field(default_factory=uuid.uuid4)


# Names hold '-' and '.'; one topic per chunk transform combination.
TOPICS: Final = (
    TopicSpec("plain.v1-raw", TieringOptions(chunk_size=3000), partitions=2),
    TopicSpec("zstd-chunks.v2", TieringOptions(chunk_size=2048, compression=True)),
    TopicSpec("sealed.eu-1", TieringOptions(chunk_size=4096, encrypt_with=KEY_ID)),
    TopicSpec(
        "sealed-zstd.v3", TieringOptions(chunk_size=1024, compression=True, encrypt_with=KEY_ID)
    ),
)


@dataclass(frozen=True, slots=True)
class Written:
    """One data record as the producer wrote it and the broker stamped it."""

    offset: int
    timestamp: int  # what a consumer sees: the batch's append time for LogAppendTime
    log_append_time: bool
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    epoch: int
    aborted: bool = False


@dataclass(frozen=True, slots=True)
class Stamp:
    """Every record, control records included, for ListOffsets brute force."""

    batch: int  # the batch's index in the partition
    offset: int
    timestamp: int
    epoch: int
    batch_max_timestamp: int


@dataclass(slots=True)
class WrittenPartition:
    topic: str
    partition: int
    records: list[Written] = field(default_factory=list)
    stamps: list[Stamp] = field(default_factory=list)
    next_offset: int = 0
    segments: int = 0
    open_from: int | None = None  # the first offset of a transaction left open at the end

    def committed(self) -> list[Written]:
        return [r for r in self.records if not r.aborted]

    @property
    def last_stable_offset(self) -> int:
        """Where read_committed stops: the open transaction's first offset, else the end."""
        return self.next_offset if self.open_from is None else self.open_from

    def stable(self) -> list[Written]:
        """What read_committed returns: the committed records before the last stable offset."""
        return [r for r in self.committed() if r.offset < self.last_stable_offset]


@dataclass(frozen=True, slots=True)
class IndependentBucket:
    root: Path  # the bucket folder (a file:// store), or the staging folder for S3
    key_pair_spec: str
    uploads: tuple[SegmentObjects, ...]  # in upload order
    partitions: dict[tuple[str, int], WrittenPartition]

    def serve_args(self, store: str, *extra: str) -> list[str]:
        return ["--store", store, "--key-prefix", KEY_PREFIX, "--key-pair", self.key_pair_spec,
                *extra]  # fmt: skip


def _records(rng: random.Random, ts: int, count: int, max_value: int = 300) -> list[Rec]:
    out = []
    for j in range(count):
        key = None if rng.random() < 0.2 else f"key-{rng.randrange(1000)}".encode()
        value = None if rng.random() < 0.1 else rng.randbytes(rng.randrange(0, max_value))
        headers: list[tuple[str, bytes | None]] = [
            (rng.choice(["trace-id", "ü-origin", "", "h"]), None if rng.random() < 0.3 else
             rng.randbytes(rng.randrange(0, 20)))
            for _ in range(rng.randrange(0, 3))
        ]  # fmt: skip
        # CreateTime is the producer's clock: not monotonic inside a batch.
        out.append(Rec(j, ts + rng.randrange(-40, 400), key, value, headers))
    return out


def _marker(kind: int, pid: int, ts: int) -> bytes:
    """A COMMIT (1) or ABORT (0) marker: a control batch of one record."""
    key = struct.pack(">hh", 0, kind)
    value = struct.pack(">hi", 0, 7)  # version 0, coordinator epoch 7
    raw = build("kafka-python", 0, [Rec(0, ts, key, value, [])], transactional=True,
                producer_id=pid, producer_epoch=0)  # fmt: skip
    return raw


class _PartitionWriter:
    def __init__(
        self, folder: Path, written: WrittenPartition, index_interval_bytes: int = 1024
    ) -> None:
        self.folder = folder
        self.written = written
        self.writer = SegmentWriter(base_offset=0, index_interval_bytes=index_interval_bytes)
        self.epoch = 0
        self.batches = 0

    def append(
        self,
        raw: bytes,
        recs: list[Rec],
        *,
        log_append_time: int | None = None,
        control: bool = False,
    ) -> list[int]:
        base = self.writer.next_offset
        raw = bytearray(raw)
        struct.pack_into(">q", raw, 0, base)
        batch = as_broker(bytes(raw), control=control, log_append_time=log_append_time,
                          leader_epoch=self.epoch)  # fmt: skip
        self.writer.append(batch)
        max_ts = log_append_time if log_append_time is not None else max(r.timestamp for r in recs)
        self.batches += 1
        indexes = []
        for r in recs:
            offset = base + r.offset_delta
            ts = log_append_time if log_append_time is not None else r.timestamp
            self.written.stamps.append(Stamp(self.batches, offset, ts, self.epoch, max_ts))
            if not control:
                self.written.records.append(
                    Written(
                        offset,
                        ts,
                        log_append_time is not None,
                        r.key,
                        r.value,
                        tuple(r.headers),
                        self.epoch,
                    )
                )
                indexes.append(len(self.written.records) - 1)
        return indexes

    def roll(self) -> None:
        self.writer.write(self.folder)
        self.written.segments += 1
        self.writer = self.writer.next_segment()


def _fill(
    folder: Path, written: WrittenPartition, rng: random.Random, shape: Shape = Shape()
) -> None:
    out = _PartitionWriter(folder, written, shape.index_interval_bytes)
    pid = 4000 + written.partition
    sequence = 0
    open_txn: list[int] = []
    ts = BASE_TS
    for i in range(shape.batches):
        if i and i % shape.roll_every == 0:
            out.roll()
        out.epoch = EPOCH_AT.get(i, out.epoch)
        codec = CODECS[i % len(CODECS)]
        builder = BUILDER_NAMES[i % len(BUILDER_NAMES)]
        step = i % 10
        if step in (3, 5):  # a transactional batch of an open transaction
            recs = _records(rng, ts, rng.randrange(1, 5), shape.max_value)
            raw = build(builder, 0, recs, codec=codec, transactional=True, producer_id=pid,
                        producer_epoch=0, base_sequence=sequence)  # fmt: skip
            sequence += len(recs)
            open_txn += out.append(raw, recs)
        elif step == 6:  # the coordinator's marker: abort on even tens, commit on odd
            abort = (i // 10) % 2 == 0
            out.append(_marker(0 if abort else 1, pid, ts), [Rec(0, ts, None, None, [])],
                       control=True)  # fmt: skip
            if abort:
                for k in open_txn:
                    written.records[k] = dataclasses.replace(written.records[k], aborted=True)
            open_txn = []
        else:
            recs = _records(rng, ts, rng.randrange(1, 7), shape.max_value)
            if i == 17:
                recs[0] = dataclasses.replace(recs[0], value=rng.randbytes(shape.big_value))
            append_time = ts + 700 if i % 7 == 2 else None
            out.append(build(builder, 0, recs, codec=codec), recs, log_append_time=append_time)
        ts += 1000
    out.roll()
    written.next_offset = out.writer.next_offset
    if open_txn:  # more batches than the default shape: the log ends inside a transaction
        written.open_from = written.records[open_txn[0]].offset


def _uploads(
    spec: TopicSpec,
    partition: int,
    folder: Path,
    keys: KeyRing,
    ids: random.Random | None = None,
) -> Iterator[SegmentObjects]:
    for index, segment in enumerate(read_segment_dir(folder, include_active=True)):
        for upload in range(2 if index == REUPLOADED_SEGMENT else 1):
            meta = segment_metadata(segment, topic=spec.name, topic_id=spec.topic_id,
                                    partition=partition, broker_id=upload)  # fmt: skip
            meta = dataclasses.replace(
                meta, event_timestamp_ms=meta.max_timestamp_ms + 60_000 * (1 + upload)
            )
            if ids is not None:
                meta = dataclasses.replace(meta, segment_id=uuid.UUID(bytes=ids.randbytes(16)))
            yield build_segment_objects(segment, meta, key_prefix=KEY_PREFIX,
                                        options=spec.options, keys=keys)  # fmt: skip


async def upload_all(store: ObjectStore, bucket: IndependentBucket) -> None:
    for objects in bucket.uploads:
        await upload_segment(store, objects)


def upload_to_moto(bucket: IndependentBucket, endpoint: str, name_prefix: str) -> str:
    """A new bucket on the moto server at ``endpoint`` holding every upload; its name."""
    name = f"{name_prefix}-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=name)

    async def upload() -> None:
        store = await open_store(f"s3://{name}", endpoint_url=endpoint, region="us-east-1")
        try:
            await upload_all(store, bucket)
        finally:
            await store.close()

    asyncio.run(upload())
    return name


@contextlib.contextmanager
def _seeded_secrets(rng: random.Random | None) -> Iterator[None]:
    """Data keys, AADs, IVs and OAEP padding drawn from ``rng`` while the objects are built
    (none: the system's randomness, as the plugin does)."""
    if rng is None:
        yield
        return
    with contextlib.ExitStack() as stack:
        draw = rng.randbytes
        stack.enter_context(
            mock.patch.object(transforms, "secrets", types.SimpleNamespace(token_bytes=draw))
        )
        # The RSA-OAEP padding of a wrapped data key: pycryptodome's default random source.
        oaep = importlib.import_module("Crypto.Cipher.oaep")
        if hasattr(oaep, "Random"):
            fake = types.SimpleNamespace(get_random_bytes=draw)
            stack.enter_context(mock.patch.object(oaep, "Random", fake))
        yield


def write_independent_bucket(
    root: Path,
    *,
    topics: tuple[TopicSpec, ...] = TOPICS,
    shape: Shape = Shape(),
    seed: str | None = None,
) -> IndependentBucket:
    """Broker folders under ``root/segments``, the key pair under ``root/keys``; the objects
    are built but not uploaded (see :func:`upload_all`).

    ``topics`` and ``shape``: a smaller bucket (the corruption campaign). ``seed``: the key
    pair, segment ids, data keys, AADs, IVs and the RSA-OAEP padding of the wrapped data keys
    come from it, so the same seed builds the same bytes (but the mtime in the header of a
    gzip batch, the second it was built at)."""
    key_path = root / "keys" / f"{KEY_ID}.pem"
    key_path.parent.mkdir(parents=True)
    randfunc = None if seed is None else random.Random(f"{seed}/rsa").randbytes
    key_path.write_bytes(RSA.generate(2048, randfunc=randfunc).export_key(format="PEM", pkcs=8))
    key_path.chmod(0o600)  # a private key: serve refuses one that others may read
    keys = KeyRing.from_specs([f"{KEY_ID}={key_path}"])
    ids = None if seed is None else random.Random(f"{seed}/ids")
    partitions: dict[tuple[str, int], WrittenPartition] = {}
    uploads: list[SegmentObjects] = []
    with _seeded_secrets(None if seed is None else random.Random(f"{seed}/secrets")):
        for spec in topics:
            for p in range(spec.partitions):
                folder = root / "segments" / f"{spec.name}-{p}"
                written = WrittenPartition(spec.name, p)
                _fill(folder, written, random.Random(f"{spec.name}/{p}"), shape)
                partitions[(spec.name, p)] = written
                uploads += _uploads(spec, p, folder, keys, ids)

    def event_time(o: SegmentObjects) -> int:
        meta = o.manifest.remote_log_segment_metadata
        return 0 if meta is None else meta.event_timestamp_ms

    uploads.sort(key=event_time)
    return IndependentBucket(root, f"{KEY_ID}={key_path}", tuple(uploads), partitions)
