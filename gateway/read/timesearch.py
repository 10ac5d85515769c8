"""The record a timestamp lookup answers with, found in one segment's batches, checked against
the time index that sent the search there (``remote-read-semantics.md`` §12.2 step 4).

The time index floor ``(T', O')`` of the wanted timestamp ``T`` says: up to the batch holding
``O'``, the largest timestamp is ``T'`` (Kafka appends ``(maxTimestampSoFar, offset)`` whenever
the maximum grows). The search reads from the offset index's position for ``O'`` onwards and
answers with the first record whose timestamp is at least ``T`` at or after ``start``. A damaged
time index could send it past the answer, so while it reads it checks what the entry claims:
no batch before ``O'``'s batch carries a timestamp above ``T'``, and that batch carries ``T'``
exactly.
Reading the whole segment without a hit while its metadata promises a timestamp at or above
``T`` is also corruption (of the manifest's ``maxTimestampMs`` or of the index).
"""

from __future__ import annotations

from typing import NamedTuple

from gateway.errors import CorruptIndexError
from gateway.kafka.batch import TIMESTAMP_TYPE_MASK, RecordBatch
from gateway.kafka.time_index import NO_TIMESTAMP, TimestampOffset


class TimestampHit(NamedTuple):
    offset: int
    timestamp: int
    leader_epoch: int | None


class TimestampSearch:
    """Feed the batches read from the search's start position, in order."""

    __slots__ = ("_entry", "_from_start", "_key", "_max_seen", "_start", "_timestamp")

    def __init__(
        self,
        key: str,
        timestamp: int,
        start: int,
        entry: TimestampOffset,
        *,
        from_segment_start: bool,
    ) -> None:
        """``entry``: the time index floor of ``timestamp``; ``start``: the lowest offset an
        answer may have; ``from_segment_start``: the reads begin at the segment's byte 0."""
        self._key = key
        self._timestamp = timestamp
        self._start = start
        self._entry = entry
        self._from_start = from_segment_start
        self._max_seen = NO_TIMESTAMP

    def add(self, batch: RecordBatch) -> TimestampHit | None:
        """The answer, if it is in ``batch``. Its CRC is checked first: ``maxTimestamp`` decides
        whether the batch is passed over."""
        batch.ensure_valid()
        entry = self._entry
        if entry.timestamp != NO_TIMESTAMP and batch.base_offset <= entry.offset:
            claimed_max = entry.timestamp
            holds = batch.last_offset >= entry.offset
            if batch.max_timestamp > claimed_max or (holds and batch.max_timestamp != claimed_max):
                raise CorruptIndexError(
                    f"{self._key}: the time index entry {tuple(entry)} says the largest "
                    f"timestamp up to offset {entry.offset} is {claimed_max}, held by its batch, "
                    f"but the batch at offset {batch.base_offset} carries {batch.max_timestamp}"
                )
        self._max_seen = max(self._max_seen, batch.max_timestamp)
        timestamp, start = self._timestamp, self._start
        if batch.max_timestamp < timestamp or batch.last_offset < start:
            return None
        log_append = bool(batch.attributes & TIMESTAMP_TYPE_MASK)
        for record in batch.records(verify_crc=False):
            ts = batch.max_timestamp if log_append else record.timestamp
            if ts >= timestamp and record.offset >= start:
                epoch = batch.partition_leader_epoch
                return TimestampHit(record.offset, ts, epoch if epoch >= 0 else None)
        return None

    def finish(self, segment_max_timestamp: int, start_offset: int) -> None:
        """The segment was read to its end without a hit; ``segment_max_timestamp`` is what its
        metadata promises. The segment's largest timestamp is now known: the largest seen, or
        the time index entry's for the records before the read (checked above), unless the
        read began past the segment's start with no entry to vouch for what it skipped. When
        every offset of the segment may answer, the metadata's promise must match it."""
        entry = self._entry
        if not self._from_start and entry.timestamp == NO_TIMESTAMP:
            return
        largest = max(self._max_seen, entry.timestamp)
        if self._start <= start_offset and segment_max_timestamp >= self._timestamp > largest:
            raise CorruptIndexError(
                f"{self._key}: the segment metadata promises a timestamp of "
                f"{segment_max_timestamp}, but its largest is {largest}"
            )
