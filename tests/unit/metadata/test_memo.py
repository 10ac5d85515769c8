"""The reads a fetch makes are memoised until the next write (``MetadataViews._memoized``):
a read after a write sees it, committed or undone, on both backends; an error is not kept."""

from __future__ import annotations

import pytest

from gateway.errors import UnknownTopicOrPartitionError
from gateway.metadata import views
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import SegmentState, TopicIdPartition
from tests.unit.metadata.helpers import TP, segment, update


def _finish(rlmm: RemoteLogMetadataManager, n: int, start: int, end: int, epoch: int) -> None:
    rlmm.apply(segment(n, start, end, {epoch: start}))
    rlmm.apply(update(n, SegmentState.COPY_SEGMENT_FINISHED))


def _reads(rlmm: RemoteLogMetadataManager) -> tuple[object, ...]:
    return (
        rlmm.partition(TP.topic, TP.partition),
        rlmm.log_start_offset(TP),
        rlmm.remote_log_end_offset(TP),
        rlmm.epoch_lineage(TP),
        rlmm.epoch_for_offset(TP, 150),
    )


def test_a_read_after_a_write_sees_it(rlmm: RemoteLogMetadataManager) -> None:
    _finish(rlmm, 1, 100, 199, epoch=0)
    first = _reads(rlmm)
    assert first == _reads(rlmm)  # the second time from the memo: the same answers
    assert first[1:] == (100, 199, [(0, 100)], 0)
    _finish(rlmm, 2, 200, 299, epoch=3)
    assert _reads(rlmm)[1:] == (100, 299, [(0, 100), (3, 200)], 0)
    rlmm.apply(update(1, SegmentState.DELETE_SEGMENT_STARTED))
    assert _reads(rlmm)[1:3] == (200, 299)


def test_a_write_undone_leaves_the_reads_as_they_were(rlmm: RemoteLogMetadataManager) -> None:
    _finish(rlmm, 1, 100, 199, epoch=0)
    before = _reads(rlmm)

    class UndoError(Exception):
        pass

    with pytest.raises(UndoError), rlmm.batch():
        _finish(rlmm, 2, 200, 299, epoch=3)
        assert rlmm.remote_log_end_offset(TP) == 299  # kept in the memo, inside the batch
        raise UndoError
    assert _reads(rlmm) == before


def test_an_unknown_partition_is_not_kept(rlmm: RemoteLogMetadataManager) -> None:
    with pytest.raises(UnknownTopicOrPartitionError):
        rlmm.partition(TP.topic, TP.partition)
    _finish(rlmm, 1, 100, 199, epoch=0)
    assert rlmm.partition(TP.topic, TP.partition) == TopicIdPartition(
        TP.topic_id, TP.partition, TP.topic
    )


def test_the_memo_is_bounded(
    rlmm: RemoteLogMetadataManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(views, "MEMO_ENTRIES", 3)
    _finish(rlmm, 1, 100, 199, epoch=0)
    for offset in range(10):
        rlmm.epoch_for_offset(TP, 100 + offset)
        _reads(rlmm)
        assert len(rlmm._memo) <= 3


def test_the_segment_holding_an_offset_follows_its_state(rlmm: RemoteLogMetadataManager) -> None:
    """The segment found by offset is decoded once, then comes from the memo until a write
    changes it (its state here)."""
    _finish(rlmm, 1, 100, 199, epoch=0)
    found = rlmm.remote_log_segment_metadata(TP, 0, 150)
    assert found is not None and found is rlmm.remote_log_segment_metadata(TP, 0, 150)
    assert found.state is SegmentState.COPY_SEGMENT_FINISHED
    rlmm.apply(update(1, SegmentState.DELETE_SEGMENT_STARTED))
    assert rlmm.remote_log_segment_metadata(TP, 0, 150) is None
