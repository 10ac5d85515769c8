"""From RLMM segment metadata to readable remote segments: keys, manifests, indexes, bytes.

* the object key of a segment comes from its metadata and the key prefix (the Aiven layout);
* manifests are parsed once and the data key unwrapped once per segment (an RSA operation, in a
  worker thread), kept in an LRU bounded by count with a TTL, single-flight on misses;
* the offset, time and transaction indexes and the leader-epoch checkpoint come through
  :class:`indexcache.RemoteIndexCache`, whose loader reads the ``.indexes`` object;
* segment bytes come through the decoded-chunk cache;
* the open-transaction point of a segment's producer snapshot (for the remote last stable
  offset) is read once per segment and kept in an LRU (a snapshot never changes).

A corrupt or missing object raises the typed error naming the object key.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass

from cachetools import LRUCache

from gateway.cache.chunks import ChunkCache
from gateway.cache.verified import VerifiedRuns
from gateway.deadline import Deadline, wait_within
from gateway.errors import CorruptDataError, add_context
from gateway.flights import Flights
from gateway.kafka.producer_snapshot import open_transaction_first
from gateway.kafka.uuids import encode_uuid
from gateway.metadata.model import RemoteLogSegmentMetadata
from gateway.remote.keyring import KeyRing
from gateway.remote.keys import ObjectKey, Suffix, segment_key
from gateway.remote.manifest import IndexType, parse_manifest
from gateway.remote.reader import RemoteSegment, SegmentReader
from indexcache import RemoteIndexCache, SegmentIndexBytes, SegmentIndexes, SegmentKey

log = logging.getLogger(__name__)

INDEX_LOAD_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class _Opened:
    segment: RemoteSegment
    expires: float


class SegmentSource:
    """Opens segments, and reads their indexes and bytes, through the caches."""

    def __init__(
        self,
        reader: SegmentReader,
        keys: KeyRing,
        *,
        key_prefix: str,
        executor: Executor,
        chunk_cache: ChunkCache,
        index_cache_bytes: int,
        index_cache_dir: str | None = None,
        manifest_cache_entries: int = 10_000,
        manifest_ttl_s: float = 3600.0,
        runs: VerifiedRuns | None = None,
    ) -> None:
        self._reader = reader
        self._keys = keys
        self._prefix = key_prefix
        self._executor = executor
        self.chunks = chunk_cache
        # Verified batches (framed and CRC-checked once): what warm answers are sliced from.
        self.runs = runs if runs is not None else VerifiedRuns()
        self._opened: LRUCache[uuid.UUID, _Opened] = LRUCache(maxsize=manifest_cache_entries)
        self._opening: Flights[uuid.UUID, RemoteSegment] = Flights()
        self._ttl = manifest_ttl_s
        self._metas: LRUCache[SegmentKey, RemoteLogSegmentMetadata] = LRUCache(maxsize=100_000)
        self._open_txns: LRUCache[uuid.UUID, int | None] = LRUCache(maxsize=manifest_cache_entries)
        self._reading_txns: Flights[uuid.UUID, int | None] = Flights()
        self.indexes_cache = RemoteIndexCache(
            self._load_indexes,
            max_bytes=index_cache_bytes,
            cache_dir=index_cache_dir,
            executor=executor,
        )
        self.manifest_hits = self.manifest_misses = 0
        self._prefetching: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        await self.indexes_cache.start()

    async def aclose(self) -> None:
        for task in list(self._prefetching):
            task.cancel()
        await asyncio.gather(*self._prefetching, return_exceptions=True)
        await self.indexes_cache.aclose()
        await self.chunks.aclose()

    def object_key(self, meta: RemoteLogSegmentMetadata) -> ObjectKey:
        return segment_key(self._prefix, meta)

    async def open(self, meta: RemoteLogSegmentMetadata, deadline: Deadline) -> RemoteSegment:
        """The segment's manifest and transform (cached; single-flight)."""
        sid = meta.segment_id.id
        cached = self._opened.get(sid)
        if cached is not None and cached.expires > time.monotonic():
            self.manifest_hits += 1
            return cached.segment
        self.manifest_misses += 1
        shared = Deadline.after(max(deadline.remaining(), INDEX_LOAD_TIMEOUT))
        task = self._opening.join(sid, lambda: self._open(meta, shared))
        return await wait_within(task, deadline, f"manifest of {self.object_key(meta).key}")

    async def _open(self, meta: RemoteLogSegmentMetadata, deadline: Deadline) -> RemoteSegment:
        key = self.object_key(meta).with_suffix(Suffix.MANIFEST)
        data = await self._reader.get_object(key.key, deadline)
        loop = asyncio.get_running_loop()

        def build() -> RemoteSegment:
            manifest = parse_manifest(data, key.key)
            return RemoteSegment.open(key, manifest, self._keys)  # RSA unwrap: CPU

        segment = await loop.run_in_executor(self._executor, build)
        self._opened[meta.segment_id.id] = _Opened(segment, time.monotonic() + self._ttl)
        return segment

    @staticmethod
    def index_key(meta: RemoteLogSegmentMetadata) -> SegmentKey:
        return SegmentKey(encode_uuid(meta.segment_id.id), meta.start_offset)

    async def indexes(self, meta: RemoteLogSegmentMetadata, deadline: Deadline) -> SegmentIndexes:
        key = self.index_key(meta)
        self._metas[key] = meta
        what = f"indexes of {self.object_key(meta).key}"
        return await wait_within(self.indexes_cache.get(key), deadline, what)

    async def _load_indexes(self, key: SegmentKey) -> SegmentIndexBytes:
        meta = self._metas[key]
        deadline = Deadline.after(INDEX_LOAD_TIMEOUT)
        segment = await self.open(meta, deadline)
        pieces = await self._reader.read_indexes(segment, deadline)
        return SegmentIndexBytes(
            base_offset=meta.start_offset,
            offset=pieces[IndexType.OFFSET] or b"",
            time=pieces[IndexType.TIMESTAMP] or b"",
            leader_epoch=pieces[IndexType.LEADER_EPOCH] or b"",
            txn=pieces[IndexType.TRANSACTION],
        )

    async def open_transaction(
        self, meta: RemoteLogSegmentMetadata, deadline: Deadline
    ) -> int | None:
        """The first offset of the oldest transaction open after segment ``meta``, from its
        producer snapshot (None: none open, or no snapshot uploaded); read once per segment
        (single-flight, a failure is not kept). A snapshot that fails its checks is a
        ``CorruptCheckpointError`` naming the ``.indexes`` object."""
        sid = meta.segment_id.id
        if sid in self._open_txns:
            return self._open_txns[sid]
        shared = Deadline.after(max(deadline.remaining(), INDEX_LOAD_TIMEOUT))
        task = self._reading_txns.join(sid, lambda: self._open_transaction(meta, shared))
        what = f"producer snapshot of {self.object_key(meta).key}"
        return await wait_within(task, deadline, what)

    async def _open_transaction(
        self, meta: RemoteLogSegmentMetadata, deadline: Deadline
    ) -> int | None:
        segment = await self.open(meta, deadline)
        loop = asyncio.get_running_loop()
        try:  # a GCM tag, the CRC and the parse (off the loop: 46 bytes per producer)
            data = await self._reader.read_index_piece(
                segment, IndexType.PRODUCER_SNAPSHOT, deadline
            )
            first = await loop.run_in_executor(
                self._executor, open_transaction_first, data or b"", meta.end_offset
            )
        except CorruptDataError as exc:
            raise add_context(exc, segment.key.with_suffix(Suffix.INDEXES).key) from exc
        self._open_txns[meta.segment_id.id] = first
        return first

    def prefetch(
        self,
        meta: RemoteLogSegmentMetadata | Callable[[], Awaitable[RemoteLogSegmentMetadata | None]],
        size: int,
    ) -> None:
        """Open the segment and load its first ``size`` bytes in the background (read-ahead
        across a segment border: call it with the next segment, or with how to find it, when a
        sequential read nears the end of one). A failure is only logged: the read that follows
        will see it."""
        if size <= 0:
            return

        async def run() -> None:
            try:
                found = meta if isinstance(meta, RemoteLogSegmentMetadata) else await meta()
                if found is None or self.runs.holds(found.segment_id.id, found.start_offset):
                    return  # no next segment, or its head is verified already (or shared)
                segment = await self.open(found, Deadline.after(INDEX_LOAD_TIMEOUT))
            except Exception as exc:  # a guess: its failure only costs a miss later
                log.debug("prefetch of a segment's head failed: %s", exc)
                return
            self.chunks.prefetch(segment, found.segment_id.id, 0, size)

        task = asyncio.ensure_future(run())
        self._prefetching.add(task)
        task.add_done_callback(self._prefetching.discard)

    async def settle(self) -> None:
        """Wait until the prefetches started are done (the loads they start included)."""
        await asyncio.gather(*self._prefetching, return_exceptions=True)
        await self.chunks.settle()

    async def read(
        self,
        meta: RemoteLogSegmentMetadata,
        start: int,
        end: int,
        deadline: Deadline,
        *,
        keep: bool = True,
    ) -> tuple[bytes | memoryview, int]:
        """Original bytes ``[start, end)`` of the segment (clamped) and the segment's size
        (``keep``: as :meth:`ChunkCache.read`)."""
        segment = await self.open(meta, deadline)
        data = await self.chunks.read(segment, meta.segment_id.id, start, end, deadline, keep=keep)
        return data, segment.size
