"""Blocking reads of remote segments, for Spark executors and batch jobs (export, scrub).

The same reads as :class:`gateway.remote.reader.SegmentReader` (chunk-aligned ranged GETs
coalesced by :func:`~gateway.remote.reader.plan_gets`, the same detransform and the same length
checks), over a :class:`~gateway.storage.sync.SyncObjectStore` with the retries of
:meth:`~gateway.storage.retry.Retrier.run_blocking`. No event loop, no thread pool: a Spark task
is already one thread of a pool.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Final

from gateway.deadline import Deadline
from gateway.errors import CorruptDataError, CorruptManifestError
from gateway.remote.chunk_index import Chunk
from gateway.remote.keys import Suffix
from gateway.remote.manifest import IndexType
from gateway.remote.reader import (
    DEFAULT_MAX_GET_BYTES,
    RemoteSegment,
    detransform_get,
    indexes_end,
    plan_gets,
    split_indexes,
)
from gateway.remote.transforms import detransform_index_piece
from gateway.storage.retry import Retrier
from gateway.storage.sync import SyncObjectStore

DEFAULT_DEADLINE_S: Final = 600.0  # a batch read of one GET: generous, but never forever


class SyncSegmentReader:
    """Reads original bytes of remote segments from one blocking store."""

    def __init__(
        self,
        store: SyncObjectStore,
        retrier: Retrier | None = None,
        *,
        max_get_bytes: int = DEFAULT_MAX_GET_BYTES,
        deadline_s: float = DEFAULT_DEADLINE_S,
    ) -> None:
        if max_get_bytes <= 0:
            raise ValueError("max_get_bytes must be positive")
        self._store = store
        self._retrier = retrier or Retrier()
        self._max_get_bytes = max_get_bytes
        self._deadline_s = deadline_s
        self.gets = 0
        self.bytes_fetched = 0

    def _get(self, key: str, start: int, end: int) -> bytes:
        what = f"GET {key} [{start}, {end})"
        data = self._retrier.run_blocking(
            what, lambda: self._store.get_range(key, start, end), Deadline.after(self._deadline_s)
        )
        self.gets += 1
        self.bytes_fetched += len(data)
        if len(data) != end - start:
            raise CorruptDataError(
                f"{what}: the object holds only {len(data)} of these bytes; it is shorter "
                "than its manifest says"
            )
        return data

    def get_object(self, key: str) -> bytes:
        """A whole small object (a manifest), retried like every GET."""
        return self._retrier.run_blocking(
            f"GET {key}", lambda: self._store.get(key), Deadline.after(self._deadline_s)
        )

    def iter_chunks(
        self, segment: RemoteSegment, chunks: Sequence[Chunk]
    ) -> Iterator[tuple[Chunk, bytes]]:
        """Each of ``chunks`` (ascending) with its original bytes, one coalesced GET at a time,
        so memory holds at most one GET's worth of chunks."""
        key, transform = segment.key.key, segment.transform
        for get in plan_gets(chunks, self._max_get_bytes):
            data = self._get(key, get.start, get.end)
            pieces = (
                [data]
                if transform.is_identity and len(get.chunks) == 1
                else detransform_get(data, get, transform, key)
            )
            yield from zip(get.chunks, pieces, strict=True)

    def iter_range(self, segment: RemoteSegment, start: int, end: int) -> Iterator[bytes]:
        """The original bytes ``[start, end)`` (clamped to the segment), as consecutive pieces
        of at most one GET each."""
        end = min(end, segment.size)
        if start < 0 or start >= end:
            return
        if segment.transform.is_identity:
            step = self._max_get_bytes
            for lo in range(start, end, step):
                yield self._get(segment.key.key, lo, min(lo + step, end))
            return
        chunks = segment.manifest.chunk_index.chunks_for_range(start, end)
        if not chunks:
            key = segment.key.key
            raise CorruptManifestError(f"{key}: chunk index has no chunk for [{start}, {end})")
        for chunk, piece in self.iter_chunks(segment, chunks):
            lo = max(start - chunk.original_position, 0)
            hi = min(end, chunk.original_end) - chunk.original_position
            yield piece[lo:hi]

    def read_range(self, segment: RemoteSegment, start: int, end: int) -> bytes:
        return b"".join(self.iter_range(segment, start, end))

    def read_indexes(self, segment: RemoteSegment) -> dict[IndexType, bytes | None]:
        """The five pieces of the ``.indexes`` object from one GET (``None`` for an absent
        transaction index)."""
        key = segment.key.with_suffix(Suffix.INDEXES).key
        return split_indexes(self._get(key, 0, indexes_end(segment)), segment)

    def read_index_piece(self, segment: RemoteSegment, kind: IndexType) -> bytes | None:
        """One piece of the ``.indexes`` object from a GET of its own range (``None`` when the
        segment has none): a Spark task splitting a 1 GiB segment needs its 2 MiB offset
        index, not the 5 MiB of all five pieces."""
        piece = segment.manifest.segment_indexes[kind]
        if piece is None:
            return None
        if piece.size == 0:
            return b""
        key = segment.key.with_suffix(Suffix.INDEXES).key
        return detransform_index_piece(self._get(key, piece.position, piece.end), segment.transform)
