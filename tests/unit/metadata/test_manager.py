"""The RLMM's KIP-405 semantics on both backends: transitions, displacement, lookups, sizes."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from gateway.errors import (
    InvalidStateTransitionError,
    RemoteResourceNotFoundError,
    UnknownTopicOrPartitionError,
)
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import (
    PartitionDeleteState,
    SegmentState,
    TopicIdPartition,
    is_valid_partition_transition,
    is_valid_segment_transition,
)
from gateway.metadata.sqlite import SQLiteBackend
from tests.unit.metadata.helpers import TP, partition_delete, seg_id, segment, update

S = SegmentState
P = PartitionDeleteState


def finish(rlmm: RemoteLogMetadataManager, n: int, *args: object, **kwargs: object) -> None:
    rlmm.apply(segment(n, *args, **kwargs))  # type: ignore[arg-type]
    rlmm.apply(update(n, S.COPY_SEGMENT_FINISHED, kwargs.get("tp", TP)))  # type: ignore[arg-type]


# --- the transition matrix -------------------------------------------------------------------

SEGMENT_VALID = {
    (None, S.COPY_SEGMENT_STARTED),
    (S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_STARTED),
    (S.COPY_SEGMENT_FINISHED, S.COPY_SEGMENT_FINISHED),
    (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED),
    (S.DELETE_SEGMENT_FINISHED, S.DELETE_SEGMENT_FINISHED),
    (S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED),
    (S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED),
    (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED),
    (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED),
}


@pytest.mark.parametrize("current", [None, *S])
@pytest.mark.parametrize("target", list(S))
def test_segment_transition_matrix(current: S | None, target: S) -> None:
    assert is_valid_segment_transition(current, target) == ((current, target) in SEGMENT_VALID)


@pytest.mark.parametrize("current", [None, *P])
@pytest.mark.parametrize("target", list(P))
def test_partition_transition_matrix(current: P | None, target: P) -> None:
    valid = {(None, P.DELETE_PARTITION_MARKED), *((s, s) for s in P)}
    valid |= {(P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_STARTED)}
    valid |= {(P.DELETE_PARTITION_STARTED, P.DELETE_PARTITION_FINISHED)}
    assert is_valid_partition_transition(current, target) == ((current, target) in valid)


PATHS = {  # how to bring segment 1 into a state through valid events
    S.COPY_SEGMENT_STARTED: [],
    S.COPY_SEGMENT_FINISHED: [S.COPY_SEGMENT_FINISHED],
    S.DELETE_SEGMENT_STARTED: [S.DELETE_SEGMENT_STARTED],
}


@pytest.mark.parametrize("current", list(PATHS))
@pytest.mark.parametrize("target", [S.COPY_SEGMENT_FINISHED, *S])
def test_manager_applies_exactly_the_valid_transitions(
    rlmm: RemoteLogMetadataManager, current: S, target: S
) -> None:
    rlmm.apply(segment(1, 0, 99))
    for state in PATHS[current]:
        rlmm.apply(update(1, state))
    before = rlmm.segment(seg_id(1))
    sizes = (rlmm.remote_log_size(TP), rlmm.remote_log_size(TP, 0))
    listing = rlmm.list_remote_log_segments(TP, 0)
    event = segment(1, 0, 99) if target is S.COPY_SEGMENT_STARTED else update(1, target)
    if (current, target) in SEGMENT_VALID:
        rlmm.apply(event)
        after = rlmm.segment(seg_id(1))
        if target is S.DELETE_SEGMENT_FINISHED:
            assert after is None
        else:
            assert after is not None and after.state is target
    else:
        with pytest.raises(InvalidStateTransitionError, match=f"{current.name} -> {target.name}"):
            rlmm.apply(event)
        assert rlmm.segment(seg_id(1)) == before
        assert (rlmm.remote_log_size(TP), rlmm.remote_log_size(TP, 0)) == sizes
        assert rlmm.list_remote_log_segments(TP, 0) == listing


def test_add_requires_started_and_update_rejects_started(rlmm: RemoteLogMetadataManager) -> None:
    finished = segment(1, 0, 9).with_update(update(1, S.COPY_SEGMENT_FINISHED))
    with pytest.raises(InvalidStateTransitionError, match="must be COPY_SEGMENT_STARTED"):
        rlmm.apply(finished)
    rlmm.apply(segment(1, 0, 9))
    with pytest.raises(InvalidStateTransitionError, match="cannot be COPY_SEGMENT_STARTED"):
        rlmm.apply(update(1, S.COPY_SEGMENT_STARTED))


def test_update_of_unknown_segment(rlmm: RemoteLogMetadataManager) -> None:
    with pytest.raises(RemoteResourceNotFoundError, match="no remote log segment metadata"):
        rlmm.apply(update(7, S.COPY_SEGMENT_FINISHED))


def test_update_keeps_everything_but_broker_time_custom_state(
    rlmm: RemoteLogMetadataManager,
) -> None:
    rlmm.apply(segment(1, 0, 99, {0: 0, 2: 40}, size=777, txn_empty=True))
    rlmm.apply(update(1, S.COPY_SEGMENT_FINISHED, broker=9))
    meta = rlmm.segment(seg_id(1))
    assert meta is not None
    assert (meta.broker_id, meta.event_timestamp_ms, meta.state) == (
        9,
        2_000,
        S.COPY_SEGMENT_FINISHED,
    )
    assert (meta.start_offset, meta.end_offset, meta.segment_size_in_bytes) == (0, 99, 777)
    assert meta.segment_leader_epochs == ((0, 0), (2, 40)) and meta.txn_index_empty


# --- lookups ---------------------------------------------------------------------------------


def test_lookups_across_epochs_and_a_gap(rlmm: RemoteLogMetadataManager) -> None:
    finish(rlmm, 1, 0, 99, {0: 0})
    finish(rlmm, 2, 100, 199, {0: 100, 1: 150})
    finish(rlmm, 3, 300, 399, {1: 300, 3: 350})  # 200..299 never uploaded
    get = rlmm.remote_log_segment_metadata
    assert get(TP, 0, 0) == rlmm.segment(seg_id(1))
    assert get(TP, 0, 99).segment_id == seg_id(1)  # type: ignore[union-attr]
    assert get(TP, 0, 149).segment_id == seg_id(2)  # type: ignore[union-attr]
    assert get(TP, 0, 150) is None  # epoch 0 ends at 149 in segment 2
    assert get(TP, 1, 150).segment_id == seg_id(2)  # type: ignore[union-attr]
    assert get(TP, 1, 250) is None  # the gap
    assert get(TP, 1, 300).segment_id == seg_id(3)  # type: ignore[union-attr]
    assert get(TP, 1, 350) is None
    assert get(TP, 3, 399).segment_id == seg_id(3)  # type: ignore[union-attr]
    assert get(TP, 3, 400) is None
    assert get(TP, 2, 320) is None  # no such epoch
    assert get(TP, 0, -1) is None
    assert rlmm.highest_offset_for_epoch(TP, 0) == 149
    assert rlmm.highest_offset_for_epoch(TP, 1) == 349
    assert rlmm.highest_offset_for_epoch(TP, 3) == 399
    assert rlmm.highest_offset_for_epoch(TP, 2) is None
    assert rlmm.remote_log_start_offset(TP) == 0
    assert rlmm.remote_log_end_offset(TP) == 399
    assert [tuple(e) for e in rlmm.epoch_lineage(TP)] == [(0, 0), (1, 150), (3, 350)]
    assert [rlmm.epoch_for_offset(TP, o) for o in (0, 149, 150, 349, 350, 10**9)] == [
        0, 0, 1, 1, 3, 3,
    ]  # fmt: skip


def test_started_segments_are_not_readable(rlmm: RemoteLogMetadataManager) -> None:
    rlmm.apply(segment(1, 0, 99))
    assert rlmm.remote_log_segment_metadata(TP, 0, 5) is None
    assert [m.segment_id for m in rlmm.list_remote_log_segments(TP, 0)] == [seg_id(1)]
    assert rlmm.remote_log_start_offset(TP) is None


def test_unknown_partition_raises(rlmm: RemoteLogMetadataManager) -> None:
    other = TopicIdPartition(uuid.UUID(int=99), 3, "nope")
    with pytest.raises(UnknownTopicOrPartitionError):
        rlmm.remote_log_segment_metadata(other, 0, 0)
    with pytest.raises(UnknownTopicOrPartitionError):
        rlmm.remote_log_size(other)


def test_next_segment_with_txn_index(rlmm: RemoteLogMetadataManager) -> None:
    finish(rlmm, 1, 0, 99, txn_empty=True)
    finish(rlmm, 2, 100, 199, txn_empty=True)
    finish(rlmm, 3, 200, 299, txn_empty=False)
    finish(rlmm, 4, 300, 399, txn_empty=True)
    found = rlmm.next_segment_with_txn_index(TP, 0, 5)
    assert found is not None and found.segment_id == seg_id(3)
    assert rlmm.next_segment_with_txn_index(TP, 0, 300) is None


# --- displacement (spec §5.2) ----------------------------------------------------------------


def test_reupload_of_the_same_range_displaces(rlmm: RemoteLogMetadataManager) -> None:
    finish(rlmm, 1, 100, 199, {5: 100})
    finish(rlmm, 2, 100, 199, {5: 100})
    assert rlmm.remote_log_segment_metadata(TP, 5, 150).segment_id == seg_id(2)  # type: ignore[union-attr]
    listed = [m.segment_id for m in rlmm.list_remote_log_segments(TP, 5)]
    assert sorted(listed, key=str) == sorted([seg_id(1), seg_id(2)], key=str)
    assert rlmm.remote_log_size(TP, 5) == 200


def test_overlapping_later_upload_keeps_both(rlmm: RemoteLogMetadataManager) -> None:
    finish(rlmm, 1, 100, 199, {5: 100})
    finish(rlmm, 2, 150, 249, {5: 150})
    assert rlmm.remote_log_segment_metadata(TP, 5, 120).segment_id == seg_id(1)  # type: ignore[union-attr]
    assert rlmm.remote_log_segment_metadata(TP, 5, 170).segment_id == seg_id(2)  # type: ignore[union-attr]
    assert rlmm.highest_offset_for_epoch(TP, 5) == 249


def test_superset_upload_displaces_several(rlmm: RemoteLogMetadataManager) -> None:
    finish(rlmm, 1, 10, 90, {0: 10})
    finish(rlmm, 2, 91, 100, {0: 91})
    finish(rlmm, 3, 5, 100, {0: 5})
    for offset in (5, 10, 95, 100):
        assert rlmm.remote_log_segment_metadata(TP, 0, offset).segment_id == seg_id(3)  # type: ignore[union-attr]


def test_delete_lifecycle_and_epoch_state_cleanup(rlmm: RemoteLogMetadataManager) -> None:
    finish(rlmm, 1, 0, 99, size=10)
    finish(rlmm, 2, 100, 199, size=20)
    assert (rlmm.remote_log_size(TP), rlmm.segment_count(TP)) == (30, 2)
    rlmm.apply(update(1, S.DELETE_SEGMENT_STARTED))
    assert rlmm.remote_log_segment_metadata(TP, 0, 50) is None
    assert rlmm.remote_log_size(TP, 0) == 30  # still listed while deleting
    rlmm.apply(update(1, S.DELETE_SEGMENT_FINISHED))
    assert (rlmm.remote_log_size(TP), rlmm.remote_log_size(TP, 0)) == (20, 20)
    assert rlmm.segment(seg_id(1)) is None
    rlmm.apply(update(2, S.DELETE_SEGMENT_STARTED))
    rlmm.apply(update(2, S.DELETE_SEGMENT_FINISHED))
    assert rlmm.highest_offset_for_epoch(TP, 0) is None  # the empty epoch state is gone
    assert rlmm.list_remote_log_segments(TP) == []


def test_partition_delete_drops_the_partition(rlmm: RemoteLogMetadataManager) -> None:
    finish(rlmm, 1, 0, 99)
    with pytest.raises(InvalidStateTransitionError):
        rlmm.apply(partition_delete(P.DELETE_PARTITION_STARTED))
    rlmm.apply(partition_delete(P.DELETE_PARTITION_MARKED))
    rlmm.apply(partition_delete(P.DELETE_PARTITION_STARTED))
    assert rlmm.partition_delete_state(TP) is P.DELETE_PARTITION_STARTED
    rlmm.apply(partition_delete(P.DELETE_PARTITION_FINISHED))
    with pytest.raises(UnknownTopicOrPartitionError):
        rlmm.remote_log_size(TP)
    assert rlmm.partitions() == []
    assert rlmm.topics() == {}


# --- topics ----------------------------------------------------------------------------------


def test_recreated_topic_resolves_to_the_newest_id(rlmm: RemoteLogMetadataManager) -> None:
    old = TopicIdPartition(uuid.UUID(int=5), 0, "orders")
    new = TopicIdPartition(uuid.UUID(int=3), 0, "orders")
    finish(rlmm, 1, 0, 9, tp=old, event_time=100)
    finish(rlmm, 2, 0, 9, tp=new, event_time=500)
    assert rlmm.resolve_topic("orders") == new.topic_id
    assert rlmm.resolve_topic("orders", old.topic_id) == old.topic_id
    assert rlmm.topics() == {"orders": [new.topic_id, old.topic_id]}
    assert rlmm.partition("orders", 0).topic_id == new.topic_id
    with pytest.raises(UnknownTopicOrPartitionError):
        rlmm.resolve_topic("orders", uuid.UUID(int=77))
    with pytest.raises(UnknownTopicOrPartitionError):
        rlmm.partition("orders", 1)
    with pytest.raises(UnknownTopicOrPartitionError):
        rlmm.resolve_topic("payments")


def test_checkpoint_lineage_is_preferred_and_extended(rlmm: RemoteLogMetadataManager) -> None:
    finish(rlmm, 1, 0, 99, {0: 0, 2: 50})
    finish(rlmm, 2, 100, 199, {2: 100, 4: 150})
    rlmm.set_epoch_lineage(TP, seg_id(1).id, [(0, 0), (1, 20), (2, 50)])
    assert [tuple(e) for e in rlmm.epoch_lineage(TP)] == [(0, 0), (1, 20), (2, 50), (4, 150)]
    assert rlmm.epoch_for_offset(TP, 30) == 1


# --- atomicity and durability ----------------------------------------------------------------


def test_a_failing_event_leaves_no_trace(rlmm: RemoteLogMetadataManager) -> None:
    finish(rlmm, 1, 0, 99, size=10)
    with pytest.raises(InvalidStateTransitionError), rlmm.batch():
        rlmm.apply(segment(2, 100, 199, size=5))
        rlmm.apply(update(2, S.COPY_SEGMENT_FINISHED))
        rlmm.apply(update(2, S.DELETE_SEGMENT_FINISHED))  # invalid: rolls the batch back
    assert rlmm.segment(seg_id(2)) is None
    assert (rlmm.remote_log_size(TP), rlmm.segment_count(TP)) == (10, 1)


def test_sqlite_state_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "state" / "rlmm.db"
    first = RemoteLogMetadataManager(SQLiteBackend(path))
    finish(first, 1, 0, 99, {0: 0, 1: 50}, size=11)
    finish(first, 2, 100, 199, {1: 100}, size=22)
    first.close()
    again = RemoteLogMetadataManager(SQLiteBackend(path))
    assert again.remote_log_segment_metadata(TP, 1, 150).segment_id == seg_id(2)  # type: ignore[union-attr]
    assert again.remote_log_size(TP) == 33
    assert again.resolve_topic("orders") == TP.topic_id
    again.close()


def test_sqlite_lookup_uses_the_primary_key_index(tmp_path: Path) -> None:
    backend = SQLiteBackend(tmp_path / "m.db")
    plan = backend._conn.execute(
        "EXPLAIN QUERY PLAN SELECT k, v FROM kv WHERE k <= ? AND k >= ? ORDER BY k DESC LIMIT 1",
        (b"b", b"a"),
    ).fetchall()
    assert "SEARCH kv USING PRIMARY KEY" in " ".join(str(row[-1]) for row in plan)
    backend.close()
