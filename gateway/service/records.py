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
:class:`FetchedRecord`, each built on access. Faster still, :class:`ColumnRecords` holds a whole
fetch as the compiled loop's arrays (:mod:`gateway.kafka.kernel`), from which the API writes
JSON in one compiled pass; it falls back to the per-batch path for anything the loop does not
take.

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
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from gateway.kafka.batch import TIMESTAMP_TYPE_MASK, RecordBatch, iter_batches
from gateway.kafka.ints import INT64_MAX
from gateway.kafka.records import Header, Record, RecordLike
from gateway.read.txn import AbortedFilter
from gateway.service.types import (
    AbortedTransaction,
    FetchedBatches,
    FetchedRecord,
    IsolationLevel,
)

if TYPE_CHECKING:
    from gateway.kafka import kernel

Array = Any  # numpy arrays

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


class ColumnRecords(Sequence[FetchedRecord]):
    """The records of a fetch as the compiled loop's columns (:class:`kernel.Decoded`) and a
    row per batch: what :mod:`gateway.api.jsonkernel` writes text from with no object per
    record. Read as a sequence, or by :attr:`groups`, each record is built on access."""

    __slots__ = ("_groups", "columns", "epochs", "log_append")

    def __init__(self, columns: kernel.Decoded, log_append: Array, epochs: Array) -> None:
        self.columns = columns
        self.log_append = log_append  # int64 per batch: 1 for LOG_APPEND_TIME
        self.epochs = epochs  # int32 per batch, negative: none
        self._groups: DecodedRecords | None = None

    @classmethod
    def decode(cls, batches: Sequence[RecordBatch], offset: int) -> ColumnRecords | None:
        """The records at or after ``offset`` of ``batches`` (whole batches a consumer takes,
        in order), or None when the record decoders must say: the loop objects, a header key
        is not UTF-8 (Java replaces it), or the offsets do not strictly increase inside their
        batches' ranges (a consumer skips records; the per-batch path does as it does)."""
        from gateway.kafka import kernel  # noqa: PLC0415 - numba loads only when used

        held = kernel.Sections()
        for batch in batches:
            held.add(batch)
        decoded = held.decode(offset, INT64_MAX, True) if held.batches else None
        if decoded is None:
            return None
        last = np.array([b.last_offset for b in held.batches], np.int64)
        offsets = decoded.offsets
        if offsets.shape[0] and (
            np.any(offsets[1:] <= offsets[:-1]) or np.any(offsets > last[decoded.batch_of])
        ):
            return None
        keys = decoded.hkey_data
        if keys.shape[0] and np.any(keys >= 0x80) and not _utf8_keys(decoded):
            return None
        return cls(decoded, np.ascontiguousarray(held.meta[:, 6]), held.epochs)

    @property
    def groups(self) -> tuple[BatchRecords, ...]:
        """The records batch by batch, built once on first use."""
        return self._records().groups

    def _records(self) -> DecodedRecords:
        if self._groups is None:
            self._groups = DecodedRecords(self._build())
        return self._groups

    def _build(self) -> list[BatchRecords]:
        d = self.columns
        offsets, stamps = d.offsets.tolist(), (d.timestamps_us // 1000).tolist()
        keys = _binary(d.key_offsets, d.key_valid, d.key_data)
        values = _binary(d.value_offsets, d.value_valid, d.value_data)
        hkeys = [k.decode() for k in _slices(d.hkey_offsets, d.hkey_data)]
        hvalues = _binary(d.hvalue_offsets, d.hvalue_valid, d.hvalue_data)
        hoff = d.header_offsets.tolist()
        headers = [list(zip(hkeys[hoff[i] : hoff[i + 1]], hvalues[hoff[i] : hoff[i + 1]],
                            strict=True)) for i in range(len(offsets))]  # fmt: skip
        cuts = np.flatnonzero(np.diff(d.batch_of)) + 1
        groups = []
        for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), len(offsets)], strict=True):
            if lo == hi:
                continue
            b = int(d.batch_of[lo])
            epoch = int(self.epochs[b])
            rows = headers[lo:hi]
            groups.append(
                BatchRecords(
                    offsets[lo:hi],
                    stamps[lo:hi],
                    keys[lo:hi],
                    values[lo:hi],
                    rows if any(rows) else None,
                    bool(self.log_append[b]),
                    epoch if epoch >= 0 else None,
                )
            )
        return groups

    def __len__(self) -> int:
        return int(self.columns.offsets.shape[0])

    @overload
    def __getitem__(self, index: int) -> FetchedRecord: ...
    @overload
    def __getitem__(self, index: slice) -> list[FetchedRecord]: ...
    def __getitem__(self, index: int | slice) -> FetchedRecord | list[FetchedRecord]:
        return self._records()[index]

    def __iter__(self) -> Iterator[FetchedRecord]:
        return iter(self._records())

    def __eq__(self, other: object) -> bool:
        return self._records() == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ColumnRecords({len(self)} records)"


def _slices(offsets: Array, data: Array) -> list[bytes]:
    """A binary column as bytes."""
    blob, ends = data.tobytes(), offsets.tolist()
    return [blob[ends[i] : ends[i + 1]] for i in range(len(ends) - 1)]


def _binary(offsets: Array, valid: Array, data: Array) -> list[bytes | None]:
    """A nullable binary column as bytes (None where not ``valid``)."""
    blob, ends = data.tobytes(), offsets.tolist()
    return [blob[ends[i] : ends[i + 1]] if ok else None for i, ok in enumerate(valid.tolist())]


def _utf8_keys(d: kernel.Decoded) -> bool:
    """Whether every header key is strict UTF-8."""
    try:
        for key in _slices(d.hkey_offsets, d.hkey_data):
            key.decode()
    except UnicodeDecodeError:
        return False
    return True


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


def consumed(
    batches: tuple[FetchedBatches, ...],
    offset: int,
    isolation: IsolationLevel,
    aborted: tuple[AbortedTransaction, ...] | None,
) -> Iterator[RecordBatch]:
    """The batches whose records a consumer fetching from ``offset`` may take, in order: no
    control batch, none that ends before ``offset``, for read_committed none of an aborted
    transaction."""
    committed = AbortedFilter(aborted or ()) if isolation is IsolationLevel.READ_COMMITTED else None
    for part in batches:
        for batch in iter_batches(part.data):
            if committed is not None and not committed.accepts(batch):
                continue
            if batch.is_control or batch.last_offset < offset:
                continue
            yield batch


def decode_records(
    batches: tuple[FetchedBatches, ...],
    offset: int,
    isolation: IsolationLevel,
    aborted: tuple[AbortedTransaction, ...] | None,
    compiled: bool = True,
) -> DecodedRecords | ColumnRecords:
    """The data records of ``batches`` from ``offset`` on; their CRCs were checked when the
    fetch framed them. With ``compiled``, by the compiled loop as columns when it takes them
    all; else (and otherwise) batch by batch by the record decoders (which give every precise
    error)."""
    chosen = list(consumed(batches, offset, isolation, aborted))
    fast = ColumnRecords.decode(chosen, offset) if compiled else None
    if fast is not None:
        return fast
    groups: list[BatchRecords] = []
    position = offset  # the consumer's next offset: overlapping uploads never repeat a record
    for batch in chosen:
        if batch.last_offset < position:
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
