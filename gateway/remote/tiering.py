"""The tiering writer: upload a broker's segment files as Aiven's plugin would.

Mirrors ``KafkaRemoteStorageManager.copyLogSegmentData``: the ``.log`` cut into ``chunk_size``
chunks, each optionally zstd-compressed (one frame with its content size) then AES-256-GCM
encrypted; the ``.indexes`` object (offset, time, producer snapshot, leader epoch, transaction;
each piece encrypted on its own); the ``.rsm-manifest``; uploaded in that order, manifest last,
so a reader that finds a manifest finds its objects. The compression heuristic looks at the
first batch only (``SegmentCompressionChecker``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from gateway.errors import (
    ConfigurationError,
    CorruptDataError,
    GatewayError,
    InvalidKeyError,
    ObjectNotFoundError,
)
from gateway.kafka.batch import iter_batches
from gateway.kafka.codecs import Codec
from gateway.kafka.epoch import (
    LeaderEpochCache,
    format_leader_epoch_checkpoint,
    parse_leader_epoch_checkpoint,
)
from gateway.remote.chunk_index_builder import build_chunk_index
from gateway.remote.keyring import KeyRing
from gateway.remote.keys import ObjectKey, Suffix, parse_object_key
from gateway.remote.manifest import (
    EncryptionMetadata,
    ManifestIndexes,
    ManifestSegmentMetadata,
    SegmentManifest,
    parse_manifest,
)
from gateway.remote.manifest_writer import serialize_manifest
from gateway.remote.transforms import (
    ChunkTransform,
    generate_data_key_and_aad,
    transform_chunk,
    transform_index_piece,
)
from gateway.storage.base import ObjectStore

DEFAULT_CHUNK_SIZE: Final = 4 * 1024 * 1024  # the plugin's recommended chunk.size


@dataclass(frozen=True, slots=True)
class TieringOptions:
    chunk_size: int = DEFAULT_CHUNK_SIZE
    compression: bool = False
    compression_heuristic: bool = False
    encrypt_with: str | None = None  # key pair id

    def __post_init__(self) -> None:
        if self.chunk_size <= 0:
            raise ConfigurationError(f"chunk size must be positive, got {self.chunk_size}")
        if self.compression_heuristic and not self.compression:
            raise ConfigurationError("the compression heuristic requires compression")


@dataclass(frozen=True, slots=True)
class LocalSegment:
    """The files of one rolled segment, as Kafka hands them to the RSM."""

    base_offset: int
    log: bytes
    offset_index: bytes
    time_index: bytes
    producer_snapshot: bytes
    leader_epoch_checkpoint: bytes
    txn_index: bytes | None


@dataclass(frozen=True, slots=True)
class SegmentObjects:
    key: ObjectKey  # the .log key; other suffixes via with_suffix
    log: bytes
    indexes: bytes
    manifest: SegmentManifest

    def manifest_bytes(self) -> bytes:
        return serialize_manifest(self.manifest)


def requires_compression(log: bytes, options: TieringOptions) -> bool:
    """§6: compress unless the heuristic finds the first batch already compressed."""
    if not options.compression:
        return False
    if not options.compression_heuristic:
        return True
    try:
        first = next(iter_batches(log))
        first.ensure_valid()
        return first.codec is Codec.NONE
    except (StopIteration, GatewayError):
        return False  # the plugin logs a warning and uploads uncompressed


def read_segment_dir(directory: Path, *, include_active: bool = False) -> Iterator[LocalSegment]:
    """The rolled segments of a broker's partition folder, oldest first.

    The newest ``.log`` is the active segment, which Kafka never tiers: it is skipped unless
    ``include_active`` (a folder from a stopped broker, or the demo, where the caller knows no
    more data will be appended to it)."""
    logs = sorted(directory.glob("[0-9]" * 20 + ".log"))
    checkpoint_path = directory / "leader-epoch-checkpoint"
    checkpoint = checkpoint_path.read_bytes() if checkpoint_path.exists() else b"0\n0\n"
    epochs = parse_leader_epoch_checkpoint(checkpoint)
    bases = [int(p.stem) for p in logs]
    for i, path in enumerate(logs):
        base = bases[i]
        if i + 1 < len(bases):
            next_base = bases[i + 1]
        elif include_active:
            next_base = max((b.next_offset for b in iter_batches(path.read_bytes())), default=base)
        else:
            return
        snapshot = directory / f"{next_base:020d}.snapshot"
        txn = path.with_suffix(".txnindex")
        # The in-memory checkpoint Kafka uploads: every entry starting before the next segment.
        lineage = [e for e in epochs if e.start_offset < next_base]
        yield LocalSegment(
            base_offset=base,
            log=path.read_bytes(),
            offset_index=path.with_suffix(".index").read_bytes(),
            time_index=path.with_suffix(".timeindex").read_bytes(),
            producer_snapshot=snapshot.read_bytes() if snapshot.exists() else b"",
            leader_epoch_checkpoint=format_leader_epoch_checkpoint(lineage),
            txn_index=txn.read_bytes() if txn.exists() else None,
        )


def segment_metadata(
    segment: LocalSegment, *, topic: str, topic_id: uuid.UUID, partition: int, broker_id: int = 0
) -> ManifestSegmentMetadata:
    """``remoteLogSegmentMetadata`` for a segment: offsets and max timestamp from its batch
    headers, leader epochs from its checkpoint (``epochEntriesInRange(start, end + 1)``)."""
    last_offset, max_ts = segment.base_offset - 1, -1
    for batch in iter_batches(segment.log):
        last_offset = batch.last_offset
        max_ts = max(max_ts, batch.max_timestamp)
    cache = LeaderEpochCache(parse_leader_epoch_checkpoint(segment.leader_epoch_checkpoint))
    epochs = cache.epoch_entries_in_range(segment.base_offset, last_offset + 1)
    return ManifestSegmentMetadata(
        topic_id=topic_id,
        topic=topic,
        partition=partition,
        segment_id=uuid.uuid4(),
        start_offset=segment.base_offset,
        end_offset=last_offset,
        max_timestamp_ms=max_ts,
        broker_id=broker_id,
        event_timestamp_ms=int(time.time() * 1000),
        segment_leader_epochs=tuple((e.epoch, e.start_offset) for e in epochs),
    )


def build_segment_objects(
    segment: LocalSegment,
    metadata: ManifestSegmentMetadata,
    *,
    key_prefix: str,
    options: TieringOptions,
    keys: KeyRing,
) -> SegmentObjects:
    """The three objects of a segment, in memory (pure: no I/O)."""
    compression = requires_compression(segment.log, options)
    encryption_meta = None
    data_keys = None
    if options.encrypt_with is not None:
        data_keys = generate_data_key_and_aad()
        wrapped = keys.wrap(options.encrypt_with, data_keys.data_key)
        encryption_meta = EncryptionMetadata(options.encrypt_with, wrapped, data_keys.aad)
    transform = ChunkTransform(compression=compression, encryption=data_keys)

    log = segment.log
    size = options.chunk_size
    originals = [log[i : i + size] for i in range(0, len(log), size)]
    stored = [transform_chunk(c, transform) for c in originals]
    chunk_index = build_chunk_index(
        size, [len(c) for c in originals], [len(c) for c in stored], compression=compression
    )
    pieces = [
        transform_index_piece(p, transform)
        for p in (
            segment.offset_index,
            segment.time_index,
            segment.producer_snapshot,
            segment.leader_epoch_checkpoint,
        )
    ]
    txn = None if segment.txn_index is None else transform_index_piece(segment.txn_index, transform)
    offset, timestamp, snapshot, epochs = (len(p) for p in pieces)
    indexes = ManifestIndexes.from_sizes(
        offset, timestamp, snapshot, epochs, None if txn is None else len(txn)
    )
    manifest = SegmentManifest(
        chunk_index=chunk_index,
        segment_indexes=indexes,
        compression=compression,
        encryption=encryption_meta,
        remote_log_segment_metadata=metadata,
    )
    return SegmentObjects(
        key=metadata.object_key(key_prefix, Suffix.LOG),
        log=log if transform.is_identity else b"".join(stored),
        indexes=b"".join(pieces) + (txn or b""),
        manifest=manifest,
    )


async def upload_segment(store: ObjectStore, objects: SegmentObjects) -> None:
    """The plugin's order: ``.log``, ``.indexes``, then the manifest."""
    await store.put(objects.key.key, objects.log)
    await store.put(objects.key.with_suffix(Suffix.INDEXES).key, objects.indexes)
    await store.put(objects.key.with_suffix(Suffix.MANIFEST).key, objects.manifest_bytes())


def partition_prefix(key: ObjectKey) -> str:
    """The key prefix every object of ``key``'s partition starts with (``.../<partition>/``)."""
    text = key.key
    return text[: text.rindex("/") + 1]


@dataclass(frozen=True, slots=True)
class UploadedSegment:
    """A segment the store already holds: what a re-run compares a local segment against."""

    key: ObjectKey  # its .log key
    start_offset: int
    end_offset: int
    size: int  # of the original .log


async def uploaded_segments(
    store: ObjectStore, key: ObjectKey, start_offsets: Iterable[int]
) -> dict[tuple[int, int, int], UploadedSegment]:
    """The segments of ``key``'s partition (same prefix, topic, topic id and partition) already
    in the store whose start offset is one of ``start_offsets``, by (start, end, size).

    Their manifests are read and their ``.log`` and ``.indexes`` objects checked (present, of
    the sizes the manifest gives). A manifest without segment metadata, one that does not
    parse, or one whose objects are missing matches nothing: such a segment is uploaded again
    rather than wrongly skipped."""
    wanted = set(start_offsets)
    prefix = partition_prefix(key)
    found: dict[tuple[int, int, int], UploadedSegment] = {}
    async for info in store.list(prefix):
        if not info.key.endswith("." + Suffix.MANIFEST.value):
            continue
        try:
            parsed = parse_object_key(info.key, prefix=key.prefix)
        except InvalidKeyError:
            continue  # not a segment key: not ours to judge
        if parsed.start_offset not in wanted or parsed.topic_id != key.topic_id:
            continue
        data = await store.get(info.key)  # a store fault stops the run: never guess
        try:
            manifest = parse_manifest(data, info.key)
        except (CorruptDataError, ValueError):
            continue
        meta = manifest.remote_log_segment_metadata
        if meta is None:
            continue
        log_key = parsed.with_suffix(Suffix.LOG)
        if not await _objects_present(store, log_key, manifest):
            continue  # a manifest left without its objects: upload the segment again
        size = manifest.chunk_index.original_file_size
        entry = UploadedSegment(log_key, meta.start_offset, meta.end_offset, size)
        found[(entry.start_offset, entry.end_offset, entry.size)] = entry
    return found


async def _objects_present(
    store: ObjectStore, log_key: ObjectKey, manifest: SegmentManifest
) -> bool:
    """The ``.log`` and ``.indexes`` objects are there, of the sizes the manifest gives."""
    expected = (
        (log_key, manifest.chunk_index.transformed_file_size),
        (log_key.with_suffix(Suffix.INDEXES), manifest.segment_indexes.total_size),
    )
    for key, size in expected:
        try:
            info = await store.head(key.key)
        except ObjectNotFoundError:
            return False
        if info.size != size:
            return False
    return True
