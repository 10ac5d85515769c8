"""Stream a segment's ``.log`` bytes once and check every batch and every index entry.

The bytes arrive as decoded chunks (``feed``), in order; a batch may cross chunk borders, so
the scanner keeps the unframed tail (at most one batch plus one chunk in memory, never the
segment). Per batch: framing (``kafka-formats.md`` §7, but strict: a tiered segment is trimmed,
so a short tail is corruption), the CRC-32C, the producer codec and every record
(:meth:`RecordBatch.records`), offsets strictly increasing, the leader epoch against the
segment's checkpoint. Index entries are checked against the batches as they stream by, each
index walked once in step with the log:

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
* transaction index (§11): each aborted transaction's last offset is its ABORT marker, which is
  in this segment: a control batch of the same producer whose record is an ABORT (error
  otherwise).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from gateway.errors import CrcMismatchError, GatewayError
from gateway.kafka.batch import (
    LOG_OVERHEAD,
    MAGIC_V2,
    MIN_BATCH_LENGTH_V2,
    PEEK,
    PEEK_SIZE,
    RecordBatch,
)
from gateway.kafka.control import ControlRecordType, control_type
from gateway.scrub.findings import (
    BATCH_CRC,
    BATCH_DECODE,
    BATCH_FRAMING,
    LEADER_EPOCH,
    OFFSET_INDEX,
    OFFSETS,
    TIME_INDEX,
    TXN_INDEX,
    FindingSink,
)
from indexcache import AbortedTxn, LeaderEpochCache, OffsetPosition, TimestampOffset

_NO_OFFSET: Final = -(1 << 63)


@dataclass(frozen=True, slots=True)
class IndexView:
    """The decoded indexes the scan checks the log against (small: entries only)."""

    offset: Sequence[OffsetPosition] = ()
    time: Sequence[TimestampOffset] = ()
    txns: Sequence[AbortedTxn] = ()
    epochs: LeaderEpochCache | None = None


class LogScanner:
    """Feed it the segment's original bytes in order, then call :meth:`finish`."""

    def __init__(
        self,
        indexes: IndexView,
        sink: FindingSink,
        *,
        size: int,
        log_key: str,
        indexes_key: str,
    ) -> None:
        """``size``: the segment's original size (no batch can reach past it)."""
        self._ix = indexes
        self._sink = sink
        self._key = log_key
        self._ikey = indexes_key
        self._size = size
        self._parts: list[bytes] = []  # unframed bytes, joined when a batch is complete
        self._have = 0  # their length
        self._need = PEEK_SIZE  # bytes needed before framing can go on
        self._tail_pos = 0  # segment position of the first unframed byte
        self.stopped_at: int | None = None  # where framing stopped, if it did
        self.batches = 0
        self.records = 0
        self.first_offset: int | None = None
        self.last_offset = _NO_OFFSET
        self.max_timestamp = -1
        self._oi = 0  # next offset-index entry
        self._pending: tuple[OffsetPosition, int] | None = None  # entry matched, batch base
        self._ti = 0  # next time-index entry
        self._txns = sorted(indexes.txns, key=lambda t: t.last_offset)
        self._xi = 0

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

    def feed(self, piece: bytes) -> None:
        """The next ``piece`` of the segment. Pieces are only joined once the pending batch
        is complete, so a batch spanning many chunks is copied once, not once per chunk."""
        if self.stopped_at is not None:
            return
        self._parts.append(piece)
        self._have += len(piece)
        if self._have < self._need:
            return
        data = self._parts[0] if len(self._parts) == 1 else b"".join(self._parts)
        view = memoryview(data)
        i, end = 0, len(data)
        self._need = PEEK_SIZE
        while end - i >= PEEK_SIZE:
            pos = self._tail_pos + i
            _base, length, _epoch, magic = PEEK.unpack_from(view, i)
            total = LOG_OVERHEAD + length
            if magic != MAGIC_V2 or length < MIN_BATCH_LENGTH_V2 or pos + total > self._size:
                what = (
                    f"magic {magic}"
                    if magic != MAGIC_V2
                    else f"batch length {length}"
                    + ("" if pos + total <= self._size else f" (past the {self._size}-byte end)")
                )
                self._sink.error(
                    BATCH_FRAMING,
                    f"record batch at byte {pos} has {what}: not a v2 batch (a corrupt length "
                    "or a misaligned position)",
                    self._key,
                )
                self.stop(pos, "the batches after a broken one cannot be framed")
                return
            if i + total > end:
                self._need = total
                break
            self._batch(RecordBatch(view[i : i + total], pos))
            i += total
        tail = bytes(view[i:])
        self._parts = [tail] if tail else []
        self._have = len(tail)
        self._tail_pos += i

    # --- per batch -------------------------------------------------------------------------

    def _batch(self, batch: RecordBatch) -> None:
        sink, key = self._sink, self._key
        self.batches += 1
        where = f"batch at byte {batch.position} (offsets {batch.base_offset}..{batch.last_offset})"
        if batch.last_offset < batch.base_offset or batch.base_offset <= self.last_offset:
            sink.error(
                OFFSETS,
                f"{where} does not follow the previous batch's last offset {self.last_offset}: "
                "offsets must strictly increase",
                key,
            )
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
        if self._ix.epochs is not None and len(self._ix.epochs):
            expected = self._ix.epochs.epoch_for_offset(batch.base_offset)
            if expected is not None and batch.partition_leader_epoch != expected:
                sink.warning(
                    LEADER_EPOCH,
                    f"{where} carries leader epoch {batch.partition_leader_epoch}, the "
                    f"segment's checkpoint gives epoch {expected} for its base offset",
                    key,
                )
        if self.first_offset is None:
            self.first_offset = batch.base_offset
        self.last_offset = max(self.last_offset, batch.last_offset)
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
        self._check_txns(batch, kind)

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
            elif ts != through:
                self._index_warning(
                    TIME_INDEX,
                    f"time index entry ({ts}, offset {offset}): the largest timestamp up to "
                    f"that offset is {through}; Kafka would record that (reads stay correct)",
                )

    # --- transaction index -----------------------------------------------------------------

    def _check_txns(self, batch: RecordBatch, kind: ControlRecordType | None) -> None:
        txns = self._txns
        while self._xi < len(txns) and txns[self._xi].last_offset <= batch.last_offset:
            txn = txns[self._xi]
            self._xi += 1
            if txn.last_offset < batch.base_offset:
                self._index_error(TXN_INDEX, f"aborted transaction {txn}: no batch holds its end")
            elif not (
                batch.is_control
                and batch.producer_id == txn.producer_id
                and kind is ControlRecordType.ABORT
            ):
                self._index_error(
                    TXN_INDEX,
                    f"aborted transaction {txn}: the batch at offset {txn.last_offset} is not "
                    f"an ABORT marker of producer {txn.producer_id} (read_committed fetches "
                    "would drop the wrong records)",
                )

    # --- end -------------------------------------------------------------------------------

    def finish(self) -> None:
        """Every byte of the segment has been fed (or framing stopped)."""
        sink, key = self._sink, self._key
        if self.stopped_at is not None:
            return  # entries past the stop are not checked (the info finding says so)
        if self._have:
            sink.error(
                BATCH_FRAMING,
                f"{self._have} bytes at byte {self._tail_pos} do not form a whole batch: "
                "a truncated segment (Kafka trims segments on roll, so nothing should follow "
                "the last batch)",
                key,
            )
        self._finish_pending(self.last_offset)
        for offset, position in self._ix.offset[self._oi :]:
            self._index_error(
                OFFSET_INDEX,
                f"offset index entry ({offset}, byte {position}) points at or past the end of "
                f"the log ({self._size} bytes)",
            )
        for ts, offset in self._ix.time[self._ti :]:
            self._index_error(
                TIME_INDEX,
                f"time index entry ({ts}, offset {offset}) is past the segment's last offset "
                f"{self.last_offset}",
            )
        for txn in self._txns[self._xi :]:
            self._index_error(
                TXN_INDEX,
                f"aborted transaction {txn}: its marker offset is past the segment's last "
                f"offset {self.last_offset}",
            )


def check_index_order(indexes: IndexView, sink: FindingSink, key: str) -> None:
    """Entry order, which the streaming checks rely on (Kafka's appends refuse anything else)."""
    offsets, times = indexes.offset, indexes.time
    for i in range(1, len(offsets)):
        prev, cur = offsets[i - 1], offsets[i]
        if cur.offset <= prev.offset or cur.position <= prev.position:
            sink.error(
                OFFSET_INDEX,
                f"offset index entries {prev} then {cur}: offsets and positions must increase",
                key,
            )
    for i in range(1, len(times)):
        tprev, tcur = times[i - 1], times[i]
        if tcur.timestamp < tprev.timestamp or tcur.offset < tprev.offset:
            sink.error(
                TIME_INDEX,
                f"time index entries {tprev} then {tcur}: timestamps and offsets must not decrease",
                key,
            )
    for txn in indexes.txns:
        if txn.first_offset > txn.last_offset:
            sink.error(TXN_INDEX, f"aborted transaction {txn}: first offset > last offset", key)
