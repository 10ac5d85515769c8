"""The remote log metadata manager (RLMM) with Kafka's exact cache semantics.

Mirrors ``RemoteLogMetadataCache``, ``RemoteLogLeaderEpochState`` and
``RemotePartitionMetadataStore`` (``remote-read-semantics.md`` §3 to §5) over an ordered
key-value backend (:mod:`gateway.metadata.backend`, key space in
:mod:`gateway.metadata.keyspace`):

* per partition, per leader epoch: ``offsetToId`` (epoch start offset in the segment -> segment,
  finished segments only), ``unreferencedSegmentIds`` and ``highestLogOffset``;
* COPY_SEGMENT_FINISHED displaces older uploads: while the last ``offsetToId`` entry has a key
  >= this segment's epoch start and ``highestLogOffset`` <= this segment's epoch end, that entry
  moves to the unreferenced set;
* DELETE_SEGMENT_STARTED unmaps the segment, DELETE_SEGMENT_FINISHED forgets it (and an epoch
  state left empty), DELETE_PARTITION_FINISHED drops the partition.

Every event is one backend transaction: an invalid transition or an unknown segment raises
before anything is written, and any failure rolls the event back, so the state is always the
result of whole events. KIP-852 sizes are running totals kept with each membership change, with
the multiplicity Kafka's listing has (a segment both mapped and unreferenced counts twice, as
``listRemoteLogSegments`` returns it twice). Differences from the broker: a re-added
COPY_SEGMENT_STARTED segment replaces its earlier epochs instead of leaving dangling ids; a
partition needs no "initialisation" (a lookup on an unknown one raises
:class:`UnknownTopicOrPartitionError`), ``list_remote_log_segments(tp)`` is sorted by start
offset, and topics are also known by name.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from gateway.errors import (
    InvalidStateTransitionError,
    RemoteResourceNotFoundError,
)
from gateway.kafka.epoch import LeaderEpochCache
from gateway.metadata import keyspace as ks
from gateway.metadata.model import (
    MetadataEvent,
    PartitionDeleteState,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    SegmentState,
    TopicIdPartition,
    check_partition_transition,
    check_segment_transition,
)
from gateway.metadata.views import MetadataViews

_OFFSET_KEY_LEN = 1 + ks.TP_LEN + 4 + 8
_EPOCH_AT = 1 + ks.TP_LEN


class RemoteLogMetadataManager(MetadataViews):
    """The RLMM over one backend: the events here, the reads in :class:`MetadataViews`."""

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Group many events into one commit; each event stays atomic on its own."""
        with self._writing():
            yield

    def follow_positions(self, metadata_topic: str) -> dict[int, int]:
        """The next offset to read of each partition of ``metadata_topic`` a follower applied
        (:mod:`gateway.metadata.follow`); empty when none was."""
        prefix = ks.follow_prefix(metadata_topic)
        with self._lock:
            return {
                int.from_bytes(key[len(prefix) :], "big"): ks.read_i64(value, 0)
                for key, value in self._db.scan(prefix)
            }

    def set_follow_position(self, metadata_topic: str, partition: int, next_offset: int) -> None:
        """Record where a follower goes on; call it inside :meth:`batch` with the events it
        applied, so a restart resumes exactly after them."""
        with self._lock:
            self._db.put(ks.follow_key(metadata_topic, partition), ks.i64(next_offset))

    # --- events ------------------------------------------------------------------------------

    def apply(self, event: MetadataEvent) -> None:
        """Apply one event from any source (writer, bucket scan, ``__remote_log_metadata``)."""
        if isinstance(event, RemoteLogSegmentMetadata):
            self.add_remote_log_segment_metadata(event)
        elif isinstance(event, RemoteLogSegmentMetadataUpdate):
            self.update_remote_log_segment_metadata(event)
        else:
            self.put_remote_partition_delete_metadata(event)

    def add_remote_log_segment_metadata(self, meta: RemoteLogSegmentMetadata) -> None:
        """``addRemoteLogSegmentMetadata`` / ``addCopyInProgressSegment``."""
        if meta.state is not SegmentState.COPY_SEGMENT_STARTED:
            raise InvalidStateTransitionError(
                f"segment {meta.segment_id}: a new segment must be COPY_SEGMENT_STARTED, "
                f"not {meta.state.name}"
            )
        tp, sid = meta.partition, meta.segment_id.id
        with self._writing():
            existing = self._segment(tp, sid)
            check_segment_transition(
                meta.segment_id, existing.state if existing else None, meta.state
            )
            part = self._partition_state(tp) or ks.PartitionState(tp.topic, None, 0, 0)
            if existing is None:
                part = ks.PartitionState(
                    tp.topic, part.delete_state, part.segment_count + 1, part.size
                )
            else:
                # A re-added STARTED segment replaces its earlier metadata, epochs included.
                # (Kafka leaves the ids in epochs the new metadata no longer names, and later
                # fails listing those epochs; a STARTED segment has no other references.)
                for epoch, _ in existing.segment_leader_epochs:
                    state = self._epoch_state(tp, epoch) or ks.EpochState(None, 0)
                    size = existing.segment_size_in_bytes
                    state = self._remove_unref_in(tp, epoch, sid, size, state)
                    self._db.put(ks.epoch_key(tp, epoch), state.encode())
                self._db.delete(ks.listing_key(tp, existing.start_offset, sid))
            old_size = existing.segment_size_in_bytes if existing else 0
            part = ks.PartitionState(
                tp.topic,
                part.delete_state,
                part.segment_count,
                part.size + meta.segment_size_in_bytes - old_size,
            )
            self._db.put(ks.partition_key(tp), part.encode())
            self._db.put(ks.listing_key(tp, meta.start_offset, sid), b"")
            for epoch, _ in meta.segment_leader_epochs:
                self._add_unreferenced(tp, epoch, sid, meta.segment_size_in_bytes)
            self._db.put(ks.segment_key(tp, sid), ks.encode_segment(meta))
            self._note_topic(tp, meta.event_timestamp_ms)

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        """``updateRemoteLogSegmentMetadata``: FINISHED, DELETE_STARTED or DELETE_FINISHED."""
        target = update.state
        if target is SegmentState.COPY_SEGMENT_STARTED:
            raise InvalidStateTransitionError(
                f"segment {update.segment_id}: an update cannot be COPY_SEGMENT_STARTED "
                "(add the segment instead)"
            )
        tp, sid = update.segment_id.partition, update.segment_id.id
        with self._writing():
            existing = self._segment(tp, sid)
            if existing is None:
                raise RemoteResourceNotFoundError(
                    f"no remote log segment metadata for {update.segment_id}"
                )
            check_segment_transition(update.segment_id, existing.state, target)
            updated = existing.with_update(update)
            if target is SegmentState.COPY_SEGMENT_FINISHED:
                self._finished(tp, updated)
            elif target is SegmentState.DELETE_SEGMENT_STARTED:
                self._delete_started(tp, updated)
            else:
                self._delete_finished(tp, updated)
                return
            self._db.put(ks.segment_key(tp, sid), ks.encode_segment(updated))

    def put_remote_partition_delete_metadata(self, meta: RemotePartitionDeleteMetadata) -> None:
        """``putRemotePartitionDeleteMetadata``; FINISHED drops everything of the partition."""
        tp = meta.partition
        with self._writing():
            part = self._partition_state(tp)
            check_partition_transition(tp, part.delete_state if part else None, meta.state)
            if meta.state is PartitionDeleteState.DELETE_PARTITION_FINISHED:
                tpb = ks.tp_bytes(tp)
                for tag in ks.PARTITION_TAGS:
                    self._db.delete_prefix(tag + tpb)
                if not self._db.scan(ks.PARTITION + tp.topic_id.bytes, limit=1):
                    for key, _ in self._db.scan(ks.TOPIC):
                        if key.endswith(tp.topic_id.bytes) and len(key) > 17:
                            self._db.delete(key)
                return
            part = part or ks.PartitionState(tp.topic, None, 0, 0)
            new = ks.PartitionState(part.topic, meta.state, part.segment_count, part.size)
            self._db.put(ks.partition_key(tp), new.encode())
            self._note_topic(tp, meta.event_timestamp_ms)

    def set_epoch_lineage(
        self,
        tp: TopicIdPartition,
        segment: uuid.UUID,
        entries: list[tuple[int, int]],
        previous: list[tuple[int, int]] | None = None,
    ) -> None:
        """Record the leader-epoch checkpoint carried by ``segment`` (its LEADER_EPOCH index);
        :meth:`epoch_lineage` prefers it over the segments' epoch maps.

        Its first entry is the broker's log start at that upload (the broker cuts its cache
        there). It becomes the catalog's log start (:meth:`log_start_offset`) only when the
        checkpoint of the upload before agrees (``previous``, else the one recorded before):
        a checkpoint has no checksum, and one damaged byte must not hide records."""
        LeaderEpochCache(entries)  # validates: increasing, non-negative
        with self._writing():
            if previous is None:
                stored = self._db.get(ks.lineage_key(tp))
                previous = None if stored is None else ks.decode_lineage(stored)[1]
            if entries and previous and previous[0] == entries[0]:
                known = self._db.get(ks.log_start_key(tp))
                if known is None or ks.read_i64(known, 0) < entries[0][1]:
                    self._db.put(ks.log_start_key(tp), ks.i64(entries[0][1]))
            self._db.put(ks.lineage_key(tp), ks.encode_lineage(segment, entries))
            self._db.delete(ks.dispute_key(tp))  # a newer checkpoint agrees: settled

    def dispute_epoch_lineage(
        self, tp: TopicIdPartition, segment: uuid.UUID, entries: list[tuple[int, int]], where: str
    ) -> None:
        """Record that the leader-epoch checkpoint ``entries`` carried by ``segment`` (the
        partition's newest; read from ``where``) parses but disagrees with the segments'
        epoch maps: one of them is damaged, and which cannot be told. The lineage is in doubt
        while the disagreement lasts (:func:`gateway.service.offsets.check_epochs` checks it
        again at each answer), until a newer checkpoint agrees (:meth:`set_epoch_lineage`) or
        ``segment`` is gone."""
        LeaderEpochCache(entries)  # validates: increasing, non-negative
        with self._writing():
            self._db.put(ks.dispute_key(tp), ks.encode_dispute(segment, entries, where))

    # --- state handlers (inside a transaction) -----------------------------------------------

    def _finished(self, tp: TopicIdPartition, meta: RemoteLogSegmentMetadata) -> None:
        sid, size = meta.segment_id.id, meta.segment_size_in_bytes
        for epoch, start, end in meta.epoch_ranges():
            state = self._epoch_state(tp, epoch) or ks.EpochState(None, 0)
            prefix = ks.offset_prefix(tp, epoch)
            highest = state.highest_log_offset
            while True:
                last = self._db.scan(prefix, reverse=True, limit=1)
                if not last or ks.read_i64(last[0][0], _EPOCH_AT + 4) < start:
                    break
                if highest is None or highest > end:
                    break
                key, victim = last[0]
                self._db.delete(key)
                state = self._resize(tp, epoch, state, -self._size_of(tp, victim))
                state = self._add_unref_in(tp, epoch, uuid.UUID(bytes=victim), state)
            key = ks.offset_key(tp, epoch, start)
            old = self._db.get(key)
            self._db.put(key, sid.bytes)
            if old is not None:
                state = self._resize(tp, epoch, state, -self._size_of(tp, old))
            state = self._resize(tp, epoch, state, size)
            state = self._remove_unref_in(tp, epoch, sid, size, state)
            if old is not None:
                state = self._add_unref_in(tp, epoch, uuid.UUID(bytes=old), state, size_hint=None)
            if state.highest_log_offset is None or end > state.highest_log_offset:
                state = ks.EpochState(end, state.size)
            self._db.put(ks.epoch_key(tp, epoch), state.encode())

    def _delete_started(self, tp: TopicIdPartition, meta: RemoteLogSegmentMetadata) -> None:
        sid, size = meta.segment_id.id, meta.segment_size_in_bytes
        for epoch, start in meta.segment_leader_epochs:
            state = self._epoch_state(tp, epoch) or ks.EpochState(None, 0)
            key = ks.offset_key(tp, epoch, start)
            if self._db.get(key) == sid.bytes:  # offsetToId.remove(start, id)
                self._db.delete(key)
                state = self._resize(tp, epoch, state, -size)
            state = self._add_unref_in(tp, epoch, sid, state, size_hint=size)
            self._db.put(ks.epoch_key(tp, epoch), state.encode())

    def _delete_finished(self, tp: TopicIdPartition, meta: RemoteLogSegmentMetadata) -> None:
        sid, size = meta.segment_id.id, meta.segment_size_in_bytes
        self._db.delete(ks.segment_key(tp, sid))
        self._db.delete(ks.listing_key(tp, meta.start_offset, sid))
        for epoch, _ in meta.segment_leader_epochs:
            state = self._epoch_state(tp, epoch) or ks.EpochState(None, 0)
            state = self._remove_unref_in(tp, epoch, sid, size, state)
            empty = not self._db.scan(ks.offset_prefix(tp, epoch), limit=1) and not self._db.scan(
                ks.unreferenced_prefix(tp, epoch), limit=1
            )
            if empty:
                self._db.delete(ks.epoch_key(tp, epoch))
            else:
                self._db.put(ks.epoch_key(tp, epoch), state.encode())
        part = self._partition_state(tp)
        if part is not None:
            new = ks.PartitionState(
                part.topic, part.delete_state, part.segment_count - 1, part.size - size
            )
            self._db.put(ks.partition_key(tp), new.encode())

    def _add_unreferenced(
        self, tp: TopicIdPartition, epoch: int, sid: uuid.UUID, size: int
    ) -> None:
        state = self._epoch_state(tp, epoch) or ks.EpochState(None, 0)
        state = self._add_unref_in(tp, epoch, sid, state, size_hint=size)
        self._db.put(ks.epoch_key(tp, epoch), state.encode())

    def _add_unref_in(
        self,
        tp: TopicIdPartition,
        epoch: int,
        sid: uuid.UUID,
        state: ks.EpochState,
        size_hint: int | None = None,
    ) -> ks.EpochState:
        key = ks.unreferenced_key(tp, epoch, sid)
        if self._db.get(key) is not None:
            return state
        self._db.put(key, b"")
        size = size_hint if size_hint is not None else self._size_of(tp, sid.bytes)
        return self._resize(tp, epoch, state, size)

    def _remove_unref_in(
        self, tp: TopicIdPartition, epoch: int, sid: uuid.UUID, size: int, state: ks.EpochState
    ) -> ks.EpochState:
        key = ks.unreferenced_key(tp, epoch, sid)
        if self._db.get(key) is None:
            return state
        self._db.delete(key)
        return self._resize(tp, epoch, state, -size)

    @staticmethod
    def _resize(
        tp: TopicIdPartition, epoch: int, state: ks.EpochState, delta: int
    ) -> ks.EpochState:
        del tp, epoch
        return ks.EpochState(state.highest_log_offset, state.size + delta)

    def _size_of(self, tp: TopicIdPartition, sid: bytes) -> int:
        meta = self._segment(tp, uuid.UUID(bytes=sid))
        return 0 if meta is None else meta.segment_size_in_bytes

    def _note_topic(self, tp: TopicIdPartition, event_time: int) -> None:
        key = ks.topic_key(tp.topic, tp.topic_id)
        old = self._db.get(key)
        if old is None or ks.decode_time(old) > event_time:
            self._db.put(key, ks.encode_time(event_time))
