"""The log start offset the bucket reveals (issue 29): the first finished segment's start, or
the first entry of the leader-epoch checkpoints when the broker cut them there
(``truncateFromStart`` after DeleteRecords or retention; seen on a real 4.1.1 broker:
``make real-kafka``, check delete-records) and two successive uploads agree (a checkpoint has
no checksum: one damaged byte must not hide records); every bound of the service starts
there."""

from __future__ import annotations

import uuid

import pytest

from gateway.errors import OffsetOutOfRangeError
from gateway.metadata.backend import MemoryBackend
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import SegmentState
from gateway.service.locate import locate, remote_bounds
from tests.unit.metadata.helpers import TP, segment, update


def catalog() -> RemoteLogMetadataManager:
    rlmm = RemoteLogMetadataManager(MemoryBackend())
    for n, (start, end) in enumerate([(10, 19), (20, 29), (30, 39)], 1):
        rlmm.apply(segment(n, start, end, {0: start}))
        rlmm.apply(update(n, SegmentState.COPY_SEGMENT_FINISHED))
    return rlmm


def test_without_a_checkpoint_the_first_segment_starts_the_log() -> None:
    rlmm = catalog()
    assert rlmm.log_start_offset(TP) == 10 == remote_bounds(rlmm, TP)[0]


def test_a_checkpoint_from_the_first_offset_changes_nothing() -> None:
    rlmm = catalog()
    rlmm.set_epoch_lineage(TP, uuid.UUID(int=1003), [(0, 0)])
    assert rlmm.log_start_offset(TP) == 10


def cut(rlmm: RemoteLogMetadataManager, at: int) -> None:
    """Two successive uploads whose checkpoints were cut at ``at``."""
    rlmm.set_epoch_lineage(TP, uuid.UUID(int=1002), [(0, at)])
    rlmm.set_epoch_lineage(TP, uuid.UUID(int=1003), [(0, at)])


def test_one_cut_checkpoint_alone_moves_nothing() -> None:
    """A damaged digit ("0 0" read as "0 15") must not hide records 10..14."""
    rlmm = catalog()
    rlmm.set_epoch_lineage(TP, uuid.UUID(int=1002), [(0, 0)])
    rlmm.set_epoch_lineage(TP, uuid.UUID(int=1003), [(0, 15)])
    assert rlmm.log_start_offset(TP) == 10
    rlmm.set_epoch_lineage(TP, uuid.UUID(int=1003), [(0, 15)], previous=[(0, 12)])
    assert rlmm.log_start_offset(TP) == 10


def test_a_confirmed_cut_stays_when_a_later_checkpoint_disagrees() -> None:
    rlmm = catalog()
    cut(rlmm, 15)
    rlmm.set_epoch_lineage(TP, uuid.UUID(int=1003), [(0, 17)])  # damaged, or a newer move
    assert rlmm.log_start_offset(TP) == 15
    rlmm.set_epoch_lineage(TP, uuid.UUID(int=1003), [(0, 17)])  # the next upload agrees
    assert rlmm.log_start_offset(TP) == 17


def test_a_cut_checkpoint_is_the_log_start() -> None:
    rlmm = catalog()
    cut(rlmm, 15)
    assert rlmm.log_start_offset(TP) == 15
    assert remote_bounds(rlmm, TP) == (15, 40)
    assert rlmm.remote_log_start_offset(TP) == 10  # the segments' own start is unchanged
    assert locate(rlmm, lambda _: (), TP, 15).start_offset == 10  # the batch holding 15
    with pytest.raises(OffsetOutOfRangeError) as caught:
        locate(rlmm, lambda _: (), TP, 14)
    assert (caught.value.log_start_offset, caught.value.log_end_offset) == (15, 40)


def test_a_cut_past_the_remote_end_leaves_nothing_to_serve() -> None:
    rlmm = catalog()
    cut(rlmm, 55)
    assert remote_bounds(rlmm, TP) == (40, 40)


def test_deleting_the_segments_below_keeps_the_cut() -> None:
    rlmm = catalog()
    cut(rlmm, 25)
    for state in (SegmentState.DELETE_SEGMENT_STARTED, SegmentState.DELETE_SEGMENT_FINISHED):
        rlmm.apply(update(1, state))
    assert remote_bounds(rlmm, TP) == (25, 40)
