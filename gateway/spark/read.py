"""Executor side: one split's records as Arrow record batches (no pyspark imported here).

Per split: the segment's manifest (and the RSA unwrap of its data key when it is encrypted),
its offset index only when the split is part of a segment (:func:`~gateway.spark.plan.
split_byte_range`), then the split's bytes through :class:`~gateway.remote.sync_reader.
SyncSegmentReader` (coalesced ranged GETs, detransform) framed into batches across GET
borders. Every batch in the range has its CRC checked, control batches included; batches
outside ``[start_offset, end_offset)`` are skipped and records filtered to it.

read_committed follows ``remote-read-semantics.md`` §8 per split: the aborted transactions
overlapping ``[first batch's base offset, segment end]`` are collected from the transaction
indexes of this segment and the following ones (segments whose index is empty are skipped
without a GET), until one search is complete or the remote log ends; then the consumer's
filter (:class:`~gateway.service.records.AbortedFilter`) drops aborted batches and control
batches.

Batches in range are decoded many at a time by :class:`~gateway.spark.columns.FastColumns`
(a compiled pass straight into Arrow buffers, the reference decoder when it objects) and
yielded as Arrow batches of at most ``max_rows`` rows.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa

from gateway.errors import CorruptDataError
from gateway.kafka.batch import RecordBatch, iter_batches
from gateway.remote.keyring import KeyRing
from gateway.remote.keys import Suffix, parse_object_key
from gateway.remote.manifest import IndexType, parse_manifest
from gateway.remote.reader import RemoteSegment
from gateway.remote.sync_reader import SyncSegmentReader
from gateway.service.records import AbortedFilter
from gateway.service.types import AbortedTransaction, IsolationLevel
from gateway.spark.columns import FastColumns
from gateway.spark.plan import SegmentRef, Split, split_byte_range
from gateway.storage.sync import SyncObjectStore, SyncStoreSpec
from indexcache.offset_index import OffsetIndex
from indexcache.txn_index import TransactionIndex

MAX_GROUP_BYTES: Final = 64 << 20  # records bytes decoded in one pass (int32 Arrow offsets)


@dataclass(frozen=True, slots=True)
class ReadContext:
    """What every task of one read shares (small and picklable)."""

    store: SyncStoreSpec
    key_prefix: str
    key_pairs: tuple[str, ...]
    include_headers: bool
    isolation: IsolationLevel
    max_rows: int
    txn_chains: tuple[tuple[int, tuple[SegmentRef, ...]], ...] = ()  # partition -> refs

    def txn_chain(self, partition: int) -> tuple[SegmentRef, ...]:
        for p, chain in self.txn_chains:
            if p == partition:
                return chain
        return ()


# Per executor process (Python workers are reused across tasks): one store client per spec,
# one parsed key ring, and the last few opened segments, so the RSA unwrap of a segment's data
# key runs once per process, not once per split of the segment.
@functools.lru_cache(maxsize=4)
def _store(spec: SyncStoreSpec) -> SyncObjectStore:
    return spec.open()


@functools.lru_cache(maxsize=4)
def _keyring(pairs: tuple[str, ...]) -> KeyRing:
    return KeyRing.from_specs(pairs)


@functools.lru_cache(maxsize=16)
def _open_segment(spec: SyncStoreSpec, pairs: tuple[str, ...], key: str, prefix: str) -> Any:
    reader = SyncSegmentReader(_store(spec))
    log_key = parse_object_key(key, prefix)
    manifest_key = log_key.with_suffix(Suffix.MANIFEST)
    manifest = parse_manifest(reader.get_object(manifest_key.key), manifest_key.key)
    return RemoteSegment.open(log_key, manifest, _keyring(pairs))


def sync_reader(ctx: ReadContext) -> SyncSegmentReader:
    """A reader over this process's client of the read's store."""
    return SyncSegmentReader(_store(ctx.store))


def open_segment(ctx: ReadContext, ref: SegmentRef) -> RemoteSegment:
    segment: RemoteSegment = _open_segment(ctx.store, ctx.key_pairs, ref.key, ctx.key_prefix)
    return segment


def aborted_transactions(
    ctx: ReadContext, reader: SyncSegmentReader, split: Split, fetch_offset: int
) -> list[AbortedTransaction]:
    """§8 for a split: from ``fetch_offset`` (its first batch's base offset) up to its
    segment's end, walking transaction indexes forward until a search is complete (the end of
    the remote tier counts as one)."""
    upper = split.segment.end_offset + 1
    found: set[tuple[int, int]] = set()
    for ref in ctx.txn_chain(split.partition):
        if ref.walk < split.segment.walk or ref.txn_index_empty:
            continue
        data = reader.read_index_piece(open_segment(ctx, ref), IndexType.TRANSACTION)
        result = TransactionIndex(data or b"", ref.start_offset).collect_aborted_txns(
            fetch_offset, upper
        )
        found.update((t.producer_id, t.first_offset) for t in result.aborted_transactions)
        if result.is_complete:
            break
    return [AbortedTransaction(pid, first) for pid, first in found]


def iter_split_batches(
    reader: SyncSegmentReader, segment: RemoteSegment, ref: SegmentRef, start: int, end: int
) -> Iterator[RecordBatch]:
    """The batches whose first byte is in ``[start, end)``, framed across GET borders, with
    offsets strictly increasing and inside the segment's metadata range."""
    pending = b""
    base = start  # segment position of pending[0]
    prev_last = -1
    offset_range = (ref.start_offset, ref.end_offset)
    for piece in reader.iter_range(segment, start, end):
        buf = pending + piece if pending else piece
        consumed = 0
        try:
            for batch in iter_batches(buf, offset_range=offset_range):
                if batch.base_offset <= prev_last:
                    raise CorruptDataError(
                        f"batch at {base + batch.position} has offsets not after {prev_last}"
                    )
                prev_last = batch.last_offset
                consumed = batch.position + batch.size_in_bytes
                batch.position += base
                yield batch
        except CorruptDataError as exc:
            raise type(exc)(f"{ref.key} (read from byte {base}): {exc}") from exc
        pending = buf[consumed:]
        base += consumed
    if pending and end < segment.size:
        raise CorruptDataError(
            f"{ref.key}: a batch at byte {base} runs past {end}, an offset-index position"
        )


def read_split(split: Split, ctx: ReadContext) -> Iterator[pa.RecordBatch]:
    """The records of ``split`` as Arrow batches of at most ``ctx.max_rows`` rows."""
    reader = sync_reader(ctx)
    ref = split.segment
    segment = open_segment(ctx, ref)
    if segment.size != ref.size:
        raise CorruptDataError(
            f"{ref.key}: the manifest says {segment.size} bytes, the metadata {ref.size}"
        )
    index = None
    if not split.whole_segment:
        data = reader.read_index_piece(segment, IndexType.OFFSET) or b""
        index = OffsetIndex(data, ref.start_offset)
    start, end = split_byte_range(split, index)
    if start >= end:
        return
    read_committed = ctx.isolation is IsolationLevel.READ_COMMITTED
    committed = None
    lo, hi = split.start_offset, split.end_offset
    columns = FastColumns(split.topic, split.partition, ctx.include_headers, lo, hi)
    for batch in iter_split_batches(reader, segment, ref, start, end):
        if batch.base_offset >= hi:
            break
        batch.ensure_valid()
        if read_committed and committed is None:
            # From the first batch read, as Kafka's fetch: a marker before it is another
            # split's business (it would otherwise abort this producer's later batches).
            aborted = aborted_transactions(ctx, reader, split, batch.base_offset)
            committed = AbortedFilter(aborted)
        if committed is not None and not committed.accepts(batch):
            continue
        if batch.is_control or batch.last_offset < lo:
            continue
        if columns.held and columns.size + batch.size_in_bytes > MAX_GROUP_BYTES:
            yield from _pieces(columns.flush(), ctx.max_rows)
        columns.add(batch)
        if columns.rows >= ctx.max_rows:
            yield from _pieces(columns.flush(), ctx.max_rows)
    if columns.held:
        yield from _pieces(columns.flush(), ctx.max_rows)


def _pieces(batch: pa.RecordBatch, max_rows: int) -> Iterator[pa.RecordBatch]:
    """``batch`` in zero-copy slices of at most ``max_rows`` rows (none when it is empty)."""
    for start in range(0, batch.num_rows, max_rows):
        yield batch.slice(start, max_rows)
