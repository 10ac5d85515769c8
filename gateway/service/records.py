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

from gateway.kafka.batch import TIMESTAMP_TYPE_MASK, iter_batches
from gateway.kafka.control import ControlRecordType, control_type
from gateway.service.types import (
    AbortedTransaction,
    FetchedBatches,
    FetchedRecord,
    IsolationLevel,
)


def decode_records(
    batches: tuple[FetchedBatches, ...],
    offset: int,
    isolation: IsolationLevel,
    aborted: tuple[AbortedTransaction, ...] | None,
) -> list[FetchedRecord]:
    read_committed = isolation is IsolationLevel.READ_COMMITTED
    queue = [(t.first_offset, t.producer_id) for t in aborted or ()]
    heapq.heapify(queue)
    aborted_pids: set[int] = set()
    out: list[FetchedRecord] = []
    position = offset  # the consumer's next offset: overlapping uploads never repeat a record
    for part in batches:
        for batch in iter_batches(part.data):
            if read_committed and batch.producer_id >= 0:
                while queue and queue[0][0] <= batch.last_offset:
                    aborted_pids.add(heapq.heappop(queue)[1])
                if batch.is_control:
                    records = batch.records()
                    if records and control_type(records[0].key) is ControlRecordType.ABORT:
                        aborted_pids.discard(batch.producer_id)
                    continue
                if batch.is_transactional and batch.producer_id in aborted_pids:
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
