"""The metadata-topic follower (gateway.metadata.follow) against a scripted consumer: the state
machine applied in order, positions written with the events (a restart resumes after them),
caught up at the end offsets seen at start, faults retried, a corrupt record stopping its
partition, the served-topics filter. The real broker is in tests/realkafka (issue 29)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable
from pathlib import Path

import pytest

from gateway.errors import UnknownTopicOrPartitionError
from gateway.metadata.backend import MemoryBackend
from gateway.metadata.follow import (
    FollowConfig,
    FollowStatus,
    MetadataFollower,
    served_metadata_partitions,
)
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import (
    MetadataEvent,
    PartitionDeleteState,
    SegmentState,
    TopicIdPartition,
)
from gateway.metadata.open import open_manager
from gateway.metadata.partitioner import metadata_partition
from gateway.metadata.serde import encode_metadata_record
from tests.unit.metadata.helpers import TP, partition_delete, segment, update

OTHER = TopicIdPartition(uuid.UUID(int=2), 0, "payments")


def values(events: Iterable[MetadataEvent]) -> list[bytes | None]:
    return [encode_metadata_record(e) for e in events]


class ScriptedConsumer:
    """One metadata partition per list; ``poll`` hands out ``batch`` records at a time and
    stops the follower once it has nothing left (so a test runs to completion, no sleeps)."""

    def __init__(
        self,
        logs: dict[int, list[bytes | None]],
        stop: threading.Event,
        *,
        batch: int = 2,
        fail_after: int | None = None,
    ) -> None:
        self.logs, self.stop, self.batch = logs, stop, batch
        self.positions: dict[int, int] = {}
        self.fail_after = fail_after
        self.polls = 0
        self.closed = False

    def partitions(self) -> list[int]:
        return sorted(self.logs)

    def served_partitions(self, topics: Iterable[str], count: int) -> set[int]:
        return {0}

    def assign(self, partitions: dict[int, int]) -> None:
        self.positions = dict(partitions)

    def end_offsets(self, partitions: list[int]) -> dict[int, int]:
        return {p: len(self.logs[p]) for p in partitions}

    def poll(self, timeout_ms: int) -> dict[int, list[tuple[int, bytes | None]]]:
        self.polls += 1
        if self.fail_after is not None and self.polls > self.fail_after:
            raise ConnectionError("the cluster went away")
        out: dict[int, list[tuple[int, bytes | None]]] = {}
        for p, pos in self.positions.items():
            chunk = self.logs[p][pos : pos + self.batch]
            if chunk:
                out[p] = [(pos + i, v) for i, v in enumerate(chunk)]
                self.positions[p] = pos + len(chunk)
        if not out:
            self.stop.set()
        return out

    def close(self) -> None:
        self.closed = True


CONFIG = FollowConfig("127.0.0.1:9092", poll_timeout_ms=1, max_backoff_s=0.0)

LIFE = [
    segment(1, 0, 99),
    update(1, SegmentState.COPY_SEGMENT_FINISHED),
    segment(2, 100, 199),  # started, never finished: never served
    segment(3, 200, 299, tp=OTHER),
    update(3, SegmentState.COPY_SEGMENT_FINISHED, tp=OTHER),
]


def run(
    rlmm: RemoteLogMetadataManager,
    logs: dict[int, list[bytes | None]],
    config: FollowConfig = CONFIG,
    **kwargs: int,
) -> tuple[MetadataFollower, ScriptedConsumer]:
    stop = threading.Event()
    consumer = ScriptedConsumer(logs, stop, **kwargs)
    follower = MetadataFollower(rlmm, config, lambda _: consumer)
    follower.run(stop)
    return follower, consumer


def finished_ids(rlmm: RemoteLogMetadataManager, tp: TopicIdPartition) -> list[int]:
    return [
        m.segment_id.id.int - 1000
        for m in rlmm.list_remote_log_segments(tp)
        if m.state is SegmentState.COPY_SEGMENT_FINISHED
    ]


def test_applies_the_state_machine_and_is_caught_up_at_the_start_ends() -> None:
    rlmm = RemoteLogMetadataManager(MemoryBackend())
    follower, consumer = run(rlmm, {0: values(LIFE)})
    assert finished_ids(rlmm, TP) == [1]  # segment 2 only started
    assert finished_ids(rlmm, OTHER) == [3]
    status = follower.status
    assert status.caught_up and follower.wait_caught_up(0)
    assert (status.records, status.lag, status.errors) == (5, 0, 0)
    assert rlmm.follow_positions(CONFIG.topic) == {0: 5}
    assert consumer.closed


def test_deletion_started_stops_serving_and_a_partition_delete_removes_it() -> None:
    rlmm = RemoteLogMetadataManager(MemoryBackend())
    events = [*LIFE, update(1, SegmentState.DELETE_SEGMENT_STARTED)]
    run(rlmm, {0: values(events)})
    assert finished_ids(rlmm, TP) == []
    rlmm = RemoteLogMetadataManager(MemoryBackend())
    events = [
        *LIFE,
        partition_delete(PartitionDeleteState.DELETE_PARTITION_MARKED, OTHER),
        partition_delete(PartitionDeleteState.DELETE_PARTITION_STARTED, OTHER),
        update(3, SegmentState.DELETE_SEGMENT_STARTED, tp=OTHER),
        update(3, SegmentState.DELETE_SEGMENT_FINISHED, tp=OTHER),
        partition_delete(PartitionDeleteState.DELETE_PARTITION_FINISHED, OTHER),
    ]
    follower, _ = run(rlmm, {0: values(events)})
    assert follower.status.dropped == 0
    assert OTHER not in set(rlmm.partitions()) and "payments" not in rlmm.topics()


def test_a_restart_resumes_after_the_last_applied_record(tmp_path: Path) -> None:
    rlmm = open_manager(tmp_path)
    run(rlmm, {0: values(LIFE[:3])})
    rlmm.close()
    rlmm = open_manager(tmp_path)
    assert rlmm.follow_positions(CONFIG.topic) == {0: 3}
    # The first three records, read again, would be invalid transitions: they are not read.
    follower, _ = run(rlmm, {0: values(LIFE)})
    assert follower.status.records == 2 and follower.status.dropped == 0
    assert finished_ids(rlmm, OTHER) == [3]
    rlmm.close()


def test_a_fault_is_counted_and_retried_on_a_new_consumer() -> None:
    rlmm = RemoteLogMetadataManager(MemoryBackend())
    stop = threading.Event()
    made: list[ScriptedConsumer] = []

    def connect(_: FollowConfig) -> ScriptedConsumer:
        if not made:
            made.append(ScriptedConsumer({0: values(LIFE)}, stop, fail_after=1))
        else:
            made.append(ScriptedConsumer({0: values(LIFE)}, stop))
        return made[-1]

    follower = MetadataFollower(rlmm, CONFIG, connect)
    follower.run(stop)
    assert follower.status.errors == 1
    assert "the cluster went away" in (follower.status.last_error or "")
    assert len(made) == 2 and all(c.closed for c in made)
    assert finished_ids(rlmm, TP) == [1] and rlmm.follow_positions(CONFIG.topic) == {0: 5}


def test_an_unreachable_cluster_is_never_caught_up() -> None:
    rlmm = RemoteLogMetadataManager(MemoryBackend())
    stop = threading.Event()
    tries: list[int] = []

    def connect(_: FollowConfig) -> ScriptedConsumer:
        tries.append(1)
        if len(tries) == 3:
            stop.set()
        raise ConnectionError("no broker")

    follower = MetadataFollower(rlmm, CONFIG, connect)
    follower.run(stop)
    assert not follower.status.caught_up and follower.status.errors == 3


def test_a_record_that_does_not_decode_stops_its_partition_only() -> None:
    rlmm = RemoteLogMetadataManager(MemoryBackend())
    good = values(LIFE[:2])
    bad: list[bytes | None] = [*good, b"\x01\x09\x00garbage", *values(LIFE[3:])]
    follower, _ = run(rlmm, {0: bad, 1: values(LIFE[3:])})
    status = follower.status
    assert finished_ids(rlmm, TP) == [1]  # what came before it stands
    assert list(status.failed) == [0] and "offset 2" in status.failed[0]
    assert finished_ids(rlmm, OTHER) == [3]  # partition 1 went on
    assert status.caught_up  # a stopped partition does not hold readiness forever
    assert rlmm.follow_positions(CONFIG.topic) == {0: 2, 1: 2}


def test_served_topics_keep_other_topics_out_of_the_catalog() -> None:
    rlmm = RemoteLogMetadataManager(MemoryBackend())
    config = FollowConfig("b:1", served_topics=("orders",), poll_timeout_ms=1, max_backoff_s=0)
    run(rlmm, {0: values(LIFE)}, config)
    assert finished_ids(rlmm, TP) == [1]
    assert OTHER not in set(rlmm.partitions())


def test_served_metadata_partitions_follow_the_partitioner() -> None:
    topic_id = uuid.UUID(int=1)
    assert served_metadata_partitions({"t": (topic_id, 3)}, 50) == {
        metadata_partition(topic_id, p, 50) for p in range(3)
    }


@pytest.mark.parametrize("batch", [1, 3, 100])
def test_batches_of_any_size_give_the_same_catalog(batch: int) -> None:
    rlmm = RemoteLogMetadataManager(MemoryBackend())
    run(rlmm, {0: values(LIFE)}, batch=batch)
    assert finished_ids(rlmm, TP) == [1] and finished_ids(rlmm, OTHER) == [3]


def test_a_topic_whose_segments_were_all_deleted_is_no_longer_known() -> None:
    """Kafka 4.1 deletes a topic's remote data segment by segment and writes no
    partition-delete record (seen on the real broker): the topic then leaves the catalog's
    listing and no longer resolves."""
    rlmm = RemoteLogMetadataManager(MemoryBackend())
    events = [
        *LIFE,
        update(3, SegmentState.DELETE_SEGMENT_STARTED, tp=OTHER),
        update(3, SegmentState.DELETE_SEGMENT_FINISHED, tp=OTHER),
    ]
    run(rlmm, {0: values(events)})
    assert "payments" not in rlmm.topics() and "orders" in rlmm.topics()
    with pytest.raises(UnknownTopicOrPartitionError):
        rlmm.resolve_topic("payments")


def test_the_follow_metrics() -> None:
    from gateway.service.metrics import _follow  # noqa: PLC0415

    status = FollowStatus(end_offsets={0: 9}, positions={0: 4}, records=4, errors=1)
    status.failed[3] = "bad"
    values = {m.name: m.samples[0].value for m in _follow(status)}
    assert values == {
        "tiered_gateway_metadata_follow_lag": 5,
        "tiered_gateway_metadata_follow_records": 4,
        "tiered_gateway_metadata_follow_dropped": 0,
        "tiered_gateway_metadata_follow_errors": 1,
        "tiered_gateway_metadata_follow_connected": 0,
        "tiered_gateway_metadata_follow_caught_up": 0,
        "tiered_gateway_metadata_follow_failed_partitions": 1,
    }
