"""A byte-bounded, single-flight LRU of remote segment indexes, with an optional disk tier.

The gateway's counterpart of Kafka's ``RemoteIndexCache`` (``remote-read-semantics.md`` §13),
shaped by what its users hit (§14 item 4):

- **Sizing by bytes, not count** (3.6 held 1024 entries whatever their size): a
  ``cachetools.LRUCache`` whose ``maxsize`` is a byte budget and whose item size is the entry's
  :attr:`~indexcache.segment.SegmentIndexes.weight`. Eviction is strict LRU by use (a hit
  refreshes recency); Kafka 3.7+ uses Caffeine's frequency-based Window TinyLFU. An entry
  larger than the whole budget is served without being cached and counted as ``oversized``.
- **No race between eviction and readers** (KAFKA-15481, KAFKA-17184): entries are immutable
  and own their bytes; evicting drops the cache's reference only, never closes or unmaps.
- **Corrupt files**: a loaded entry is sanity-checked before it is cached (a corrupt download
  fails that read and is not cached); a disk file that fails its check is removed and fetched
  again (:mod:`indexcache.disk`).
- **Stale entries** (KAFKA-19970 adds a TTL): keys are remote segment ids, whose objects are
  never rewritten, so an entry cannot go stale; an entry can only outlive its segment, and
  :meth:`RemoteIndexCache.invalidate` drops it when retention deletes the segment.

Misses are single-flight: concurrent misses on one key share one load task (shielded, so a
cancelled waiter does not cancel it for the others); a failed load is raised to every waiter
and nothing is cached, so the next call loads again. Order of a load: the disk tier (if any),
then the injected loader; a loaded entry is written to the disk tier in the background.
Parsing large transaction indexes and all disk I/O run in the executor, never on the loop.

The cache belongs to one event loop and is not thread-safe; the entries it returns are.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Final, ParamSpec, TypeVar

from gateway.flights import Flights
from gateway.kafka.offset_index import OffsetPosition
from gateway.kafka.time_index import TimestampOffset
from gateway.kafka.txn_index import TxnIndexSearchResult
from gateway.lru import ByteLRU
from indexcache.disk import DiskScan, DiskStats, DiskTier
from indexcache.segment import IndexLoader, SegmentIndexBytes, SegmentIndexes, SegmentKey

__all__ = [
    "DEFAULT_DISK_MAX_BYTES",
    "DEFAULT_MAX_BYTES",
    "CacheStats",
    "RemoteIndexCache",
]

_log = logging.getLogger(__name__)
_P = ParamSpec("_P")
_R = TypeVar("_R")

DEFAULT_MAX_BYTES: Final = 256 * 1024 * 1024
"""Memory budget: 256 MiB of index bytes (Kafka's ``remote.log.index.file.cache.total.size.bytes``
defaults to 1 GiB, but mmapped, outside the heap)."""

DEFAULT_DISK_MAX_BYTES: Final = 1024 * 1024 * 1024
"""Disk budget of the disk tier: 1 GiB."""

DEFAULT_PARSE_OFFLOAD_BYTES: Final = 64 * 1024
"""Transaction index plus checkpoint bytes above which an entry is built in the executor (the
offset and time indexes are checked in O(1) and never decoded up front)."""


@dataclass(frozen=True, slots=True)
class CacheStats:
    """A snapshot of the counters, for the metrics endpoint.

    ``hits`` and ``misses`` count :meth:`RemoteIndexCache.get` calls answered from memory or
    not (a caller joining a load in flight is a miss). ``loads`` counts loader calls and
    ``load_failures`` those that raised or returned corrupt bytes; ``disk_hits`` counts misses
    answered by the disk tier. ``evictions`` counts memory evictions for space; ``oversized``
    entries larger than the memory budget, served uncached.
    """

    hits: int
    misses: int
    loads: int
    load_failures: int
    disk_hits: int
    evictions: int
    oversized: int
    entries: int
    bytes_held: int
    max_bytes: int
    disk: DiskStats | None


def _weight(entry: SegmentIndexes) -> int:
    return entry.weight


class RemoteIndexCache:
    """Byte-bounded LRU of :class:`SegmentIndexes` in front of an injected ``loader``.

    ``loader(key)`` returns the segment's :class:`SegmentIndexBytes` (the cache knows nothing of
    S3 or manifests). ``max_bytes`` bounds the bytes held in memory. With ``cache_dir``, loaded
    entries are also kept on disk under it, bounded by ``disk_max_bytes`` (``fsync`` makes the
    writes durable); call :meth:`start` before use. ``executor`` runs disk I/O and large parses
    (``None``: the loop's default executor). Use as ``async with`` or call :meth:`aclose`.
    """

    def __init__(
        self,
        loader: IndexLoader,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        cache_dir: str | os.PathLike[str] | None = None,
        disk_max_bytes: int = DEFAULT_DISK_MAX_BYTES,
        fsync: bool = False,
        executor: Executor | None = None,
        parse_offload_bytes: int = DEFAULT_PARSE_OFFLOAD_BYTES,
    ) -> None:
        if max_bytes < 0:
            raise ValueError("max_bytes must not be negative")
        self._loader = loader
        if cache_dir is not None and not os.fspath(cache_dir):
            raise ValueError("cache_dir must not be empty (it would be the working directory)")
        self._lru: ByteLRU[SegmentKey, SegmentIndexes] = ByteLRU(max_bytes, _weight)
        self._disk = None if cache_dir is None else DiskTier(cache_dir, disk_max_bytes, fsync=fsync)
        self._started = self._disk is None
        self._scan: DiskScan | None = None
        self._executor = executor
        self._parse_offload_bytes = parse_offload_bytes
        self._inflight: Flights[SegmentKey, SegmentIndexes] = Flights()
        self._writes: set[asyncio.Task[None]] = set()
        self._closed = False
        self._hits = self._misses = self._loads = self._load_failures = 0
        self._disk_hits = self._oversized = 0

    # --- life cycle --------------------------------------------------------------------------

    async def start(self) -> DiskScan | None:
        """Open the disk tier (leftovers removed, every set sanity-checked) and return what it
        found; ``None`` without one. Later calls return the first scan."""
        if self._disk is None:
            return None
        if self._scan is None:
            self._scan = await self._run(self._disk.open)
            self._started = True
        return self._scan

    async def aclose(self) -> None:
        """Cancel loads in flight and wait for background disk writes to finish."""
        self._closed = True
        loads = self._inflight.tasks()
        for task in loads:
            task.cancel()
        await asyncio.gather(*loads, *self._writes, return_exceptions=True)

    async def __aenter__(self) -> RemoteIndexCache:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def flush(self) -> None:
        """Wait for the background disk writes started so far."""
        while self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)

    # --- the cache ----------------------------------------------------------------------------

    @property
    def max_bytes(self) -> int:
        return int(self._lru.maxsize)

    def __len__(self) -> int:
        return len(self._lru)

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` is in memory (does not refresh recency)."""
        return key in self._lru

    def keys(self) -> list[SegmentKey]:
        """The keys in memory (insertion order)."""
        return list(self._lru)

    def stats(self) -> CacheStats:
        return CacheStats(
            hits=self._hits,
            misses=self._misses,
            loads=self._loads,
            load_failures=self._load_failures,
            disk_hits=self._disk_hits,
            evictions=self._lru.evictions,
            oversized=self._oversized,
            entries=len(self._lru),
            bytes_held=int(self._lru.currsize),
            max_bytes=int(self._lru.maxsize),
            disk=self._disk.stats() if self._disk is not None else None,
        )

    async def get(self, key: SegmentKey) -> SegmentIndexes:
        """The indexes of ``key``: from memory, else from disk or the loader (one load however
        many callers miss at once). Raises what the loader raised, or
        :class:`~gateway.errors.CorruptIndexError` /
        :class:`~gateway.errors.CorruptCheckpointError` for corrupt bytes; nothing is cached
        then."""
        entry = self._lru.get(key)
        if entry is not None:
            self._hits += 1
            return entry
        if self._closed:
            raise RuntimeError("the index cache is closed")
        if not self._started:
            raise RuntimeError("call start() before using an index cache with a disk tier")
        self._misses += 1
        return await asyncio.shield(self._inflight.join(key, lambda: self._load(key)))

    async def invalidate(self, key: SegmentKey) -> bool:
        """Drop ``key`` from memory and disk (when retention has deleted the segment); ``True``
        when something was dropped. A reader holding the entry keeps it; a load (or disk write)
        of ``key`` already in flight still completes and caches it (harmless: the bytes are
        right, and LRU order ages them out)."""
        dropped = self._lru.pop(key, None) is not None
        if self._disk is not None:
            dropped = await self._run(self._disk.remove, key) or dropped
        return dropped

    async def _load(self, key: SegmentKey) -> SegmentIndexes:
        entry = None
        if self._disk is not None:
            entry = await self._run(self._disk.read, key)
            if entry is not None:
                self._disk_hits += 1
        if entry is None:
            entry = await self._fetch(key)
        self._store(key, entry)
        return entry

    async def _fetch(self, key: SegmentKey) -> SegmentIndexes:
        self._loads += 1
        try:
            raw = await self._loader(key)
            if raw.base_offset != key.start_offset:
                raise ValueError(
                    f"loader returned indexes of base offset {raw.base_offset} for {key}"
                )
            offload = len(raw.txn or b"") + len(raw.leader_epoch) > self._parse_offload_bytes
            entry = await self._run(SegmentIndexes, raw) if offload else SegmentIndexes(raw)
        except Exception:
            self._load_failures += 1
            raise
        if self._disk is not None and not self._closed:
            write = asyncio.get_running_loop().create_task(self._write(self._disk, key, raw))
            self._writes.add(write)
            write.add_done_callback(self._writes.discard)
        return entry

    async def _write(self, disk: DiskTier, key: SegmentKey, raw: SegmentIndexBytes) -> None:
        try:
            await self._run(disk.write, key, raw)
        except Exception:  # the disk tier is an optimisation; write() already handles OSError
            _log.exception("index cache: writing %s to disk failed", key)

    def _store(self, key: SegmentKey, entry: SegmentIndexes) -> None:
        if entry.weight > self._lru.maxsize:
            self._oversized += 1
            self._lru.pop(key, None)
            return
        self._lru[key] = entry

    async def _run(self, fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
        """``fn(*args, **kwargs)`` in the executor."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    # --- lookups --------------------------------------------------------------------------------

    async def lookup_offset(self, key: SegmentKey, offset: int) -> OffsetPosition:
        """Offset → byte position (floor): see :meth:`SegmentIndexes.lookup_offset`."""
        return (await self.get(key)).lookup_offset(offset)

    async def lookup_timestamp(self, key: SegmentKey, timestamp: int) -> TimestampOffset:
        """Timestamp → (timestamp, offset) (floor): see :meth:`SegmentIndexes.lookup_timestamp`."""
        return (await self.get(key)).lookup_timestamp(timestamp)

    async def upper_bound_at(self, key: SegmentKey, position: int) -> OffsetPosition | None:
        """First offset-index entry at or after ``position``."""
        return (await self.get(key)).upper_bound_at(position)

    async def aborted_txns(
        self, key: SegmentKey, fetch_offset: int, upper_bound_offset: int
    ) -> TxnIndexSearchResult:
        """Aborted transactions in ``[fetch_offset, upper_bound_offset)`` and completeness."""
        return (await self.get(key)).aborted_txns(fetch_offset, upper_bound_offset)

    async def epoch_for_offset(self, key: SegmentKey, offset: int) -> int | None:
        """The leader epoch of ``offset`` by the segment's checkpoint."""
        return (await self.get(key)).epoch_for_offset(offset)
