"""Fetched batches -> the records a Kafka consumer would see (``Fetcher`` / ``CompletedFetch``).

* records below the fetch offset are dropped (a batch may start before it);
* control batches never yield records;
* read_committed: the aborted transactions are consumed in first-offset order up to each
  batch's last offset, adding their producer ids to the aborted set; a batch that holds an
  ABORT marker removes its producer id; a transactional batch of an aborted producer is
  skipped. This is the consumer's algorithm, so the result equals what a Java consumer reads.
* LOG_APPEND_TIME batches give every record the batch's max timestamp.

The records are kept batch by batch as columns (:class:`BatchRecords`), so a renderer works in
bulk with no object per record; :class:`DecodedRecords` still reads as a sequence of
:class:`FetchedRecord`, each built on access.

The CRC of every batch is checked once, by the fetch that framed it (``Fetcher`` in
:mod:`gateway.service.fetch` checks each batch it returns), and not again here
(``tests/unit/service/test_crc_once.py`` holds both to it).

Pure CPU work: call it from a worker thread.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

from gateway.kafka.batch import TIMESTAMP_TYPE_MASK, iter_batches
from gateway.kafka.records import Header, Record, RecordLike
from gateway.read.txn import AbortedFilter
from gateway.service.types import (
    AbortedTransaction,
    FetchedBatches,
    FetchedRecord,
    IsolationLevel,
)

_OFFSET = operator.attrgetter("offset")
_TIMESTAMP = operator.attrgetter("timestamp")
_KEY = operator.attrgetter("key")
_VALUE = operator.attrgetter("value")
_HEADERS = operator.attrgetter("headers")


@dataclass(frozen=True, slots=True)
class BatchRecords:
    """Data records of one batch as columns: offsets strictly increasing, the timestamps the
    consumer sees (a LOG_APPEND_TIME batch: its max timestamp for every record), keys, values
    and headers (None when no record has any).

    Columns, not the decoder's record objects: those are dropped batch by batch, so a page
    holds no per-record object the garbage collector must walk (that walk cost as much as
    decoding)."""

    offsets: Sequence[int]
    timestamps: Sequence[int]
    keys: Sequence[bytes | None]
    values: Sequence[bytes | None]
    headers: Sequence[list[Header]] | None
    log_append_time: bool
    leader_epoch: int | None

    @classmethod
    def of(
        cls,
        records: Sequence[RecordLike],
        offsets: list[int],
        max_timestamp: int | None,
        leader_epoch: int | None,
    ) -> BatchRecords:
        """From decoded records; ``max_timestamp`` for a LOG_APPEND_TIME batch."""
        headers = list(map(_HEADERS, records))
        return cls(
            offsets,
            list(map(_TIMESTAMP, records))
            if max_timestamp is None
            else [max_timestamp] * len(offsets),
            list(map(_KEY, records)),
            list(map(_VALUE, records)),
            headers if any(headers) else None,
            max_timestamp is not None,
            leader_epoch,
        )

    def fetched(self, index: int) -> FetchedRecord:
        offset, stamp = self.offsets[index], self.timestamps[index]
        headers = [] if self.headers is None else self.headers[index]
        record = Record(offset, stamp, self.keys[index], self.values[index], headers)
        return FetchedRecord(record, offset, stamp, self.log_append_time, self.leader_epoch)


class DecodedRecords(Sequence[FetchedRecord]):
    """The records of a fetch, batch by batch (:attr:`groups`)."""

    __slots__ = ("_ends", "groups")

    def __init__(self, groups: Sequence[BatchRecords]) -> None:
        self.groups = tuple(groups)
        self._ends = list(itertools.accumulate(len(g.offsets) for g in self.groups))

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    @overload
    def __getitem__(self, index: int) -> FetchedRecord: ...
    @overload
    def __getitem__(self, index: slice) -> list[FetchedRecord]: ...
    def __getitem__(self, index: int | slice) -> FetchedRecord | list[FetchedRecord]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        at = bisect.bisect_right(self._ends, index)
        return self.groups[at].fetched(index - (self._ends[at - 1] if at else 0))

    def __iter__(self) -> Iterator[FetchedRecord]:
        for group in self.groups:
            for index in range(len(group.offsets)):
                yield group.fetched(index)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"DecodedRecords({len(self)} records in {len(self.groups)} batches)"


def _from(records: Sequence[RecordLike], position: int) -> tuple[Sequence[RecordLike], list[int]]:
    """The records at or after ``position`` as the consumer takes them (each one's offset at
    least one past the one before), and their offsets."""
    offsets = list(map(_OFFSET, records))
    if offsets and offsets[0] >= position and all(map(operator.lt, offsets, offsets[1:])):
        return records, offsets  # the usual case: taken whole
    kept, kept_offsets = [], []
    for record, offset in zip(records, offsets, strict=True):
        if offset >= position:
            kept.append(record)
            kept_offsets.append(offset)
            position = offset + 1
    return kept, kept_offsets


def decode_records(
    batches: tuple[FetchedBatches, ...],
    offset: int,
    isolation: IsolationLevel,
    aborted: tuple[AbortedTransaction, ...] | None,
) -> DecodedRecords:
    """The data records of ``batches`` from ``offset`` on; their CRCs were checked when the
    fetch framed them."""
    committed = AbortedFilter(aborted or ()) if isolation is IsolationLevel.READ_COMMITTED else None
    groups: list[BatchRecords] = []
    position = offset  # the consumer's next offset: overlapping uploads never repeat a record
    for part in batches:
        for batch in iter_batches(part.data):
            if committed is not None and not committed.accepts(batch):
                continue
            if batch.is_control or batch.last_offset < position:
                continue
            records, offsets = _from(batch.records(verify_crc=False), position)
            if not offsets:
                continue
            position = offsets[-1] + 1
            epoch = batch.partition_leader_epoch
            log_append = bool(batch.attributes & TIMESTAMP_TYPE_MASK)
            stamp = batch.max_timestamp if log_append else None
            groups.append(BatchRecords.of(records, offsets, stamp, epoch if epoch >= 0 else None))
    return DecodedRecords(groups)
