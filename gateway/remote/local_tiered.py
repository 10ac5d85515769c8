"""Kafka's own ``LocalTieredStorage`` layout, read as the Aiven layout (``--layout
local-tiered-storage``).

``LocalTieredStorage`` (Kafka's test RemoteStorageManager, ``kafka-storage`` test jar) keeps
each uploaded segment as the broker's raw files::

    <dir>/kafka-tiered-storage/<topic>-<partition>-<topicId>/<20-digit offset>-<segmentId>.<ext>

with ``ext`` one of ``log``, ``index``, ``timeindex``, ``snapshot``, ``leader_epoch_checkpoint``
and, when the segment has one, ``txnindex`` (ids in URL-safe base64 without padding; checked
on a real 4.1.1 broker). :class:`LocalTieredStorageView` presents those files as the plugin's
three objects, read-only, so every reader of the gateway serves them unchanged:

* ``.log``: the ``.log`` file itself (plain chunks: no compression, no encryption);
* ``.indexes``: the index files concatenated in the plugin's order (offset, time, producer
  snapshot, leader epoch, transaction);
* ``.rsm-manifest``: written from the files: a fixed chunk index over the ``.log``, the pieces'
  sizes, and segment metadata from the batch headers (end offset, max timestamp) and the
  leader-epoch checkpoint. It exists once the checkpoint does (``LocalTieredStorage`` writes it
  last), as the plugin writes its manifest last: a segment whose copy is in flight has none.

A listing yields the three virtual keys of every complete segment. The broker id is not in the
files (0); the event time is the ``.log`` file's modification time.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Final

from cachetools import LRUCache

from gateway.errors import InvalidKeyError, ObjectNotFoundError, StorageError
from gateway.kafka.batch import iter_batches
from gateway.kafka.epoch import LeaderEpochCache, parse_leader_epoch_checkpoint
from gateway.kafka.uuids import decode_uuid, encode_uuid
from gateway.remote.chunk_index_builder import build_chunk_index
from gateway.remote.keys import ObjectKey, Suffix, parse_object_key
from gateway.remote.manifest import ManifestIndexes, ManifestSegmentMetadata, SegmentManifest
from gateway.remote.manifest_writer import serialize_manifest
from gateway.storage.base import ObjectInfo, ObjectStore

ROOT: Final = "kafka-tiered-storage/"
CHUNK_SIZE: Final = 4 * 1024 * 1024
"""The chunk size of the manifests written for the ``.log`` files (any size reads the same
bytes; this one keeps ranged GETs at the plugin's default)."""
PIECES: Final = ("index", "timeindex", "snapshot", "leader_epoch_checkpoint", "txnindex")
_MANIFESTS: Final = 4096


class LocalTieredStorageView:
    """An :class:`~gateway.storage.base.ObjectStore` over ``inner`` (the folder
    ``LocalTieredStorage`` was given as ``dir``), laid out as the Aiven plugin lays it out."""

    def __init__(self, inner: ObjectStore) -> None:
        self._inner = inner
        self._manifests: LRUCache[str, bytes] = LRUCache(_MANIFESTS)

    # --- keys ------------------------------------------------------------------------------

    @staticmethod
    def _file(key: ObjectKey, ext: str) -> str:
        folder = f"{key.topic}-{key.partition}-{encode_uuid(key.topic_id)}"
        name = f"{key.start_offset:020d}-{encode_uuid(key.segment_id)}.{ext}"
        return f"{ROOT}{folder}/{name}"

    @staticmethod
    def _key_of(path: str) -> ObjectKey | None:
        """The Aiven key of a ``LocalTieredStorage`` ``.log`` path (``None``: not one)."""
        folder, _, name = path.removeprefix(ROOT).rpartition("/")
        stem, dot, ext = name.rpartition(".")
        if not dot or ext != "log" or len(folder) < 26 or folder[-23] != "-":
            return None
        topic, dash, partition = folder[:-23].rpartition("-")
        offset, dash2, segment = stem.partition("-")
        if not (dash and dash2 and partition.isdigit() and offset.isdigit()):
            return None
        try:
            topic_id, segment_id = decode_uuid(folder[-22:]), decode_uuid(segment)
        except InvalidKeyError:
            return None
        return ObjectKey("", topic, topic_id, int(partition), int(offset), segment_id, Suffix.LOG)

    @staticmethod
    def _parse(key: str) -> ObjectKey:
        try:
            return parse_object_key(key, "")
        except InvalidKeyError as exc:
            raise ObjectNotFoundError(f"object {key!r} not found: {exc}") from exc

    # --- reads -----------------------------------------------------------------------------

    async def _pieces(self, key: ObjectKey) -> list[bytes]:
        """The index files, in the plugin's order (a missing ``.txnindex``: empty)."""

        async def one(ext: str) -> bytes:
            try:
                return await self._inner.get(self._file(key, ext))
            except ObjectNotFoundError:
                if ext == "txnindex":
                    return b""
                raise

        return list(await asyncio.gather(*(one(ext) for ext in PIECES)))

    async def _manifest(self, key: ObjectKey) -> bytes:
        cached = self._manifests.get(key.key)
        if cached is not None:
            return cached
        pieces = await self._pieces(key)  # the checkpoint first: no manifest while in flight
        log = await self._inner.get(self._file(key, "log"))
        info = await self._inner.head(self._file(key, "log"))
        data = await asyncio.to_thread(_manifest_bytes, key, log, pieces, info.last_modified)
        self._manifests[key.key] = data
        return data

    async def get(self, key: str) -> bytes:
        parsed = self._parse(key)
        if parsed.suffix is Suffix.LOG:
            return await self._inner.get(self._file(parsed, "log"))
        if parsed.suffix is Suffix.INDEXES:
            return b"".join(await self._pieces(parsed))
        return await self._manifest(parsed)

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        parsed = self._parse(key)
        if parsed.suffix is Suffix.LOG:
            return await self._inner.get_range(self._file(parsed, "log"), start, end)
        return (await self.get(key))[start:end]

    async def head(self, key: str) -> ObjectInfo:
        parsed = self._parse(key)
        info = await self._inner.head(self._file(parsed, "log"))
        if parsed.suffix is Suffix.LOG:
            return ObjectInfo(key, info.size, info.last_modified)
        return ObjectInfo(key, len(await self.get(key)), info.last_modified)

    async def list(self, prefix: str) -> AsyncIterator[ObjectInfo]:
        """The virtual keys starting with ``prefix`` of every complete segment, in key order."""
        files = [info async for info in self._inner.list(ROOT)]
        marker = "leader_epoch_checkpoint"  # written last by LocalTieredStorage
        complete = {f.key[: -len(marker)] for f in files if f.key.endswith("." + marker)}
        found: list[ObjectInfo] = []
        for f in files:
            key = self._key_of(f.key)
            if key is None or f.key[: -len("log")] not in complete:
                continue
            for suffix in Suffix:
                virtual = key.with_suffix(suffix).key
                if virtual.startswith(prefix):
                    found.append(ObjectInfo(virtual, f.size, f.last_modified))
        for info in sorted(found, key=lambda i: i.key):
            yield info

    # --- a read-only view --------------------------------------------------------------------

    async def put(self, key: str, data: bytes) -> None:
        raise StorageError(f"the local-tiered-storage layout is read-only: cannot write {key!r}")

    async def delete(self, key: str) -> None:
        raise StorageError(f"the local-tiered-storage layout is read-only: cannot delete {key!r}")

    async def close(self) -> None:
        await self._inner.close()


def _manifest_bytes(key: ObjectKey, log: bytes, pieces: list[bytes], modified: float) -> bytes:
    """The manifest of a segment's files (CPU: the batch headers are walked)."""
    last_offset, max_ts = key.start_offset - 1, -1
    for batch in iter_batches(log):
        last_offset = batch.last_offset
        max_ts = max(max_ts, batch.max_timestamp)
    cache = LeaderEpochCache(parse_leader_epoch_checkpoint(pieces[3]))
    epochs = cache.epoch_entries_in_range(key.start_offset, last_offset + 1)
    whole, rest = divmod(len(log), CHUNK_SIZE)
    sizes = [CHUNK_SIZE] * whole + ([rest] if rest else [])
    offset, timestamp, snapshot, epoch, txn = (len(p) for p in pieces)
    manifest = SegmentManifest(
        chunk_index=build_chunk_index(CHUNK_SIZE, sizes, sizes, compression=False),
        segment_indexes=ManifestIndexes.from_sizes(
            offset, timestamp, snapshot, epoch, txn if txn else None
        ),
        compression=False,
        encryption=None,
        remote_log_segment_metadata=ManifestSegmentMetadata(
            topic_id=key.topic_id,
            topic=key.topic,
            partition=key.partition,
            segment_id=key.segment_id,
            start_offset=key.start_offset,
            end_offset=last_offset,
            max_timestamp_ms=max_ts,
            broker_id=0,
            event_timestamp_ms=int(modified * 1000),
            segment_leader_epochs=tuple((e.epoch, e.start_offset) for e in epochs),
            txn_idx_empty=not txn,
        ),
    )
    return serialize_manifest(manifest)


__all__ = ["ROOT", "LocalTieredStorageView"]
