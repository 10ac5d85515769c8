"""Write what a broker writes: v2 batches and the files of one rolled log segment.

Used by the tests, the demo and the tiering writer; not on any read path. Mirrors the append
path of ``org.apache.kafka.storage.internals.log.LogSegment`` (index entries every
``index.interval.bytes``, time-index entries when the max timestamp grows, one forced time-index
entry on roll), ``ProducerStateManager`` (aborted transactions with their last stable offset,
the producer snapshot at the next segment's base offset) and ``LeaderEpochFileCache``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from gateway.kafka.batch import RecordBatch, iter_batches
from gateway.kafka.control import ControlRecordType, EndTransactionMarker, control_type
from gateway.kafka.epoch import LeaderEpochCache, format_leader_epoch_checkpoint
from gateway.kafka.offset_index import encode_offset_index
from gateway.kafka.producer_snapshot import ProducerSnapshotEntry, encode_producer_snapshot
from gateway.kafka.time_index import encode_time_index
from gateway.kafka.txn_index import AbortedTxn, encode_txn_index

DEFAULT_INDEX_INTERVAL_BYTES: Final = 4096


@dataclass(slots=True)
class _ProducerState:
    epoch: int
    last_sequence: int = -1
    last_offset: int = -1
    offset_delta: int = 0
    timestamp: int = -1
    coordinator_epoch: int = -1
    txn_first_offset: int | None = None


@dataclass(frozen=True, slots=True)
class SegmentFiles:
    log: Path
    offset_index: Path
    time_index: Path
    txn_index: Path | None
    leader_epoch_checkpoint: Path
    producer_snapshot: Path


@dataclass(slots=True)
class SegmentWriter:
    """Accumulates appends into one segment, then writes its files as a rolled segment."""

    base_offset: int = 0
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
    epochs: LeaderEpochCache = field(default_factory=LeaderEpochCache)
    log: bytearray = field(default_factory=bytearray)
    _offset_entries: list[tuple[int, int]] = field(default_factory=list)
    _time_entries: list[tuple[int, int]] = field(default_factory=list)
    _aborted: list[AbortedTxn] = field(default_factory=list)
    _producers: dict[int, _ProducerState] = field(default_factory=dict)
    _bytes_since_entry: int = 0
    _max_ts: int = -1
    _max_ts_offset: int = -1
    _next_offset: int | None = None

    @property
    def next_offset(self) -> int:
        return self.base_offset if self._next_offset is None else self._next_offset

    def next_segment(self) -> SegmentWriter:
        """The writer of the segment that follows this one when the log rolls: it starts at
        this one's log end and shares the partition-wide state (leader-epoch cache, producer
        states), as ``UnifiedLog.roll`` keeps them."""
        return SegmentWriter(
            base_offset=self.next_offset,
            index_interval_bytes=self.index_interval_bytes,
            epochs=self.epochs,
            _producers=self._producers,
        )

    def append(self, *batches: bytes) -> None:
        """Append one chunk (one produce request's batches), as ``LogSegment.append``."""
        chunk = b"".join(batches)
        position = len(self.log)
        largest_offset = -1
        for batch in iter_batches(chunk):
            if batch.base_offset < self.next_offset:
                raise ValueError(
                    f"batch base offset {batch.base_offset} is below the log end {self.next_offset}"
                )
            largest_offset = batch.last_offset
            if batch.max_timestamp > self._max_ts:
                self._max_ts, self._max_ts_offset = batch.max_timestamp, batch.last_offset
            if batch.partition_leader_epoch >= 0 and (
                self.epochs.latest_epoch is None
                or batch.partition_leader_epoch > self.epochs.latest_epoch
            ):
                self.epochs.assign(batch.partition_leader_epoch, batch.base_offset)
            self._track_producer(batch)
            self._next_offset = batch.next_offset
        if largest_offset < 0:
            raise ValueError("append needs at least one whole batch")
        if self._bytes_since_entry > self.index_interval_bytes:
            self._offset_entries.append((largest_offset, position))
            if self._max_ts > (self._time_entries[-1][0] if self._time_entries else -1):
                self._time_entries.append((self._max_ts, self._max_ts_offset))
            self._bytes_since_entry = 0
        self._bytes_since_entry += len(chunk)
        self.log += chunk

    def _track_producer(self, batch: RecordBatch) -> None:
        pid = batch.producer_id
        if pid < 0:
            return
        state = self._producers.setdefault(pid, _ProducerState(batch.producer_epoch))
        state.epoch = batch.producer_epoch
        if batch.is_control:
            if batch.is_transactional:
                (marker,) = batch.records()
                kind = control_type(marker.key)
                first = state.txn_first_offset
                if kind is ControlRecordType.ABORT and first is not None:
                    self._aborted.append(
                        AbortedTxn(pid, first, batch.last_offset, self._lso_after(pid, batch))
                    )
                if marker.value is not None:
                    state.coordinator_epoch = EndTransactionMarker.parse(
                        marker.key, marker.value
                    ).coordinator_epoch
                state.txn_first_offset = None
            state.last_offset = batch.last_offset
            state.timestamp = batch.max_timestamp
            return
        if batch.is_transactional and state.txn_first_offset is None:
            state.txn_first_offset = batch.base_offset
        if batch.base_sequence >= 0:
            state.last_sequence = batch.base_sequence + batch.last_offset_delta
        state.offset_delta = batch.last_offset_delta
        state.last_offset = batch.last_offset
        state.timestamp = batch.max_timestamp

    def _lso_after(self, pid: int, marker: RecordBatch) -> int:
        """ProducerStateManager.lastStableOffset: another open txn's start, else marker + 1."""
        open_firsts = [
            s.txn_first_offset
            for p, s in self._producers.items()
            if p != pid and s.txn_first_offset is not None
        ]
        return min(open_firsts) if open_firsts else marker.last_offset + 1

    def write(self, directory: Path) -> SegmentFiles:
        """Roll: force the final time-index entry, then write every file of the segment."""
        directory.mkdir(parents=True, exist_ok=True)
        time_entries = list(self._time_entries)
        if self._max_ts >= 0 and (not time_entries or time_entries[-1][0] != self._max_ts):
            time_entries.append((self._max_ts, self._max_ts_offset))
        name = f"{self.base_offset:020d}"
        files = SegmentFiles(
            log=directory / f"{name}.log",
            offset_index=directory / f"{name}.index",
            time_index=directory / f"{name}.timeindex",
            txn_index=directory / f"{name}.txnindex" if self._aborted else None,
            leader_epoch_checkpoint=directory / "leader-epoch-checkpoint",
            producer_snapshot=directory / f"{self.next_offset:020d}.snapshot",
        )
        files.log.write_bytes(self.log)
        files.offset_index.write_bytes(encode_offset_index(self._offset_entries, self.base_offset))
        files.time_index.write_bytes(encode_time_index(time_entries, self.base_offset))
        if files.txn_index is not None:
            files.txn_index.write_bytes(encode_txn_index(self._aborted))
        files.leader_epoch_checkpoint.write_bytes(
            format_leader_epoch_checkpoint(self.epochs.entries)
        )
        files.producer_snapshot.write_bytes(encode_producer_snapshot(self._snapshot_entries()))
        return files

    def _snapshot_entries(self) -> Iterable[ProducerSnapshotEntry]:
        for pid, s in sorted(self._producers.items()):
            yield ProducerSnapshotEntry(
                pid,
                s.epoch,
                s.last_sequence,
                s.last_offset,
                s.offset_delta,
                s.timestamp,
                s.coordinator_epoch,
                -1 if s.txn_first_offset is None else s.txn_first_offset,
            )
