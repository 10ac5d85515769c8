"""Stream a segment's ``.log`` bytes once and check every batch and every index entry.

The bytes arrive as decoded chunks (``feed``), in order, and go through the read core's
:class:`~gateway.read.framing.SegmentFramer`, the same strict framing the service and the Spark
executors use (a tiered segment is rolled and trimmed, so nothing about it may be "truncated").
What the framer rejects is an error finding by the rule that failed, and framing stops there (the
batches after a broken one cannot be framed):

* ``batch-framing``: a magic other than 2, a length below the v2 header, a batch that runs past
  the segment's size, bytes after the last whole batch (a truncated tail);
* ``offsets``: the first batch does not start at the segment's ``startOffset``, offsets that are
  not contiguous or leave ``[startOffset, endOffset]``, batches that end before ``endOffset``;
* ``leader-epoch``: a ``partitionLeaderEpoch`` (outside the CRC) that is not the epoch the
  segment's ``segmentLeaderEpochs`` give its base offset.

A batch may cross chunk borders, so the scanner keeps the unframed tail (at most one batch plus
one chunk in memory, never the segment); a batch inside a chunk is framed without a copy. Per
batch the framer returns: the CRC-32C, the producer codec and every record
(:meth:`RecordBatch.records`). Index entries are checked against the batches as they stream by,
each index walked once in step with the log (their order and range against the metadata are
checked when they are read, :func:`gateway.scrub.indexes.read_index_view`):

* offset index ``(O, P)`` (§8): "the batches starting at byte P end at offset O". P must be a
  batch boundary (error otherwise), and every offset before P must be below O, else a lookup of
  O starts after O and the fetch skips records (error). O outside [base offset of the batch at P,
  last offset before the next entry] is not what Kafka writes but reads stay correct (warning).
  Kafka < 3.8 appends one entry per append (O = the append's last offset), 3.8+ one per batch;
  both satisfy these rules.
* time index ``(T, O)`` (§9): "the largest timestamp up to offset O is T". O must lie in a
  batch (error otherwise), and no batch before O's batch may have a larger max timestamp than
  T, else a timestamp lookup for a value in between starts too late and skips records (error).
  Kafka writes T = the running max through O's batch exactly; any other T is a warning.
* transaction index (§11): :class:`~gateway.scrub.txncheck.TxnChecks`, in step with the log.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from gateway.errors import CorruptRecordError, CrcMismatchError, GatewayError
from gateway.kafka.batch import LOG_OVERHEAD, PEEK, PEEK_SIZE, RecordBatch
from gateway.kafka.control import control_type
from gateway.kafka.ints import INT64_MAX, INT64_MIN
from gateway.kafka.offset_index import OffsetPosition
from gateway.kafka.time_index import TimestampOffset
from gateway.kafka.txn_index import AbortedTxn
from gateway.read.framing import FramingError, Rule, SegmentBounds, SegmentFramer
from gateway.scrub.findings import (
    BATCH_CRC,
    BATCH_DECODE,
    BATCH_FRAMING,
    LEADER_EPOCH,
    MANIFEST,
    OFFSET_INDEX,
    OFFSETS,
    TIME_INDEX,
    FindingSink,
)
from gateway.scrub.txncheck import TxnChecks

_NO_OFFSET: Final = INT64_MIN
UNKNOWN_END: Final = INT64_MAX  # SegmentBounds.end_offset when the metadata is unknown

# What part of a framer's message names the rule that failed (see framing_check).


_RULE_CHECKS: Final = {
    Rule.FRAMING: BATCH_FRAMING,
    Rule.OFFSETS: OFFSETS,
    Rule.LEADER_EPOCH: LEADER_EPOCH,
    Rule.INDEX_ENTRY: OFFSET_INDEX,
}


def framing_check(exc: CorruptRecordError) -> str:
    """The finding check for a :class:`SegmentFramer` failure, by the rule it broke."""
    if isinstance(exc, FramingError):
        return _RULE_CHECKS[exc.rule]
    return BATCH_FRAMING


@dataclass(frozen=True, slots=True)
class IndexView:
    """The decoded indexes the scan checks the log against (small: entries only)."""

    offset: Sequence[OffsetPosition] = ()
    time: Sequence[TimestampOffset] = ()
    txns: Sequence[AbortedTxn] = ()


class LogScanner:
    """Feed it the segment's original bytes in order, then call :meth:`finish`."""

    def __init__(
        self,
        indexes: IndexView,
        sink: FindingSink,
        bounds: SegmentBounds,
        *,
        indexes_key: str,
        end_known: bool = True,
        max_timestamp_ms: int | None = None,
    ) -> None:
        """``bounds``: what the manifest's ``remoteLogSegmentMetadata`` promises (its ``key``
        is the ``.log`` key). ``end_known=False`` when there is no usable metadata: then
        ``bounds.end_offset`` is :data:`UNKNOWN_END` and where the batches end is not
        checked. ``max_timestamp_ms``: the metadata's ``maxTimestampMs``, which the largest
        batch timestamp must equal (segment selection for timestamp lookups relies on it)."""
        self._max_ts_promise = max_timestamp_ms
        self._ix = indexes
        self._sink = sink
        self._key = bounds.key
        self._ikey = indexes_key
        self._end_known = end_known
        self._framer = SegmentFramer(bounds)
        self._parts: list[bytes] = []  # bytes not fed to the framer yet
        self._have = 0  # their length
        self._next_pos = 0  # segment position after the last batch framed
        self.stopped_at: int | None = None  # where framing stopped, if it did
        self.batches = 0
        self.records = 0
        self.last_offset = _NO_OFFSET
        self.max_timestamp = -1
        self._oi = 0  # next offset-index entry
        self._pending: tuple[OffsetPosition, int] | None = None  # entry matched, batch base
        self._ti = 0  # next time-index entry
        self._txn = TxnChecks(indexes.txns, sink, key=bounds.key, indexes_key=indexes_key)

    def _index_error(self, check: str, message: str) -> None:
        self._sink.error(check, message, self._ikey)

    def _index_warning(self, check: str, message: str) -> None:
        self._sink.warning(check, message, self._ikey)

    # --- framing ---------------------------------------------------------------------------

    def stop(self, position: int, why: str) -> None:
        """Stop framing at ``position`` (an unreadable chunk, a broken batch)."""
        if self.stopped_at is None:
            self.stopped_at = position
            self._sink.info(
                BATCH_FRAMING,
                f"batch and index checks stop at byte {position}: {why}",
                self._key,
            )
        self._parts, self._have = [], 0

    def _report(self, exc: CorruptRecordError) -> None:
        """An error finding for what the framer rejected, by the rule that failed."""
        message = str(exc).removeprefix(f"{self._key}: ")
        self._sink.error(framing_check(exc), message, self._key)

    def _rejected(self, exc: CorruptRecordError) -> None:
        """The framer rejected the bytes at :attr:`_next_pos`: an error, and framing stops."""
        self._report(exc)
        self.stop(self._next_pos, "the batches after a broken one cannot be framed")

    def feed(self, piece: bytes) -> None:
        """The next ``piece`` of the segment. A batch inside the bytes at hand is handed to the
        framer whole (no copy); one that runs on is handed over as its first
        :data:`PEEK_SIZE` bytes (the framer checks the header at once) and then the rest once
        it has arrived, so a batch spanning many chunks is joined once, not once per chunk."""
        if self.stopped_at is not None:
            return
        framer = self._framer
        self._parts.append(piece)
        self._have += len(piece)
        if self._have < framer.need:
            return
        data = self._parts[0] if len(self._parts) == 1 else b"".join(self._parts)
        view = memoryview(data)
        i, end = 0, len(data)
        while True:
            left = end - i
            if framer.cursor != self._next_pos:  # the framer holds the start of a batch
                n = framer.need
                if left < n:
                    break
            else:
                if left < PEEK_SIZE:
                    break
                total = LOG_OVERHEAD + PEEK.unpack_from(view, i)[1]  # sizes the feed only
                n = total if PEEK_SIZE <= total <= left else PEEK_SIZE
            try:
                batches = framer.feed(view[i : i + n])
            except CorruptRecordError as exc:
                self._rejected(exc)
                return
            i += n
            for batch in batches:
                self._next_pos = batch.position + batch.size_in_bytes
                self._batch(batch)
        tail = bytes(view[i:]) if i < end else b""
        self._parts = [tail] if tail else []
        self._have = len(tail)

    # --- per batch -------------------------------------------------------------------------

    def _batch(self, batch: RecordBatch) -> None:
        """A batch the framer accepted (its offsets and leader epoch are checked)."""
        sink, key = self._sink, self._key
        self.batches += 1
        where = f"batch at byte {batch.position} (offsets {batch.base_offset}..{batch.last_offset})"
        self._check_offset_index(batch)
        self._check_time_index(batch)
        crc_ok = True
        try:
            batch.ensure_valid()
        except CrcMismatchError as exc:
            crc_ok = False
            sink.error(BATCH_CRC, str(exc), key)
        if crc_ok:
            self._decode(batch, where)
        else:
            self._txn.distrust()  # its attributes and producer id are not to be trusted
        self.last_offset = batch.last_offset
        self.max_timestamp = max(self.max_timestamp, batch.max_timestamp)

    def _decode(self, batch: RecordBatch, where: str) -> None:
        try:
            records = batch.records(verify_crc=False)
            self.records += len(records)
            if batch.is_control and batch.records_count > 0:
                kind = control_type(records[0].key)
            else:
                kind = None
        except GatewayError as exc:  # CodecError, CorruptRecordError, unknown codec ...
            self._sink.error(BATCH_DECODE, f"{where}: {type(exc).__name__}: {exc}", self._key)
            kind = None
            self._txn.distrust()
        self._txn.batch(batch, kind, where)

    # --- offset index ----------------------------------------------------------------------

    def _finish_pending(self, run_last: int) -> None:
        if self._pending is None:
            return
        (offset, position), base_at = self._pending
        self._pending = None
        if not base_at <= offset <= run_last:
            self._index_warning(
                OFFSET_INDEX,
                f"offset index entry ({offset}, byte {position}): the batches from byte "
                f"{position} up to the next entry hold offsets {base_at}..{run_last}; Kafka "
                "would index one of those (reads stay correct)",
            )

    def _check_offset_index(self, batch: RecordBatch) -> None:
        entries = self._ix.offset
        while self._oi < len(entries) and entries[self._oi].position <= batch.position:
            offset, position = entries[self._oi]
            self._oi += 1
            if position < batch.position:
                self._index_error(
                    OFFSET_INDEX,
                    f"offset index entry ({offset}, byte {position}) points inside a batch, "
                    "not at a batch boundary: fetches through it frame garbage",
                )
                continue
            self._finish_pending(self.last_offset)
            if offset <= self.last_offset:
                self._index_error(
                    OFFSET_INDEX,
                    f"offset index entry ({offset}, byte {position}): the batches before byte "
                    f"{position} already reach offset {self.last_offset}, so a fetch of offset "
                    f"{offset} would start after it and skip records",
                )
            self._pending = (OffsetPosition(offset, position), batch.base_offset)

    # --- time index ------------------------------------------------------------------------

    def _check_time_index(self, batch: RecordBatch) -> None:
        entries = self._ix.time
        while self._ti < len(entries) and entries[self._ti].offset <= batch.last_offset:
            ts, offset = entries[self._ti]
            self._ti += 1
            if offset < batch.base_offset:
                self._index_error(
                    TIME_INDEX,
                    f"time index entry ({ts}, offset {offset}): no batch holds offset {offset}",
                )
                continue
            before = self.max_timestamp
            through = max(before, batch.max_timestamp)
            if ts < before:
                self._index_error(
                    TIME_INDEX,
                    f"time index entry ({ts}, offset {offset}): batches before offset "
                    f"{batch.base_offset} already reach timestamp {before}, so a lookup of a "
                    f"timestamp in ({ts}, {before}] would start too late and skip records",
                )
            elif batch.max_timestamp != ts:
                # Kafka indexes (maxTimestampSoFar, offset of that maximum): the batch holding
                # the entry's offset carries its timestamp. Reads refuse any other entry
                # (gateway.read.timesearch), so this is an error, not a style note.
                self._index_error(
                    TIME_INDEX,
                    f"time index entry ({ts}, offset {offset}): the batch holding that offset "
                    f"carries timestamp {batch.max_timestamp} (the largest up to it is "
                    f"{through}); timestamp lookups through this entry fail",
                )

    # --- end -------------------------------------------------------------------------------

    def finish(self) -> None:
        """Every byte of the segment has been fed (or framing stopped): the framer's end
        checks (no truncated tail, the batches end at ``endOffset``), then the index entries
        no batch reached."""
        if self.stopped_at is not None:
            return  # entries past the stop are not checked (the info finding says so)
        framer = self._framer
        try:
            if self._parts:  # fewer bytes than the next batch needs: a cut-off tail
                framer.feed(b"".join(self._parts))
                self._parts, self._have = [], 0
            if self._end_known or framer.cursor != self._next_pos or not framer.at_end:
                framer.finish()
        except CorruptRecordError as exc:
            if framer.cursor != self._next_pos or not framer.at_end:
                self._rejected(exc)  # a truncated tail: entries into it are not checked
                return
            self._report(exc)  # the batches end before endOffset
        self._finish_pending(self.last_offset)
        promise = self._max_ts_promise
        if promise is not None and self.max_timestamp >= 0 and promise != self.max_timestamp:
            self._sink.error(
                MANIFEST,
                f"maxTimestampMs is {promise}, but the segment's largest batch timestamp is "
                f"{self.max_timestamp}: timestamp lookups would pick the wrong segment",
                self._key,
            )
        for offset, position in self._ix.offset[self._oi :]:
            self._index_error(
                OFFSET_INDEX,
                f"offset index entry ({offset}, byte {position}) points at or past the end of "
                f"the log's last batch (byte {self._next_pos})",
            )
        for ts, offset in self._ix.time[self._ti :]:
            self._index_error(
                TIME_INDEX,
                f"time index entry ({ts}, offset {offset}) is past the segment's last offset "
                f"{self.last_offset}",
            )
        self._txn.finish(self.last_offset)
