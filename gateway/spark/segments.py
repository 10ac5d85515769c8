"""Executor side: the segments of a read, their checked indexes and strictly framed batches.

What every task of one read shares (:class:`ReadContext`, small and picklable), the per-process
caches (one store client per spec, one key ring, the last opened segments, so the RSA unwrap of
a segment's data key runs once per process, not once per split), the segment's indexes checked
against its metadata before they are trusted (:func:`indexcache.validate.check_offset_index`
and its siblings), and :func:`frame`: a byte range of the segment through
:class:`~gateway.remote.sync_reader.SyncSegmentReader` (coalesced ranged GETs, detransform),
framed strictly by :class:`~gateway.read.framing.SegmentFramer`, the service's framer.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from gateway.errors import CorruptDataError, CorruptManifestError, CorruptRecordError, add_context
from gateway.kafka.batch import RecordBatch
from gateway.kafka.offset_index import OffsetIndex
from gateway.kafka.time_index import TimeIndex
from gateway.kafka.txn_index import TransactionIndex
from gateway.read.framing import SegmentFramer
from gateway.remote.keyring import KeyRing
from gateway.remote.keys import Suffix, parse_object_key
from gateway.remote.manifest import IndexType, parse_manifest
from gateway.remote.reader import RemoteSegment
from gateway.remote.sync_reader import SyncSegmentReader
from gateway.service.types import IsolationLevel
from gateway.spark.plan import SegmentRef, Split
from gateway.storage.sync import SyncObjectStore, SyncStoreSpec
from indexcache.validate import check_offset_index, check_time_index, check_txn_index

_OFFSET_BYTES: Final = 8  # a batch's baseOffset, the first field of its header


@dataclass(frozen=True, slots=True)
class TxnChain:
    """A partition's lineage walk as read_committed needs it: every segment from the first one
    the read touches to the end of the remote tier, or to a hole in the lineage (``gap``, the
    missing offsets, inclusive) when the read may not hop over holes."""

    partition: int
    refs: tuple[SegmentRef, ...]
    gap: tuple[int, int] | None = None
    topic: str = ""


@dataclass(frozen=True, slots=True)
class ReadContext:
    """What every task of one read shares (small and picklable)."""

    store: SyncStoreSpec
    key_prefix: str
    key_pairs: tuple[str, ...]
    include_headers: bool
    isolation: IsolationLevel
    max_rows: int
    txn_chains: tuple[TxnChain, ...] = ()

    def for_split(self, split: Split) -> ReadContext:
        """This context with only the transaction chain ``split`` needs (a stream ships one
        context per split)."""
        chain = self.txn_chain(split.topic, split.partition)
        return dataclasses.replace(self, txn_chains=() if chain is None else (chain,))

    def txn_chain(self, topic: str, partition: int) -> TxnChain | None:
        for chain in self.txn_chains:
            if chain.partition == partition and chain.topic == topic:
                return chain
        return None


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
    """The segment of ``ref``; its manifest must give the size the metadata gives."""
    segment: RemoteSegment = _open_segment(ctx.store, ctx.key_pairs, ref.key, ctx.key_prefix)
    if segment.size != ref.size:
        raise CorruptManifestError(
            f"{ref.key}: the manifest says {segment.size} bytes, the segment metadata {ref.size}"
        )
    return segment


_I = TypeVar("_I", OffsetIndex, TimeIndex, TransactionIndex)


def _checked(
    reader: SyncSegmentReader,
    segment: RemoteSegment,
    piece: IndexType,
    build: Callable[[bytes], _I],
    check: Callable[[_I], None],
) -> _I:
    """An index piece of ``segment``, built and checked; errors name the ``.indexes`` key."""
    data = reader.read_index_piece(segment, piece) or b""
    try:
        index = build(data)
        check(index)
    except CorruptDataError as exc:
        raise add_context(exc, segment.key.with_suffix(Suffix.INDEXES).key) from exc
    return index


def offset_index(reader: SyncSegmentReader, segment: RemoteSegment, ref: SegmentRef) -> OffsetIndex:
    """The segment's offset index, checked against its metadata before it is trusted."""
    return _checked(
        reader, segment, IndexType.OFFSET,
        lambda data: OffsetIndex(data, ref.start_offset),
        lambda index: check_offset_index(index, ref.end_offset, ref.size),
    )  # fmt: skip


def time_index(reader: SyncSegmentReader, segment: RemoteSegment, ref: SegmentRef) -> TimeIndex:
    """The segment's time index, checked against its metadata before it is trusted."""
    return _checked(
        reader, segment, IndexType.TIMESTAMP,
        lambda data: TimeIndex(data, ref.start_offset),
        lambda index: check_time_index(index, ref.end_offset),
    )  # fmt: skip


def txn_index(
    reader: SyncSegmentReader, segment: RemoteSegment, ref: SegmentRef
) -> TransactionIndex:
    """The segment's transaction index, checked against its metadata."""
    return _checked(
        reader, segment, IndexType.TRANSACTION,
        lambda data: TransactionIndex(data, ref.start_offset),
        lambda index: check_txn_index(index, ref.end_offset),
    )  # fmt: skip


def frame(
    reader: SyncSegmentReader,
    segment: RemoteSegment,
    framer: SegmentFramer,
    end: int,
    *,
    check_next: bool = True,
) -> Iterator[RecordBatch]:
    """The batches of bytes ``[framer.cursor, end)`` of ``segment``, framed (and checked) by
    ``framer`` across GET borders.

    Read to the segment's end, the framer's end checks run. Ending before it (at an
    offset-index position), the last batch must end exactly at ``end``; with ``check_next``,
    the batch starting there must continue the offsets (its base offset, outside the CRC, is
    read from the 8 bytes after ``end``). Errors name the object and the byte the read started
    at."""
    ref = framer.bounds
    key, size = ref.key, ref.size
    start = framer.cursor
    inside = end < size
    stop = min(end + _OFFSET_BYTES, size) if inside and check_next else end
    tail = b""
    framed_to = start  # the end of the last whole batch
    try:
        for piece in reader.iter_range(segment, start, stop):
            take = end - framer.cursor
            if len(piece) > take:
                tail += bytes(piece[take:])
            for batch in framer.feed(piece[:take]):
                framed_to = batch.position + batch.size_in_bytes
                yield batch
        if not inside:
            framer.finish()
            return
        if framer.cursor != end:
            raise CorruptDataError(f"{key}: the read ended at byte {framer.cursor} of {end}")
        if framed_to != end:
            raise CorruptRecordError(
                f"{key}: record batch at byte {framed_to} runs past byte {end}, the "
                "offset-index position where this read ends"
            )
        if check_next:
            if len(tail) < _OFFSET_BYTES:
                raise CorruptDataError(f"{key}: no batch at byte {end} of {size}")
            following = int.from_bytes(tail[:_OFFSET_BYTES], "big", signed=True)
            if following != framer.last_offset + 1:
                raise CorruptRecordError(
                    f"{key}: record batch at byte {end} starts at offset {following}; the "
                    f"batch before it ended at {framer.last_offset} (offsets in a segment are "
                    "contiguous)"
                )
    except CorruptDataError as exc:
        if not str(exc).startswith(key):  # the type and its fields stay (FramingError.rule)
            add_context(exc, f"{key} (read from byte {start})")
        raise
