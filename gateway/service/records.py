"""Fetched batches -> the records a Kafka consumer would see (``Fetcher`` / ``CompletedFetch``).

* records below the fetch offset are dropped (a batch may start before it);
* control batches never yield records;
* read_committed: the aborted transactions are consumed in first-offset order up to each
  batch's last offset, adding their producer ids to the aborted set; a batch that holds an
  ABORT marker removes its producer id; a transactional batch of an aborted producer is
  skipped. This is the consumer's algorithm, so the result equals what a Java consumer reads.
* LOG_APPEND_TIME batches give every record the batch's max timestamp (the decoder does it).

Pure CPU work: call it from a worker thread.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from gateway.kafka.batch import TIMESTAMP_TYPE_MASK, RecordBatch, iter_batches
from gateway.kafka.control import ControlRecordType, control_type
from gateway.service.types import (
    AbortedTransaction,
    FetchedBatches,
    FetchedRecord,
    IsolationLevel,
)


class AbortedFilter:
    """The consumer's read_committed batch filter, batch by batch in offset order.

    Shared by the service (:func:`decode_records`) and the Spark reader, so both drop exactly
    what a Java consumer drops. ``accepts`` is False for control batches (an ABORT marker also
    ends its producer's aborted transaction) and for transactional batches of a producer whose
    aborted transaction has started at or before the batch's last offset.
    """

    __slots__ = ("_aborted_pids", "_queue")

    def __init__(self, aborted: Iterable[AbortedTransaction]) -> None:
        self._queue = [(t.first_offset, t.producer_id) for t in aborted]
        heapq.heapify(self._queue)
        self._aborted_pids: set[int] = set()

    def accepts(self, batch: RecordBatch) -> bool:
        if batch.producer_id < 0:
            return not batch.is_control
        queue = self._queue
        while queue and queue[0][0] <= batch.last_offset:
            self._aborted_pids.add(heapq.heappop(queue)[1])
        if batch.is_control:
            records = batch.records()
            if records and control_type(records[0].key) is ControlRecordType.ABORT:
                self._aborted_pids.discard(batch.producer_id)
            return False
        return not (batch.is_transactional and batch.producer_id in self._aborted_pids)


def decode_records(
    batches: tuple[FetchedBatches, ...],
    offset: int,
    isolation: IsolationLevel,
    aborted: tuple[AbortedTransaction, ...] | None,
) -> list[FetchedRecord]:
    committed = AbortedFilter(aborted or ()) if isolation is IsolationLevel.READ_COMMITTED else None
    out: list[FetchedRecord] = []
    position = offset  # the consumer's next offset: overlapping uploads never repeat a record
    for part in batches:
        for batch in iter_batches(part.data):
            if committed is not None and not committed.accepts(batch):
                continue
            if batch.is_control or batch.last_offset < position:
                continue
            epoch = batch.partition_leader_epoch
            log_append = bool(batch.attributes & TIMESTAMP_TYPE_MASK)
            for record in batch.records():
                if record.offset < position:
                    continue
                position = record.offset + 1
                out.append(
                    FetchedRecord(
                        record,
                        record.offset,
                        batch.max_timestamp if log_append else record.timestamp,
                        log_append,
                        epoch if epoch >= 0 else None,
                    )
                )
    return out
