"""The read side of the remote log metadata manager: lookups, listings, sizes, lineage, topics.

:class:`MetadataViews` holds the backend and the lock; :class:`~gateway.metadata.manager.
RemoteLogMetadataManager` adds the events on top. Every method here is a read of the key space
described in :mod:`gateway.metadata.keyspace` (``remote-read-semantics.md`` §4, §5.3, §5.4).

The reads every fetch makes (a topic's id, a partition, its bounds, its epoch lineage, the
segment holding an offset, decoded) are memoised until the next write: every write runs in
:meth:`MetadataViews._writing`, which drops the memo when it ends, committed or undone, and no
read runs while one is under way (one lock). They were ~12 % of a warm raw answer's server CPU
(scans of the key space and a segment's decoding, per request).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final, TypeVar

from gateway.errors import UnknownTopicOrPartitionError
from gateway.kafka.epoch import EpochEntry, LeaderEpochCache
from gateway.metadata import keyspace as ks
from gateway.metadata.backend import KeyValueBackend
from gateway.metadata.model import (
    PartitionDeleteState,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)

_EPOCH_AT = 1 + ks.TP_LEN
MEMO_ENTRIES: Final = 4096  # reads kept until the next write; past it the memo starts over
T = TypeVar("T")
DisputeCheck = Callable[["MetadataViews", TopicIdPartition, list[tuple[int, int]], str], None]
"""Checks a disputed checkpoint against the catalog (``lineage.check_lineage``)."""


class MetadataViews:
    """Reads of the RLMM state; thread-safe (one lock serialises calls)."""

    def __init__(self, backend: KeyValueBackend) -> None:
        self._db = backend
        self._lock = threading.RLock()
        self._memo: dict[tuple[Any, ...], Any] = {}

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """A write: under the lock, in one transaction; the memo is dropped when it ends,
        committed or undone (see the module docstring)."""
        with self._lock:
            try:
                with self._db.transaction():
                    yield
            finally:
                self._memo.clear()

    def _memoized(self, key: tuple[Any, ...], compute: Callable[[], T]) -> T:
        """``compute()``, kept under ``key`` until the next write (an error is not kept)."""
        with self._lock:
            if key in self._memo:
                found: T = self._memo[key]
                return found
            value = compute()
            if len(self._memo) >= MEMO_ENTRIES:
                self._memo.clear()
            self._memo[key] = value
            return value

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def inline_reads(self) -> Iterator[bool]:
        """Whether point reads may run on the caller's thread now: true when the backend is
        in memory and the lock was free at once (then held for the block), false otherwise
        (a SQLite backend does I/O; a held lock means a scan is applying events). Lets an event
        loop read without ever waiting behind a scan."""
        if not self._db.in_memory or not self._lock.acquire(blocking=False):
            yield False
            return
        try:
            yield True
        finally:
            self._lock.release()

    # --- reads -------------------------------------------------------------------------------

    def _segment(self, tp: TopicIdPartition, sid: uuid.UUID) -> RemoteLogSegmentMetadata | None:
        data = self._db.get(ks.segment_key(tp, sid))
        return None if data is None else ks.decode_segment(tp, sid, data)

    def _epoch_state(self, tp: TopicIdPartition, epoch: int) -> ks.EpochState | None:
        data = self._db.get(ks.epoch_key(tp, epoch))
        return None if data is None else ks.EpochState.decode(data)

    def _partition_state(self, tp: TopicIdPartition) -> ks.PartitionState | None:
        data = self._db.get(ks.partition_key(tp))
        return None if data is None else ks.PartitionState.decode(data)

    def _require(self, tp: TopicIdPartition) -> ks.PartitionState:
        part = self._partition_state(tp)
        if part is None:
            raise UnknownTopicOrPartitionError(f"no remote log metadata for partition {tp}")
        return part

    def segment(self, segment_id: RemoteLogSegmentId) -> RemoteLogSegmentMetadata | None:
        with self._lock:
            return self._segment(segment_id.partition, segment_id.id)

    def remote_log_segment_metadata(
        self, tp: TopicIdPartition, epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """The finished segment holding ``offset`` for ``epoch`` (§5.3), else ``None``."""
        with self._lock:
            found = self._lookup(tp, epoch, offset)
            if found is None:
                self._require(tp)
            return found

    def _lookup(
        self, tp: TopicIdPartition, epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        if offset < 0:
            return None
        found = self._db.floor(ks.offset_prefix(tp, epoch), ks.offset_key(tp, epoch, offset))
        if found is None:
            return None
        sid = found[1]  # decoded once until the next write: every fetch looks its segment up
        meta = self._memoized(("segment", tp, sid), lambda: self._segment(tp, uuid.UUID(bytes=sid)))
        if meta is None or offset > meta.epoch_end(epoch):
            return None
        return meta

    def next_segment_with_txn_index(
        self, tp: TopicIdPartition, epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """§5.4: the first segment from ``offset`` on, within ``epoch``, whose transaction
        index is not empty."""
        with self._lock:
            self._require(tp)
            meta = self._lookup(tp, epoch, offset)
            while meta is not None and meta.txn_index_empty:
                meta = self._lookup(tp, epoch, meta.end_offset + 1)
            return meta

    def highest_offset_for_epoch(self, tp: TopicIdPartition, epoch: int) -> int | None:
        with self._lock:
            self._require(tp)
            state = self._epoch_state(tp, epoch)
            return None if state is None else state.highest_log_offset

    def list_remote_log_segments(
        self, tp: TopicIdPartition, epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        """Without ``epoch``: every segment not DELETE_SEGMENT_FINISHED, by start offset.
        With it: the epoch's mapped then unreferenced segments sorted by start offset (§4)."""
        with self._lock:
            self._require(tp)
            if epoch is None:
                rows = self._db.scan(ks.LISTING + ks.tp_bytes(tp))
                ids = [uuid.UUID(bytes=k[-16:]) for k, _ in rows]
            else:
                mapped = self._db.scan(ks.offset_prefix(tp, epoch))
                unref = self._db.scan(ks.unreferenced_prefix(tp, epoch))
                ids = [uuid.UUID(bytes=v) for _, v in mapped]
                ids += [uuid.UUID(bytes=k[-16:]) for k, _ in unref]
            out = [m for m in (self._segment(tp, s) for s in ids) if m is not None]
            if epoch is not None:
                out.sort(key=lambda m: m.start_offset)
            return out

    def remote_log_size(self, tp: TopicIdPartition, epoch: int | None = None) -> int:
        """KIP-852 ``remoteLogSize(tp, epoch)`` from the running total (never a listing); with
        no epoch, the size of every segment of the partition not yet DELETE_SEGMENT_FINISHED."""
        with self._lock:
            part = self._require(tp)
            if epoch is None:
                return part.size
            state = self._epoch_state(tp, epoch)
            return 0 if state is None else state.size

    def segment_count(self, tp: TopicIdPartition) -> int:
        with self._lock:
            return self._require(tp).segment_count

    def partition_delete_state(self, tp: TopicIdPartition) -> PartitionDeleteState | None:
        with self._lock:
            part = self._partition_state(tp)
            return None if part is None else part.delete_state

    def _epochs(self, tp: TopicIdPartition) -> list[tuple[int, ks.EpochState]]:
        rows = self._db.scan(ks.EPOCH + ks.tp_bytes(tp))
        return [(ks.read_i32(k, _EPOCH_AT), ks.EpochState.decode(v)) for k, v in rows]

    def _epoch_starts(self, tp: TopicIdPartition) -> list[tuple[int, int]]:
        """(epoch, earliest start of the epoch over finished segments), ascending epochs."""
        out = []
        for epoch, _ in self._epochs(tp):
            first = self._db.scan(ks.offset_prefix(tp, epoch), limit=1)
            if first:
                out.append((epoch, ks.read_i64(first[0][0], _EPOCH_AT + 4)))
        return out

    def remote_log_start_offset(self, tp: TopicIdPartition) -> int | None:
        """The lowest start offset over finished segments."""
        with self._lock:
            self._require(tp)
            starts = [s for _, s in self._epoch_starts(tp)]
            return min(starts) if starts else None

    def log_start_offset(self, tp: TopicIdPartition) -> int | None:
        """The broker's log start offset, as far as the bucket reveals it: the first finished
        segment's start, or later where the leader-epoch checkpoints of two successive
        uploads were cut (the broker's ``truncateFromStart`` after DeleteRecords or retention
        moved its log start inside a segment that is still in the bucket;
        :meth:`~gateway.metadata.manager.RemoteLogMetadataManager.set_epoch_lineage`). Never
        past the remote log's end (then the remote log holds nothing to serve)."""
        return self._memoized(("start", tp), lambda: self._log_start_offset(tp))

    def _log_start_offset(self, tp: TopicIdPartition) -> int | None:
        with self._lock:
            start = self.remote_log_start_offset(tp)
            if start is None:
                return None
            stored = self._db.get(ks.log_start_key(tp))
            cut = None if stored is None else ks.read_i64(stored, 0)
            if cut is None or cut <= start:
                return start
            end = self.remote_log_end_offset(tp)
            return min(cut, start if end is None else end + 1)

    def remote_log_end_offset(self, tp: TopicIdPartition) -> int | None:
        """The highest offset in remote storage: the largest ``highestLogOffset``."""
        return self._memoized(("end", tp), lambda: self._remote_log_end_offset(tp))

    def _remote_log_end_offset(self, tp: TopicIdPartition) -> int | None:
        with self._lock:
            self._require(tp)
            ends = [s.highest_log_offset for _, s in self._epochs(tp)]
            known = [e for e in ends if e is not None]
            return max(known) if known else None

    def epoch_lineage(self, tp: TopicIdPartition) -> list[EpochEntry]:
        """The partition's leader-epoch lineage: the recorded checkpoint of the newest
        segment when there is one, extended by later epochs of the segments' epoch maps;
        otherwise the epoch maps alone (each epoch at its earliest start), with
        ``LeaderEpochFileCache.assign`` rules (§15)."""
        return self._lineage(tp).entries

    def _lineage(self, tp: TopicIdPartition) -> LeaderEpochCache:
        """The lineage as a cache, memoised: never handed out, only read."""
        return self._memoized(("lineage", tp), lambda: self._compute_lineage(tp))

    def _compute_lineage(self, tp: TopicIdPartition) -> LeaderEpochCache:
        with self._lock:
            self._require(tp)
            cache = LeaderEpochCache()
            stored = self._db.get(ks.lineage_key(tp))
            starts = self._epoch_starts(tp)
            if stored is not None:
                cache = _below_cut(starts, ks.decode_lineage(stored)[1])
            latest = cache.latest_entry
            for epoch, start in starts:
                if latest is None or (epoch > latest.epoch and start > latest.start_offset):
                    cache.assign(epoch, start)
            return cache

    def lineage_segment(self, tp: TopicIdPartition) -> uuid.UUID | None:
        """The segment whose checkpoint the recorded lineage (or dispute) came from."""
        with self._lock:
            for key in (ks.lineage_key(tp), ks.dispute_key(tp)):
                data = self._db.get(key)
                if data is not None:
                    return uuid.UUID(bytes=data[:16])
            return None

    def recheck_dispute(self, tp: TopicIdPartition, check: DisputeCheck) -> None:
        """``check(self, tp, entries, where)`` on the stored dispute, if any
        (:meth:`lineage_dispute`), under the lock: against one state of the catalog, not one a
        scan changes halfway through."""
        with self._lock:
            dispute = self.lineage_dispute(tp)
            if dispute is not None:
                check(self, tp, *dispute)

    def lineage_dispute(self, tp: TopicIdPartition) -> tuple[list[tuple[int, int]], str] | None:
        """The checkpoint that disagreed with the segments' epoch maps
        (:meth:`RemoteLogMetadataManager.dispute_epoch_lineage`): its entries and the object
        it came from, while its segment is still in the catalog; ``None`` otherwise."""
        with self._lock:
            data = self._db.get(ks.dispute_key(tp))
            if data is None:
                return None
            segment, entries, where = ks.decode_dispute(data)
            return (entries, where) if self._segment(tp, segment) is not None else None

    def epoch_for_offset(self, tp: TopicIdPartition, offset: int) -> int | None:
        return self._lineage(tp).epoch_for_offset(offset)

    # --- topics ------------------------------------------------------------------------------

    def partitions(self, topic_id: uuid.UUID | None = None) -> list[TopicIdPartition]:
        """Every partition with metadata (of one topic id when given), ordered by id."""
        with self._lock:
            prefix = ks.PARTITION + (topic_id.bytes if topic_id else b"")
            out = []
            for key, value in self._db.scan(prefix):
                tid, partition = ks.tp_from(key, 1)
                out.append(TopicIdPartition(tid, partition, ks.PartitionState.decode(value).topic))
            return out

    def _holds_data(self, topic_id: bytes) -> bool:
        """Some partition of the topic id has a finished segment: a topic all of whose
        segments were deleted (a deleted topic: Kafka 4.1 announces it by deleting each
        segment, with no partition-delete record) is no longer listed nor resolved. Usually
        two short reads (the first partition holds data)."""
        prefix = ks.PARTITION + topic_id
        first = self._db.scan(prefix, limit=1)
        if not first:
            return False
        if self._tp_holds_data(first[0][0][1:]):
            return True
        return any(self._tp_holds_data(key[1:]) for key, _ in self._db.scan(prefix)[1:])

    def _tp_holds_data(self, tp_key: bytes) -> bool:
        rows = self._db.scan(ks.EPOCH + tp_key)
        return any(ks.EpochState.decode(v).highest_log_offset is not None for _, v in rows)

    def topics(self) -> dict[str, list[uuid.UUID]]:
        """Topic name -> its ids, newest first (ids with no finished segment left out)."""
        with self._lock:
            found: dict[str, list[tuple[int, bytes]]] = {}
            for key, value in self._db.scan(ks.TOPIC):
                if not self._holds_data(key[-16:]):
                    continue
                name = key[1:-17].decode("utf-8")
                found.setdefault(name, []).append((ks.decode_time(value), key[-16:]))
            return {
                name: [uuid.UUID(bytes=b) for _, b in sorted(ids, reverse=True)]
                for name, ids in sorted(found.items())
            }

    def resolve_topic(self, topic: str, topic_id: uuid.UUID | None = None) -> uuid.UUID:
        """The topic id for ``topic``: the newest (latest first event) when the name was
        deleted and re-created, or exactly ``topic_id`` when the caller names it; unknown when
        that id holds no finished segment any more (a deleted topic)."""
        return self._memoized(("topic", topic, topic_id), lambda: self._resolve(topic, topic_id))

    def _resolve(self, topic: str, topic_id: uuid.UUID | None) -> uuid.UUID:
        with self._lock:
            rows = self._db.scan(ks.topic_prefix(topic))
            ids = sorted(((ks.decode_time(v), k[-16:]) for k, v in rows), reverse=True)
            if topic_id is not None:
                if any(b == topic_id.bytes and self._holds_data(b) for _, b in ids):
                    return topic_id
                raise UnknownTopicOrPartitionError(f"topic {topic!r} has no id {topic_id}")
            if not ids or not self._holds_data(ids[0][1]):  # none, or its newest was deleted
                raise UnknownTopicOrPartitionError(f"unknown topic {topic!r}")
            return uuid.UUID(bytes=ids[0][1])

    def partition(
        self, topic: str, partition: int, topic_id: uuid.UUID | None = None
    ) -> TopicIdPartition:
        """Resolve a (name, partition) pair to a known :class:`TopicIdPartition`."""
        key = ("partition", topic, partition, topic_id)
        return self._memoized(key, lambda: self._partition(topic, partition, topic_id))

    def _partition(
        self, topic: str, partition: int, topic_id: uuid.UUID | None
    ) -> TopicIdPartition:
        tid = self.resolve_topic(topic, topic_id)
        tp = TopicIdPartition(tid, partition, topic)
        with self._lock:
            self._require(tp)
        return tp


def _below_cut(starts: list[tuple[int, int]], entries: list[tuple[int, int]]) -> LeaderEpochCache:
    """A checkpoint the broker cut at its log start (``truncateFromStart``) begins after
    segments still in the bucket: the epoch maps (``starts``: each epoch's earliest start)
    give the epochs below its first entry, with ``LeaderEpochFileCache.assign`` rules as for
    the maps alone (a stale segment of an unclean election starting an epoch at the same
    offset as the next one then drops out, as there)."""
    if not entries or not any(s < entries[0][1] for _, s in starts):
        return LeaderEpochCache(entries)
    head_epoch, head_start = entries[0]
    cache = LeaderEpochCache()
    for epoch, start in starts:
        if epoch < head_epoch and start < head_start:
            cache.assign(epoch, start)
    below = [s for e, s in starts if e == head_epoch and s < head_start]
    cache.assign(head_epoch, min(below, default=head_start))
    for epoch, start in entries[1:]:
        cache.assign(epoch, start)
    return cache
