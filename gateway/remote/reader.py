"""Read a byte range of a remote segment: chunks, coalesced ranged GETs, detransform, slice.

Mirrors what ``RemoteStorageManager.fetchLogSegment`` returns (the original ``.log`` bytes of
``[start, end)``) but not how the plugin fetches them: the plugin issues one GET per chunk; this
reader coalesces chunks that are adjacent in the stored object into one ranged GET of up to
``max_get_bytes`` (8 MiB by default, the size AWS recommends for byte-range fetches). An
untransformed segment is read at exactly the asked range, with no chunk alignment at all.

Every GET runs under the caller's :class:`~gateway.storage.retry.Deadline` through the
:class:`~gateway.storage.retry.Retrier`; a body shorter than asked is a retriable fault. GETs
share one process-wide budget of ``max_concurrent_gets`` in flight and a request-rate budget
per key prefix (:mod:`gateway.storage.ratelimit`); a ranged GET that straggles is sent once
more and the first answer kept (:mod:`gateway.storage.hedge`).
Decryption and decompression run in the caller's bounded executor, never on the event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from gateway.deadline import Deadline
from gateway.errors import CorruptDataError, CorruptManifestError
from gateway.remote.chunk_index import Chunk
from gateway.remote.keyring import KeyRing
from gateway.remote.keys import ObjectKey, Suffix
from gateway.remote.manifest import IndexType, SegmentManifest
from gateway.remote.transforms import (
    ChunkTransform,
    DataKeyAndAad,
    detransform_chunk,
    detransform_index_piece,
)
from gateway.storage.base import ObjectStore
from gateway.storage.hedge import HedgePolicy, Hedger, first_of
from gateway.storage.ratelimit import PrefixRateLimiter
from gateway.storage.retry import Retrier

T = TypeVar("T")

DEFAULT_MAX_GET_BYTES: Final = 8 * 1024 * 1024
DEFAULT_MAX_CONCURRENT_GETS: Final = 64
DEFAULT_GET_RATE_PER_PREFIX: Final = 5500.0  # S3's documented GET rate per prefix
LATENCY_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass(frozen=True, slots=True)
class RangeGet:
    """One ranged GET of the stored object, ``[start, end)``, and the chunks it carries."""

    start: int
    end: int
    chunks: tuple[Chunk, ...]

    @property
    def size(self) -> int:
        return self.end - self.start


def plan_gets(chunks: Sequence[Chunk], max_get_bytes: int) -> list[RangeGet]:
    """Coalesce chunks that are contiguous in the stored object into one GET while it carries
    at most ``max_get_bytes`` of stored bytes or at most ``max_get_bytes`` of segment data (so
    two 4 MiB encrypted chunks, 28 bytes of GCM framing over 8 MiB, still make one 8 MiB GET).
    A single chunk larger than the cap is still one GET."""
    gets: list[RangeGet] = []
    run: list[Chunk] = []
    for chunk in chunks:
        if run and (
            chunk.transformed_position != run[-1].transformed_end
            or (
                chunk.transformed_end - run[0].transformed_position > max_get_bytes
                and chunk.original_end - run[0].original_position > max_get_bytes
            )
        ):
            gets.append(RangeGet(run[0].transformed_position, run[-1].transformed_end, tuple(run)))
            run = []
        run.append(chunk)
    if run:
        gets.append(RangeGet(run[0].transformed_position, run[-1].transformed_end, tuple(run)))
    return gets


@dataclass(frozen=True, slots=True)
class RemoteSegment:
    """What reading a segment needs: its keys, its manifest, its unwrapped transform."""

    key: ObjectKey  # the ``.log`` object's key
    manifest: SegmentManifest
    transform: ChunkTransform

    @classmethod
    def open(cls, key: ObjectKey, manifest: SegmentManifest, keys: KeyRing) -> RemoteSegment:
        """Unwraps the data key with the key ring: an RSA private-key operation (milliseconds
        of CPU), so call it from a worker thread and keep the result per segment."""
        encryption = None
        if manifest.encryption is not None:
            enc = manifest.encryption
            encryption = DataKeyAndAad(keys.unwrap(enc.key_id, enc.wrapped_data_key), enc.aad)
        transform = ChunkTransform(compression=manifest.compression, encryption=encryption)
        return cls(key.with_suffix(Suffix.LOG), manifest, transform)

    @property
    def size(self) -> int:
        return self.manifest.chunk_index.original_file_size


@dataclass(slots=True)
class ReadCounters:
    """For the metrics endpoint."""

    gets: int = 0
    bytes_fetched: int = 0
    bytes_returned: int = 0
    chunks_decoded: int = 0
    hedges: int = 0  # ranged GETs sent a second time because the first straggled
    hedge_wins: int = 0  # of them, answered before the first
    get_seconds_total: float = 0.0
    get_latency_buckets: list[int] = field(default_factory=lambda: [0] * len(LATENCY_BUCKETS))

    def observe_get(self, seconds: float, size: int) -> None:
        self.gets += 1
        self.bytes_fetched += size
        self.get_seconds_total += seconds
        for i, bound in enumerate(LATENCY_BUCKETS):
            if seconds <= bound:
                self.get_latency_buckets[i] += 1


def detransform_get(
    data: bytes, get: RangeGet, transform: ChunkTransform, key: str = ""
) -> list[bytes]:
    """The original bytes of each chunk ``get`` carries, from the stored bytes it fetched; a
    chunk that fails to decrypt or decompress raises its typed error naming ``key``, the chunk
    and its stored byte range."""
    view = memoryview(data)
    out = []
    for chunk in get.chunks:
        lo = chunk.transformed_position - get.start
        stored = view[lo : lo + chunk.transformed_size]
        try:
            out.append(detransform_chunk(stored, chunk.original_size, transform))
        except CorruptDataError as exc:
            span = f"[{chunk.transformed_position}, {chunk.transformed_end})"
            name = key or "segment"
            raise type(exc)(f"{name} chunk {chunk.id}, stored bytes {span}: {exc}") from exc
    return out


async def all_or_nothing(coros: Sequence[Coroutine[Any, Any, T]]) -> list[T]:
    """``gather``, but the first failure cancels the siblings: no GETs, retries or decoding
    for a response (or a bucket scan pass) that has already failed."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


class SegmentReader:
    """Reads original bytes of remote segments from one store."""

    def __init__(
        self,
        store: ObjectStore,
        retrier: Retrier,
        executor: Executor,
        *,
        max_get_bytes: int = DEFAULT_MAX_GET_BYTES,
        max_concurrent_gets: int = DEFAULT_MAX_CONCURRENT_GETS,
        get_rate_per_prefix: float = DEFAULT_GET_RATE_PER_PREFIX,
        hedge: HedgePolicy | None = None,
    ) -> None:
        """``max_concurrent_gets`` bounds the GETs in flight of every read of this reader
        together (one reader serves the whole process); ``get_rate_per_prefix`` (0: no
        limit) the GETs per second per key prefix."""
        if max_get_bytes <= 0:
            raise ValueError("max_get_bytes must be positive")
        self._store = store
        self._retrier = retrier
        self._executor = executor
        self._max_get_bytes = max_get_bytes
        self._gets = asyncio.Semaphore(max_concurrent_gets)
        self.rate = PrefixRateLimiter(get_rate_per_prefix)
        self.hedger = Hedger(hedge)
        self.counters = ReadCounters()

    async def _timed_get(self, key: str, start: int, end: int) -> bytes:
        await self.rate.acquire(key)
        t0 = time.monotonic()
        data = await self._store.get_range(key, start, end)
        seconds = time.monotonic() - t0
        self.counters.observe_get(seconds, len(data))
        self.hedger.observe(end - start, seconds)
        return data

    async def _hedge(self, key: str, start: int, end: int) -> bytes:
        async with self._gets:
            return await self._timed_get(key, start, end)

    async def _get(self, key: str, start: int, end: int, deadline: Deadline) -> bytes:
        what = f"GET {key} [{start}, {end})"

        def hedge() -> Coroutine[Any, Any, bytes] | None:
            # Only into a free GET slot (a hedge never queues), and within the budget.
            if self._gets.locked() or not self.hedger.allow():
                return None
            self.counters.hedges += 1
            return self._hedge(key, start, end)

        async def attempt() -> bytes:
            t0 = time.monotonic()
            after = self.hedger.threshold(end - start)
            data, hedged = await first_of(self._timed_get(key, start, end), after, hedge)
            if hedged:
                self.counters.hedge_wins += 1
                self.hedger.observe(end - start, time.monotonic() - t0)  # the loser's, at least
            return data

        # The slot is taken outside the retrier: waiting for one must not eat the per-attempt
        # timeout. A store reports a body cut short in transit as a retriable fault itself; a
        # complete answer that is shorter than the manifest promised is an object too short.
        async with self._gets:
            data = await self._retrier.run(what, attempt, deadline)
        if len(data) != end - start:
            raise CorruptDataError(
                f"{what}: the object holds only {len(data)} of these bytes; it is shorter "
                "than its manifest says"
            )
        return data

    async def get_object(self, key: str, deadline: Deadline) -> bytes:
        """A whole small object (a manifest), retried like every GET."""

        async def attempt() -> bytes:
            await self.rate.acquire(key)
            t0 = time.monotonic()
            data = await self._store.get(key)
            self.counters.observe_get(time.monotonic() - t0, len(data))
            return data

        async with self._gets:
            return await self._retrier.run(f"GET {key}", attempt, deadline)

    async def read_range(
        self, segment: RemoteSegment, start: int, end: int, deadline: Deadline
    ) -> bytes:
        """The original segment bytes ``[start, end)`` (clamped to the segment's size)."""
        end = min(end, segment.size)
        if start < 0 or start >= end:
            return b""
        if segment.transform.is_identity:
            out = await self._read_plain(segment.key.key, start, end, deadline)
        else:
            out = await self._read_chunks(segment, start, end, deadline)
        self.counters.bytes_returned += len(out)
        return out

    async def _read_plain(self, key: str, start: int, end: int, deadline: Deadline) -> bytes:
        step = self._max_get_bytes
        parts = await all_or_nothing(
            [self._get(key, lo, min(lo + step, end), deadline) for lo in range(start, end, step)]
        )
        return b"".join(parts)

    async def _read_chunks(
        self, segment: RemoteSegment, start: int, end: int, deadline: Deadline
    ) -> bytes:
        chunks = segment.manifest.chunk_index.chunks_for_range(start, end)
        if not chunks:
            key = segment.key.key
            raise CorruptManifestError(f"{key}: chunk index has no chunk for [{start}, {end})")
        pieces = await self._decoded_chunks(segment, chunks, deadline)
        # Trim the outer chunks to the range, then join once (no second full-size copy).
        pieces[-1] = pieces[-1][: end - chunks[-1].original_position]
        pieces[0] = pieces[0][start - chunks[0].original_position :]
        return b"".join(pieces)

    async def read_chunks(
        self, segment: RemoteSegment, chunks: Sequence[Chunk], deadline: Deadline
    ) -> list[bytes]:
        """The original bytes of each of ``chunks`` (ascending chunks of ``segment``), with
        stored-adjacent chunks coalesced into GETs as :meth:`read_range` does. The unit a
        decoded-chunk cache keeps."""
        if not chunks:
            return []
        pieces = await self._decoded_chunks(segment, chunks, deadline)
        self.counters.bytes_returned += sum(len(p) for p in pieces)
        return pieces

    async def _decoded_chunks(
        self, segment: RemoteSegment, chunks: Sequence[Chunk], deadline: Deadline
    ) -> list[bytes]:
        key, transform = segment.key.key, segment.transform
        loop = asyncio.get_running_loop()

        async def fetch(get: RangeGet) -> list[bytes]:
            data = await self._get(key, get.start, get.end, deadline)
            if transform.is_identity:  # slices (checked copies) on the loop: no hand-off
                return (
                    [data] if len(get.chunks) == 1 else detransform_get(data, get, transform, key)
                )
            self.counters.chunks_decoded += len(get.chunks)
            return await loop.run_in_executor(
                self._executor, detransform_get, data, get, transform, key
            )

        decoded = await all_or_nothing([fetch(g) for g in plan_gets(chunks, self._max_get_bytes)])
        return [piece for group in decoded for piece in group]

    async def read_indexes(
        self, segment: RemoteSegment, deadline: Deadline
    ) -> dict[IndexType, bytes | None]:
        """The five pieces of the ``.indexes`` object, each detransformed on its own
        (``None`` for an absent transaction index), from one GET."""
        key = segment.key.with_suffix(Suffix.INDEXES).key
        end = indexes_end(segment)
        data = await self._get(key, 0, end, deadline)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, split_indexes, data, segment)

    async def read_index_piece(
        self, segment: RemoteSegment, kind: IndexType, deadline: Deadline
    ) -> bytes | None:
        """One piece of the ``.indexes`` object from a GET of its own range, detransformed
        (``None`` when the segment has none): the producer snapshot of a partition's last
        segment, without the other four pieces."""
        piece = segment.manifest.segment_indexes[kind]
        if piece is None:
            return None
        if piece.size == 0:
            return b""
        key = segment.key.with_suffix(Suffix.INDEXES).key
        data = await self._get(key, piece.position, piece.end, deadline)
        if segment.transform.encryption is None:  # pieces are never compressed
            return data
        loop = asyncio.get_running_loop()  # AES-GCM: off the loop
        return await loop.run_in_executor(
            self._executor, detransform_index_piece, data, segment.transform
        )


def indexes_end(segment: RemoteSegment) -> int:
    """How many bytes of the ``.indexes`` object hold the five pieces."""
    layout = segment.manifest.segment_indexes
    return max((p.end for p in (layout[k] for k in IndexType) if p is not None), default=0)


def split_indexes(data: bytes, segment: RemoteSegment) -> dict[IndexType, bytes | None]:
    """The five pieces of a fetched ``.indexes`` object, each detransformed on its own
    (``None`` for an absent transaction index). Each piece is read at its own position and
    size, as the plugin does; positions are cumulative when the plugin writes them, but nothing
    here relies on it."""
    layout, transform = segment.manifest.segment_indexes, segment.transform
    out: dict[IndexType, bytes | None] = {}
    for kind in IndexType:
        piece = layout[kind]
        out[kind] = (
            None
            if piece is None
            else detransform_index_piece(data[piece.position : piece.end], transform)
        )
    return out
