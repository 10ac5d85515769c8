"""Read and check a segment's ``.indexes`` object into the :class:`IndexView` the log scan uses.

Each of the five pieces is checked on its own (Kafka's sanity checks, the checkpoint and
snapshot parsers), so one corrupt piece is one finding and the others are still used. When the
object does not decrypt as a whole, it is fetched once more and each piece decrypted alone, to
name the piece whose GCM tag fails.

The offset and time indexes stay in their byte buffers: entries are decoded on access
(:class:`_Entries`), so a large index costs its bytes, not a list of tuples.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, TypeVar, overload

from gateway.errors import (
    CorruptDataError,
    CorruptIndexError,
    DeadlineExceededError,
    ObjectNotFoundError,
    StorageError,
)
from gateway.kafka.epoch import LeaderEpochCache, parse_leader_epoch_checkpoint
from gateway.kafka.offset_index import OffsetIndex, OffsetPosition
from gateway.kafka.producer_snapshot import parse_producer_snapshot
from gateway.kafka.time_index import TimeIndex, TimestampOffset
from gateway.kafka.txn_index import AbortedTxn, TransactionIndex
from gateway.remote.keys import Suffix
from gateway.remote.manifest import IndexType
from gateway.remote.reader import RemoteSegment
from gateway.remote.sync_reader import SyncSegmentReader
from gateway.remote.transforms import detransform_index_piece
from gateway.scrub.continuity import SegmentRange
from gateway.scrub.findings import (
    INDEXES,
    LEADER_EPOCH,
    MISSING_OBJECT,
    OFFSET_INDEX,
    PRODUCER_SNAPSHOT,
    STORAGE,
    TIME_INDEX,
    TXN_INDEX,
    FindingSink,
)
from gateway.scrub.logscan import UNKNOWN_END, IndexView
from indexcache.validate import check_offset_index, check_time_index, check_txn_index

T = TypeVar("T")


class _Entries(Sequence[T], Generic[T]):
    """A read-only sequence over an index's entries, decoded one at a time."""

    def __init__(self, count: int, entry: Callable[[int], T]) -> None:
        self._count = count
        self._entry = entry

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, i: int) -> T: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[T]: ...
    def __getitem__(self, i: int | slice) -> T | Sequence[T]:
        if isinstance(i, slice):
            return [self._entry(n) for n in range(*i.indices(self._count))]
        if not 0 <= i < self._count:
            raise IndexError(i)
        return self._entry(i)


_PIECE_NAMES = {
    IndexType.OFFSET: "offset index",
    IndexType.TIMESTAMP: "time index",
    IndexType.PRODUCER_SNAPSHOT: "producer snapshot",
    IndexType.LEADER_EPOCH: "leader-epoch checkpoint",
    IndexType.TRANSACTION: "transaction index",
}


def _pieces(
    reader: SyncSegmentReader, seg: RemoteSegment, sink: FindingSink, key: str
) -> dict[IndexType, bytes | None]:
    """The detransformed pieces; a piece that cannot be read is left out (and reported)."""
    try:
        try:
            return reader.read_indexes(seg)
        except CorruptDataError:
            data = reader.get_object(key)  # find out which piece below
    except (StorageError, DeadlineExceededError) as exc:
        check = MISSING_OBJECT if isinstance(exc, ObjectNotFoundError) else STORAGE
        sink.error(check, f".indexes not audited: {type(exc).__name__}: {exc}", key)
        return {}
    out: dict[IndexType, bytes | None] = {}
    for kind in IndexType:
        piece = seg.manifest.segment_indexes[kind]
        if piece is None:
            out[kind] = None
            continue
        stored = data[piece.position : piece.end]
        if len(stored) < piece.size:
            sink.error(
                INDEXES,
                f"{_PIECE_NAMES[kind]} at bytes [{piece.position}, {piece.end}) is cut short: "
                f"the object is {len(data)} bytes",
                key,
            )
            continue
        try:
            out[kind] = detransform_index_piece(stored, seg.transform)
        except CorruptDataError as exc:
            sink.error(
                INDEXES,
                f"{_PIECE_NAMES[kind]} at bytes [{piece.position}, {piece.end}): "
                f"{type(exc).__name__}: {exc}",
                key,
            )
    return out


def read_index_view(
    reader: SyncSegmentReader,
    seg: RemoteSegment,
    base_offset: int,
    rng: SegmentRange | None,
    sink: FindingSink,
) -> IndexView:
    """Fetch, decrypt and sanity-check the five pieces; what passes Kafka's sanity checks goes
    into the view. The offset, time and transaction indexes are then checked against the
    segment's metadata as the service checks them before trusting them
    (:mod:`indexcache.validate`: order, offsets inside the segment, positions inside its size);
    an index that fails is an error finding and still goes into the view, so the log scan
    names what it would do to reads."""
    key = seg.key.with_suffix(Suffix.INDEXES).key
    end = rng.end_offset if rng is not None else UNKNOWN_END  # unknown: order checks only
    pieces = _pieces(reader, seg, sink, key)
    offsets: Sequence[OffsetPosition] = ()
    times: Sequence[TimestampOffset] = ()
    txns: Sequence[AbortedTxn] = ()
    raw = pieces.get(IndexType.OFFSET)
    if raw is not None:
        try:
            oi = OffsetIndex(raw, base_offset)
            offsets = _Entries(len(oi), oi.entry)
        except CorruptDataError as exc:
            sink.error(OFFSET_INDEX, f"fails Kafka's sanity check: {exc}", key)
        else:
            _validate(sink, OFFSET_INDEX, key, lambda: check_offset_index(oi, end, seg.size))
    raw = pieces.get(IndexType.TIMESTAMP)
    if raw is not None:
        try:
            ti = TimeIndex(raw, base_offset)
            times = _Entries(len(ti), ti.entry)
        except CorruptDataError as exc:
            sink.error(TIME_INDEX, f"fails Kafka's sanity check: {exc}", key)
        else:
            _validate(sink, TIME_INDEX, key, lambda: check_time_index(ti, end))
    raw = pieces.get(IndexType.TRANSACTION)
    if raw is not None:
        try:
            xi = TransactionIndex(raw, base_offset)
            txns = xi.all_aborted_txns()
        except CorruptDataError as exc:
            sink.error(TXN_INDEX, f"fails Kafka's sanity check: {exc}", key)
        else:
            _validate(sink, TXN_INDEX, key, lambda: check_txn_index(xi, end))
    raw = pieces.get(IndexType.PRODUCER_SNAPSHOT)
    if raw:
        try:
            parse_producer_snapshot(raw)
        except CorruptDataError as exc:
            sink.error(PRODUCER_SNAPSHOT, f"unreadable: {exc}", key)
    raw = pieces.get(IndexType.LEADER_EPOCH)
    if raw is not None:
        _epochs(raw, seg, rng, sink, key)
    return IndexView(offsets, times, txns)


def _validate(sink: FindingSink, check: str, key: str, run: Callable[[], None]) -> None:
    """One of :mod:`indexcache.validate`'s checks: its first broken rule is an error (the
    service refuses the segment's indexes, so every read of the segment fails)."""
    try:
        run()
    except CorruptIndexError as exc:
        sink.error(check, f"{exc} (reads of the segment fail: corrupt_index)", key)


def _epochs(
    raw: bytes, seg: RemoteSegment, rng: SegmentRange | None, sink: FindingSink, key: str
) -> None:
    """The checkpoint, compared with the manifest's ``segmentLeaderEpochs``, which Kafka
    derives from it (``epochEntriesInRange(start, end + 1)``, remote-read-semantics.md §2).
    Reads check batches against the manifest's map, so a difference is a warning."""
    try:
        cache = LeaderEpochCache(parse_leader_epoch_checkpoint(raw))
    except CorruptDataError as exc:
        sink.error(LEADER_EPOCH, f"leader-epoch checkpoint is unreadable: {exc}", key)
        return
    meta = seg.manifest.remote_log_segment_metadata
    if rng is not None and meta is not None:
        derived = cache.epoch_entries_in_range(rng.start_offset, rng.end_offset + 1)
        expected = tuple((e.epoch, e.start_offset) for e in derived)
        if expected != meta.segment_leader_epochs:
            sink.warning(
                LEADER_EPOCH,
                f"the manifest's segmentLeaderEpochs {dict(meta.segment_leader_epochs)} differ "
                f"from what the segment's checkpoint gives for its range, {dict(expected)}",
                key,
            )
