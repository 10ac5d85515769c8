"""Decoded chunks of remote segments: a byte-bounded LRU, single-flight GETs, read-ahead.

A fetch reads original segment bytes ``[start, end)``. For a transformed segment (compressed or
encrypted) they come from whole decoded chunks (decrypted, decompressed), the unit the bucket
stores. An untransformed segment's ``.log`` object *is* the segment, so it is read in *blocks*
of ``block_bytes`` (64 KiB by default) aligned on the segment: a cold read fetches the range it
needs rounded to the block size, not whole chunks. The unit (chunk or block) is what this cache
keeps:

* bounded by bytes held (cachetools ``LRUCache`` weighted by chunk size); an evicted chunk
  stays valid for readers that hold it (chunks are immutable ``bytes``);
* single-flight: concurrent misses on a chunk share one load, and the missing chunks of one
  read are loaded together, so adjacent ones coalesce into one ranged GET (``SegmentReader``);
  a load runs as its own task, so a caller that gives up does not fail the others; a failed
  load is not cached;
* read-ahead: when reads of a segment move forward unit after unit, the next units, up to
  ``readahead_bytes``, are loaded in the background (a failure is only logged, at debug);
  :meth:`ChunkCache.prefetch` does the same for any range (the head of the next segment).
  The read-ahead adapts: a unit read ahead that memory evicted before a reader came for it
  (more streams ahead of each other than the budget holds) halves it, down to none; each unit
  read ahead that a reader used grows it back by the unit, up to ``readahead_bytes``; with
  none, every :data:`PROBE_EVERY`-th forward read tries one unit again. Measured (issue 30,
  ``bench_broker``, 8 partitions read at once by one worker of 32 MiB): a fixed read-ahead
  evicted before use fetched 6.8 GB from the store for 1 GB of history;
* an optional disk tier (:class:`~gateway.cache.chunk_disk.ChunkDiskTier`) below memory: a
  load asks it first, and writes what it fetched from the bucket to it in the background.

Keys are (segment uuid, chunk id) for chunks and (segment uuid, ``~offset``) for blocks (a
negative id: the two never meet, on disk either, and a block's key does not depend on the block
size). A segment's objects are never rewritten, so nothing here can go stale.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Coroutine, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from cachetools import LRUCache

from gateway.cache.chunk_disk import ChunkDiskTier, ChunkKey
from gateway.cache.verified import RUN_KEY_LEN
from gateway.deadline import Deadline, wait_within
from gateway.lru import ByteLRU
from gateway.remote.chunk_index import Chunk
from gateway.remote.reader import RemoteSegment, SegmentReader

log = logging.getLogger(__name__)


READAHEAD_TIMEOUT = 30.0
SHARED_LOAD_TIMEOUT = 30.0  # a load many readers may join runs on its own deadline
MAX_PENDING_DISK_WRITES = 64 << 20  # chunk bytes queued for the disk tier, at most
DEFAULT_BLOCK_BYTES = 64 << 10  # the read unit of untransformed segments
PROBE_EVERY = 16  # with the read-ahead down to none, forward reads between two tries
AHEAD_TRACKED = 8192  # units read ahead and not used yet that are remembered


@dataclass(frozen=True, slots=True)
class ChunkCacheStats:
    hits: int
    misses: int
    loads: int
    load_failures: int
    evictions: int
    readahead_chunks: int
    readahead_wasted: int
    entries: int
    bytes_held: int
    max_bytes: int


class ChunkCache:
    """Decoded chunks in front of a :class:`SegmentReader`."""

    def __init__(
        self,
        reader: SegmentReader,
        *,
        max_bytes: int,
        readahead_bytes: int = 8 << 20,
        block_bytes: int = DEFAULT_BLOCK_BYTES,
        disk: ChunkDiskTier | None = None,
        executor: Executor | None = None,
        memory: ByteLRU[Any, Any] | None = None,
    ) -> None:
        """``memory``: the LRU the units are kept in when it is shared (with the verified
        runs: :class:`~gateway.cache.verified.CacheMemory`); else one of ``max_bytes``."""
        if block_bytes <= 0:
            raise ValueError("block_bytes must be positive")
        self._reader = reader
        self._block_bytes = block_bytes
        self.disk = disk
        self._executor = executor
        self._lru: ByteLRU[Any, Any] = (
            memory if memory is not None else ByteLRU(max(max_bytes, 1), len)
        )
        self._max_bytes = max_bytes
        self._readahead_bytes = readahead_bytes
        self._inflight: dict[ChunkKey, asyncio.Future[bytes]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        # Per segment, the original byte span of the units the last read covered.
        self._last_read: LRUCache[uuid.UUID, tuple[int, int]] = LRUCache(maxsize=4096)
        self._hits = self._misses = self._loads = self._failures = self._readahead = 0
        self._disk_pending = 0
        # The units read ahead not used yet; the read-ahead now (adapted, see the docstring).
        self._ahead: LRUCache[ChunkKey, None] = LRUCache(maxsize=AHEAD_TRACKED)
        self._ahead_bytes = readahead_bytes
        self._wasted = self._forward = 0

    def stats(self) -> ChunkCacheStats:
        return ChunkCacheStats(
            self._hits,
            self._misses,
            self._loads,
            self._failures,
            self._lru.evictions,
            self._readahead,
            self._wasted,
            len(self._lru),
            int(self._lru.currsize),
            self._max_bytes,
        )

    async def settle(self) -> None:
        """Wait until no background work (read-ahead, disk writes) is left, including work
        that the awaited work started."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # A load cancelled before it started never resolved its futures: fail them now.
        for future in self._inflight.values():
            if not future.done():
                future.set_exception(asyncio.CancelledError("chunk cache closed"))
                future.exception()
        self._inflight.clear()

    async def read(
        self,
        segment: RemoteSegment,
        segment_id: uuid.UUID,
        start: int,
        end: int,
        deadline: Deadline,
        *,
        keep: bool = True,
    ) -> bytes | memoryview:
        """Original bytes ``[start, end)`` of the segment, clamped to its size: a view of the
        unit that holds them, else the units' pieces joined once (one buffer frames as one run
        and sends as one piece: measured faster than framing the units apart). ``keep=False``:
        the caller keeps what it read (verified runs): the units wholly inside the range are
        dropped, leaving their room to read-ahead."""
        end = min(end, segment.size)
        if start < 0 or start >= end:
            return b""
        chunks = self._units(segment, start, end)
        pieces = [memoryview(p) for p in await self._chunks(segment, segment_id, chunks, deadline)]
        self._maybe_read_ahead(segment, segment_id, chunks)
        if not keep:
            for chunk in chunks:
                if start <= chunk.original_position and chunk.original_end <= end:
                    self._lru.pop((segment_id, chunk.id), None)
        lo = start - chunks[0].original_position
        if len(pieces) == 1:
            return pieces[0][lo : lo + end - start]
        pieces[-1] = pieces[-1][: end - chunks[-1].original_position]
        pieces[0] = pieces[0][lo:]
        return b"".join(pieces)

    def _units(self, segment: RemoteSegment, start: int, end: int) -> list[Chunk]:
        """The units covering ``[start, end)`` (clamped): chunks of a transformed segment, blocks
        of an untransformed one (as :class:`Chunk` values whose id is ``~offset``)."""
        if not segment.transform.is_identity:
            return segment.manifest.chunk_index.chunks_for_range(start, end)
        size, step = segment.size, self._block_bytes
        end = min(end, size)
        first = start - start % step
        return [_block(lo, min(lo + step, size)) for lo in range(first, end, step)]

    async def _chunks(
        self,
        segment: RemoteSegment,
        segment_id: uuid.UUID,
        chunks: Sequence[Chunk],
        deadline: Deadline,
    ) -> list[bytes]:
        waits = self._claim(segment, segment_id, chunks, deadline)
        pending = [item for item in waits if not isinstance(item, bytes)]
        if pending:  # one wait for all (a wait per 64 KiB block costs more than its copy)
            await wait_within(asyncio.gather(*pending), deadline, f"chunks of {segment.key.key}")
        return [item if isinstance(item, bytes) else item.result() for item in waits]

    def _claim(
        self,
        segment: RemoteSegment,
        segment_id: uuid.UUID,
        chunks: Sequence[Chunk],
        deadline: Deadline,
        *,
        count: bool = True,
    ) -> list[asyncio.Future[bytes] | bytes]:
        """Each unit held, or the future of its load: joined if one runs, else started (the
        missing units together, so adjacent ones share a GET)."""
        waits: list[asyncio.Future[bytes] | bytes] = []
        missing: list[Chunk] = []
        loop = asyncio.get_running_loop()
        for chunk in chunks:
            key = (segment_id, chunk.id)
            cached = self._lru.get(key)
            if count and key in self._ahead:
                held = cached is not None or key in self._inflight
                self._read_ahead_used(key, held, chunk.original_size)
            if cached is not None:
                self._hits += count
                waits.append(cached)
                continue
            self._misses += count
            future = self._inflight.get(key)
            if future is None:
                future = loop.create_future()
                self._inflight[key] = future
                missing.append(chunk)
            waits.append(future)
        if missing:
            shared = Deadline.after(max(deadline.remaining(), SHARED_LOAD_TIMEOUT))
            self._spawn(self._load(segment, segment_id, missing, shared))
        return waits

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _load(
        self,
        segment: RemoteSegment,
        segment_id: uuid.UUID,
        chunks: list[Chunk],
        deadline: Deadline,
    ) -> None:
        keys = [(segment_id, c.id) for c in chunks]
        self._loads += 1
        generation = self.disk.generation(segment_id) if self.disk is not None else 0
        try:
            found = await self._from_disk(keys)
            for chunk, key in zip(chunks, keys, strict=True):
                if key in found and len(found[key]) != chunk.original_size:
                    del found[key]  # written under another block size: fetch it again
            remote = [c for c, key in zip(chunks, keys, strict=True) if key not in found]
            fetched = await self._reader.read_chunks(segment, remote, deadline) if remote else []
        except BaseException as exc:
            self._failures += 1
            log.debug("loading %d units of %s failed: %r", len(chunks), segment.key.key, exc)
            for key in keys:
                future = self._inflight.pop(key, None)
                if future is not None and not future.done():
                    future.set_exception(exc)
                    future.exception()  # retrieved here: a waiter may have given up
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        pieces = dict(found)
        pieces.update(zip([(segment_id, c.id) for c in remote], fetched, strict=True))
        for key in keys:
            piece = pieces[key]
            if len(piece) <= self._max_bytes:
                self._lru[key] = piece
            future = self._inflight.pop(key, None)
            if future is not None and not future.done():
                future.set_result(piece)
        if self.disk is not None and remote:
            written = [((segment_id, c.id), p) for c, p in zip(remote, fetched, strict=True)]
            size = sum(len(p) for _, p in written)
            if self._disk_pending + size <= MAX_PENDING_DISK_WRITES:  # a slow disk sheds writes
                self._disk_pending += size
                self._spawn(self._to_disk(written, generation, size))

    async def _from_disk(self, keys: list[ChunkKey]) -> dict[ChunkKey, bytes]:
        disk = self.disk
        if disk is None:
            return {}

        def read() -> dict[ChunkKey, bytes]:
            found = {}
            for key in keys:
                chunk = disk.read(key)
                if chunk is not None:
                    found[key] = chunk
            return found

        return await asyncio.get_running_loop().run_in_executor(self._executor, read)

    async def _to_disk(
        self, written: list[tuple[ChunkKey, bytes]], generation: int, size: int
    ) -> None:
        disk = self.disk
        assert disk is not None

        def write() -> None:
            for key, chunk in written:
                disk.write(key, chunk, generation)

        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, write)
        finally:
            self._disk_pending -= size

    async def invalidate(self, segment_id: uuid.UUID) -> int:
        """Drop every cached chunk of a segment, in memory and on disk (for the rare case of
        bytes that failed a check after caching, e.g. a CRC, so the next read fetches anew;
        an untransformed chunk is only checked when its batches are framed). Returns how many
        were dropped from memory."""
        doomed = [key for key in self._lru if key[0] == segment_id and len(key) < RUN_KEY_LEN]
        for key in doomed:
            self._lru.pop(key, None)
        if self.disk is not None:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._executor, self.disk.drop_segment, segment_id)
        return len(doomed)

    @property
    def readahead_bytes(self) -> int:
        """Bytes a sequential reader's read-ahead loads now (0: off; at most half the cache;
        adapted, see the module docstring)."""
        size = self._readahead_bytes
        return min(size, self._ahead_bytes) if 0 < size <= self._max_bytes // 2 else 0

    def _read_ahead_used(self, key: ChunkKey, held: bool, size: int) -> None:
        """A reader came for ``key``, a unit of ``size`` bytes read ahead: held (or still
        loading), the read-ahead grows by it; evicted before its use, the read-ahead halves (to
        none below one unit)."""
        del self._ahead[key]
        if held:
            self._ahead_bytes = min(self._readahead_bytes, self._ahead_bytes + size)
        else:
            self._wasted += 1
            self._ahead_bytes //= 2
            if self._ahead_bytes < size:
                self._ahead_bytes = 0

    def _maybe_read_ahead(
        self, segment: RemoteSegment, segment_id: uuid.UUID, chunks: Sequence[Chunk]
    ) -> None:
        previous = self._last_read.get(segment_id)
        first, last = chunks[0], chunks[-1]
        self._last_read[segment_id] = (first.original_position, last.original_end)
        # Forward from the previous read: the next read starts after its first unit, inside it
        # or right after it. A client paging with a small max_bytes restarts each page at an
        # index entry, often a few units before where the previous (window-sized) read ended;
        # the same range read again (many readers of one offset) is no pattern.
        sequential = previous is not None and previous[0] < first.original_position <= previous[1]
        if not sequential or not self._readahead_bytes:
            return
        size = self.readahead_bytes
        if not size:  # down to none: try one unit now and then
            self._forward += 1
            if self._forward % PROBE_EVERY:
                return
            size = 1
        self.prefetch(segment, segment_id, last.original_end, size)

    def prefetch(self, segment: RemoteSegment, segment_id: uuid.UUID, start: int, size: int) -> int:
        """Load the units of ``[start, start + size)`` that are neither held nor loading, in
        the background (a failure is only logged); how many. The service calls it for the
        head of the next segment when a sequential reader nears the end of one."""
        upcoming = [
            unit
            for unit in self._units(segment, start, start + size)
            if (segment_id, unit.id) not in self._lru
            and (segment_id, unit.id) not in self._inflight
        ]
        if upcoming:  # a failed load is not kept: it only costs a miss later
            self._readahead += len(upcoming)
            for unit in upcoming:
                self._ahead[segment_id, unit.id] = None
            deadline = Deadline.after(READAHEAD_TIMEOUT)
            self._claim(segment, segment_id, upcoming, deadline, count=False)
        return len(upcoming)


def _block(start: int, end: int) -> Chunk:
    """Bytes ``[start, end)`` of an untransformed segment as a unit: stored where they are."""
    return Chunk(~start, start, end - start, start, end - start)
