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

from gateway.kafka.batch import TIMESTAMP_TYPE_MASK, iter_batches
from gateway.read.txn import AbortedFilter
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
