"""One broker partition folder (``<topic>-<partition>/``), written segment by segment.

Each segment is written by its own :class:`~gateway.kafka.writer.SegmentWriter` when the log
rolls, but the state a broker keeps per partition, not per segment, is carried across rolls as
``UnifiedLog`` does: the leader-epoch cache (``LeaderEpochFileCache``: the folder's
``leader-epoch-checkpoint`` lists every epoch, and the tiering writer cuts each segment's
lineage from it) and the producer state (``ProducerStateManager``: a transaction left open
across a roll is still found, and indexed as aborted, by the segment holding its marker).

Timestamps are synthetic and deterministic: every batch (markers included) is one second after
the previous one, and record ``i`` of a batch is ``i`` milliseconds after the batch's first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from gateway.kafka.builder import RecordInput, build_batch, end_txn_marker
from gateway.kafka.codecs import Codec
from gateway.kafka.control import ControlRecordType
from gateway.kafka.writer import SegmentWriter

BATCH_INTERVAL_MS: Final = 1000


@dataclass(slots=True)
class Producer:
    """An idempotent (and maybe transactional) producer: its id, epoch and next sequence."""

    producer_id: int
    epoch: int = 0
    sequence: int = 0
    open_records: int = 0  # records in its open transaction


@dataclass(slots=True)
class PartitionStats:
    """What was appended, for the bucket's summary."""

    records: int = 0  # data records, aborted ones included
    control_records: int = 0
    aborted_records: int = 0
    segments: int = 0
    first_timestamp: int = -1
    last_timestamp: int = -1  # the largest batch max timestamp
    epochs: list[int] = field(default_factory=list)


class PartitionLog:
    """Appends batches at the log end of one partition folder; rolls segments on demand."""

    def __init__(self, directory: Path, *, base_timestamp: int, epoch: int = 0) -> None:
        self.directory = directory
        self.epoch = epoch
        self.timestamp = base_timestamp
        self.stats = PartitionStats()
        self._writer = SegmentWriter(base_offset=0)

    @property
    def next_offset(self) -> int:
        return self._writer.next_offset

    def _append(self, batch: bytes, max_timestamp: int) -> None:
        self._writer.append(batch)
        if self.stats.first_timestamp < 0:
            self.stats.first_timestamp = self.timestamp
        self.stats.last_timestamp = max(self.stats.last_timestamp, max_timestamp)
        if not self.stats.epochs or self.stats.epochs[-1] != self.epoch:
            self.stats.epochs.append(self.epoch)
        self.timestamp += BATCH_INTERVAL_MS

    def append(
        self,
        records: Sequence[RecordInput],
        *,
        codec: Codec = Codec.NONE,
        log_append_time: bool = False,
        producer: Producer | None = None,
        transactional: bool = False,
    ) -> None:
        """One batch of ``records`` (their timestamps are assigned here) at the log end."""
        if transactional and producer is None:
            raise ValueError("a transactional batch needs a producer")
        ts = self.timestamp
        stamped = [dataclasses.replace(r, timestamp=ts + i) for i, r in enumerate(records)]
        append_time = ts + BATCH_INTERVAL_MS // 2 if log_append_time else None
        batch = build_batch(
            self.next_offset,
            stamped,
            codec=codec,
            log_append_time=append_time,
            producer_id=-1 if producer is None else producer.producer_id,
            producer_epoch=-1 if producer is None else producer.epoch,
            base_sequence=-1 if producer is None else producer.sequence,
            transactional=transactional,
            partition_leader_epoch=self.epoch,
        )
        if producer is not None:
            producer.sequence += len(records)
            if transactional:
                producer.open_records += len(records)
        self.stats.records += len(records)
        self._append(batch, append_time if append_time is not None else ts + len(records) - 1)

    def end_transaction(self, producer: Producer, kind: ControlRecordType) -> None:
        """The coordinator's COMMIT or ABORT marker for ``producer``'s open transaction."""
        ts = self.timestamp
        marker = end_txn_marker(
            self.next_offset,
            kind,
            producer_id=producer.producer_id,
            producer_epoch=producer.epoch,
            timestamp=ts,
            partition_leader_epoch=self.epoch,
        )
        if kind is ControlRecordType.ABORT:
            self.stats.aborted_records += producer.open_records
        producer.open_records = 0
        self.stats.control_records += 1
        self._append(marker, ts)

    def roll(self) -> None:
        """Write the active segment's files and start a new segment at the log end."""
        if not self._writer.log:
            return
        previous = self._writer
        previous.write(self.directory)
        self.stats.segments += 1
        # The partition-wide state goes on to the next segment (see the module docstring).
        self._writer = previous.next_segment()

    def close(self) -> PartitionStats:
        """Write the last segment; the folder then holds only rolled segments."""
        self.roll()
        return self.stats
