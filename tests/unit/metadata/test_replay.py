"""Replay of ``__remote_log_metadata`` records into an event sink (remote-read-semantics.md §6.6):
Kafka's drop-and-continue results, snapshot skipping, offset order, corrupt records."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from gateway.errors import (
    CorruptDataError,
    CorruptMetadataRecordError,
    InvalidStateTransitionError,
    RemoteResourceNotFoundError,
    UnknownTopicOrPartitionError,
)
from gateway.kafka.uuids import decode_uuid
from gateway.metadata.model import (
    MetadataEvent,
    PartitionDeleteState,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    SegmentState,
    TopicIdPartition,
)
from gateway.metadata.replay import EventSink, ReplayStats, replay
from gateway.metadata.serde import RemoteLogSegmentMetadataSnapshot, encode_metadata_record

TP = TopicIdPartition(decode_uuid("AAAAAAAAAAAAAAAAAAAAAQ"), 7, "foo")
SEG_A = RemoteLogSegmentId(TP, decode_uuid("AAAAAAAAAAAAAAAAAAAAAg"))
SEG_B = RemoteLogSegmentId(TP, decode_uuid("AAAAAAAAAAAAAAAAAAAAAw"))


def segment(sid: RemoteLogSegmentId, start: int) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(sid, start, start + 99, 1000, 1, 2000, ((0, start),), 4096)


def update(sid: RemoteLogSegmentId, state: SegmentState) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(sid, 3000, None, state, 1)


SNAPSHOT = RemoteLogSegmentMetadataSnapshot(SEG_A.id, 0, 99, 1000, 1, 2000, ((0, 0),), 4096)
DELETE = RemotePartitionDeleteMetadata(TP, PartitionDeleteState.DELETE_PARTITION_MARKED, 4000, 1)


class FakeSink:
    """Records applied events; raises the scripted error for the events it is told to."""

    def __init__(self, script: Callable[[MetadataEvent], Exception | None] | None = None) -> None:
        self.applied: list[MetadataEvent] = []
        self.script = script

    def apply(self, event: MetadataEvent) -> None:
        error = self.script(event) if self.script else None
        if error is not None:
            raise error
        self.applied.append(event)


def stream(*events: object, start: int = 0, step: int = 1) -> list[tuple[int, bytes]]:
    return [
        (start + i * step, encode_metadata_record(e))  # type: ignore[arg-type]
        for i, e in enumerate(events)
    ]


def test_sink_protocol_is_satisfied() -> None:
    sink: EventSink = FakeSink()
    assert replay(sink, []) == ReplayStats()


def test_applies_every_event_in_order() -> None:
    events = [segment(SEG_A, 0), update(SEG_A, SegmentState.COPY_SEGMENT_FINISHED), DELETE]
    sink = FakeSink()
    stats = replay(sink, stream(*events, start=10, step=3))  # gaps between offsets are fine
    assert sink.applied == events
    assert stats == ReplayStats(records=3, applied=3, last_offset=16)
    assert stats.dropped == 0


def test_invalid_transition_and_unknown_segment_are_dropped_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bad_transition = update(SEG_A, SegmentState.DELETE_SEGMENT_FINISHED)
    unknown = update(SEG_B, SegmentState.COPY_SEGMENT_FINISHED)

    def script(event: MetadataEvent) -> Exception | None:
        if event == bad_transition:
            return InvalidStateTransitionError("COPY_SEGMENT_STARTED -> DELETE_SEGMENT_FINISHED")
        if event == unknown:
            return RemoteResourceNotFoundError("no such segment")
        return None

    sink = FakeSink(script)
    finished = update(SEG_A, SegmentState.COPY_SEGMENT_FINISHED)
    with caplog.at_level(logging.WARNING, logger="gateway.metadata.replay"):
        stats = replay(sink, stream(segment(SEG_A, 0), bad_transition, unknown, finished))
    assert sink.applied == [segment(SEG_A, 0), finished]
    assert stats == ReplayStats(
        records=4, applied=2, dropped_invalid_transition=1, dropped_unknown_segment=1,
        last_offset=3,
    )  # fmt: skip
    assert stats.dropped == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "offset 1" in warnings[0] and "DELETE_SEGMENT_FINISHED" in warnings[0]
    assert "offset 2" in warnings[1] and "no such segment" in warnings[1]


def test_snapshot_records_are_counted_and_skipped() -> None:
    sink = FakeSink()
    stats = replay(sink, stream(SNAPSHOT, segment(SEG_A, 0), SNAPSHOT))
    assert sink.applied == [segment(SEG_A, 0)]
    assert stats == ReplayStats(records=3, applied=1, skipped_snapshots=2, last_offset=2)


def test_v1_records_replay_like_v0() -> None:
    sink = FakeSink()
    raw = encode_metadata_record(segment(SEG_A, 0), 1, broker_leader_epoch=4)
    assert replay(sink, [(0, raw)]).applied == 1
    assert sink.applied == [segment(SEG_A, 0)]


@pytest.mark.parametrize("offsets", [(0, 0), (5, 4), (-1,)])
def test_offsets_must_strictly_increase(offsets: tuple[int, ...]) -> None:
    sink = FakeSink()
    records = [(o, encode_metadata_record(segment(SEG_A, 0))) for o in offsets]
    with pytest.raises(CorruptDataError, match=f"offset {offsets[-1]} after"):
        replay(sink, records)
    assert len(sink.applied) == len(offsets) - 1


def test_corrupt_record_stops_the_replay_naming_its_offset() -> None:
    records = stream(segment(SEG_A, 0), start=100)
    records.append((101, b"\x01\x09\x00garbage"))
    records += stream(segment(SEG_B, 100), start=102)
    sink = FakeSink()
    stats = ReplayStats()
    with pytest.raises(CorruptMetadataRecordError, match=r"offset 101: .*unknown apiKey 9") as info:
        replay(sink, records, stats)
    assert isinstance(info.value.__cause__, CorruptMetadataRecordError)
    assert sink.applied == [segment(SEG_A, 0)]  # nothing after the corrupt record
    assert stats == ReplayStats(records=1, applied=1, last_offset=100)


def test_truncated_and_null_values_are_corrupt() -> None:
    raw = encode_metadata_record(segment(SEG_A, 0))
    with pytest.raises(CorruptMetadataRecordError, match="offset 7: "):
        replay(FakeSink(), [(7, raw[:-1])])
    with pytest.raises(CorruptMetadataRecordError, match="offset 3: null value"):
        replay(FakeSink(), [(3, None)])


def test_other_sink_errors_propagate() -> None:
    def script(event: MetadataEvent) -> Exception | None:
        return UnknownTopicOrPartitionError("not loaded")

    with pytest.raises(UnknownTopicOrPartitionError):
        replay(FakeSink(script), stream(DELETE))
