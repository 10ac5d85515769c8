"""The streaming planner driven in the order Spark calls it (no Spark: a checkpoint is the JSON
the planner returned), on a bucket tiered in steps: restarts before the first commit, a
partition appearing, retention, deletion, explicit offsets, Trigger.AvailableNow."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from gateway.errors import OffsetOutOfRangeError, RemoteGapError
from gateway.service.locate import remote_bounds
from gateway.spark.driver import build_plan, context_of
from gateway.spark.options import parse_options
from gateway.spark.read_options import StreamLimits
from gateway.spark.stable import stable_end
from gateway.spark.stream import INITIAL, StreamPlanner, from_json
from tests.spark.stream_bucket import TOPIC, Tiered, make_tiered

ALL = StreamLimits()


@pytest.fixture
def tiered(tmp_path: Path) -> Tiered:
    return make_tiered(tmp_path)


def planner(tiered: Tiered, **extra: str) -> StreamPlanner:
    return StreamPlanner(parse_options({"store": tiered.bucket.as_uri(), "subscribe": TOPIC,
                                        **extra}))  # fmt: skip


def offsets(json_offsets: dict[str, object]) -> dict[tuple[str, int], int]:
    return from_json(json.loads(json.dumps(json_offsets)))  # through JSON, as a checkpoint


def ranges(plan_: object) -> list[tuple[int, int, int]]:
    splits = plan_.splits  # type: ignore[attr-defined]
    out: dict[int, tuple[int, int]] = {}
    for s in splits:
        lo, hi = out.get(s.partition, (s.start_offset, s.end_offset))
        out[s.partition] = (min(lo, s.start_offset), max(hi, s.end_offset))
    return sorted((p, lo, hi) for p, (lo, hi) in out.items())


def test_the_initial_offset_is_constant_and_resolved_once(tiered: Tiered) -> None:
    tiered.tier(2)
    first = planner(tiered, startingOffsets="latest")
    assert first.initial() == first.initial() == {INITIAL: True}
    batch0 = first.latest(first.initial(), ALL)  # logged as batch 0's end
    assert first.plan(first.initial(), batch0).splits == ()  # batch 0 reads nothing
    ends = offsets(batch0)
    tiered.tier(3)  # more is tiered, then the query dies before batch 0 commits
    again = planner(tiered, startingOffsets="latest")
    assert again.plan(again.initial(), batch0).splits == ()  # the re-run: still nothing
    batch1 = again.latest(batch0, ALL)
    # Batch 1 reads exactly what was tiered after the logged starts: nothing is skipped.
    assert ranges(again.plan(batch0, batch1)) == [
        (p, ends[TOPIC, p], offsets(batch1)[TOPIC, p]) for p in (0, 1)
    ]


def test_a_new_partition_enters_at_its_start_and_retention_before_reading_is_loss(
    tiered: Tiered,
) -> None:
    tiered.tier(2, partitions=(0,))
    query = planner(tiered)
    batch0 = query.latest(query.initial(), ALL)
    assert set(offsets(batch0)) == {(TOPIC, 0)}
    batch1 = query.latest(batch0, ALL)
    tiered.tier(3)  # partition 1 appears
    batch2 = query.latest(batch1, ALL)
    assert offsets(batch2)[TOPIC, 1] == 0  # enters at its remote start, read nothing yet
    assert [r[0] for r in ranges(query.plan(batch1, batch2))] == [0]
    tiered.delete_first_segment(1)  # retention, before the query read partition 1
    restarted = planner(tiered)
    batch3 = restarted.latest(batch2, ALL)
    with pytest.raises(RemoteGapError, match="failOnDataLoss"):
        restarted.plan(batch2, batch3)


def test_a_partition_deleted_or_truncated_under_the_query(tiered: Tiered) -> None:
    tiered.tier(3)
    query = planner(tiered)
    batch0 = query.latest(query.initial(), ALL)
    batch1 = query.latest(batch0, ALL)
    while any(m.parent.name == "0" for m in tiered.bucket.rglob("*.rsm-manifest")):
        tiered.delete_first_segment(0)  # every segment of partition 0 goes
    with pytest.raises(RemoteGapError, match="partition 0 of events is no longer"):
        planner(tiered).latest(batch1, ALL)
    lenient = planner(tiered, failOnDataLoss="false")
    batch2 = lenient.latest(batch1, ALL)
    assert offsets(batch2)[TOPIC, 0] == offsets(batch1)[TOPIC, 0]  # kept, nothing to read


def test_a_topic_recreated_under_the_query(tiered: Tiered) -> None:
    tiered.tier(2)
    query = planner(tiered)
    batch1 = query.latest(query.latest(query.initial(), ALL), ALL)
    tiered.tier(1, topic_id=uuid.uuid4())  # the topic deleted and created again, then tiered
    with pytest.raises(RemoteGapError, match="re-created"):
        planner(tiered).latest(batch1, ALL)
    lenient = planner(tiered, failOnDataLoss="false")
    batch2 = lenient.latest(batch1, ALL)
    assert offsets(batch2) == {(TOPIC, 0): 0, (TOPIC, 1): 0}  # the new incarnation's start
    assert lenient.plan(batch1, batch2).splits == ()  # the old offsets: nothing to read
    batch3 = lenient.latest(batch2, ALL)
    assert all(hi > 0 for hi in offsets(batch3).values())  # then it is read from there


def test_explicit_offsets_outside_the_remote_tier(tiered: Tiered) -> None:
    tiered.tier(3)
    store = tiered.bucket.as_uri()
    past = {"store": store, "subscribe": TOPIC, "startingOffsets": '{"events":{"0":100000}}'}
    with pytest.raises(OffsetOutOfRangeError, match="past the remote log end"):
        build_plan(parse_options(past))
    with pytest.raises(OffsetOutOfRangeError, match="past the remote log end"):
        query = planner(tiered, startingOffsets='{"events":{"0":100000}}')
        query.latest(query.initial(), ALL)
    to = {"store": store, "subscribe": TOPIC, "endingOffsets": '{"events":{"0":100000}}'}
    with pytest.raises(OffsetOutOfRangeError, match="ending offset 100000"):
        build_plan(parse_options(to))
    retained = tiered.delete_first_segment(0)  # offsets 0.. retained-1 are gone
    early = {"store": store, "subscribe": TOPIC, "startingOffsets": '{"events":{"0":1}}'}
    with pytest.raises(RemoteGapError, match="before the remote log start"):
        build_plan(parse_options(early))
    lenient = build_plan(parse_options({**early, "failOnDataLoss": "false"}))
    assert min(s.start_offset for s in lenient.splits if s.partition == 0) == retained


def test_available_now_reaches_its_target_despite_a_minimum(tiered: Tiered) -> None:
    tiered.tier(2)
    query = planner(tiered, minOffsetsPerTrigger="1000000", maxOffsetsPerTrigger="1000000")
    query.freeze()
    batch0 = query.latest(query.initial(), ALL)
    tiered.tier(99)  # after the target was taken: not read by this run
    limits = StreamLimits(1_000_000, 1_000_000)
    batch1 = query.latest(batch0, limits)
    assert batch1 != batch0  # the minimum does not hold AvailableNow back
    assert query.latest(batch1, limits) == batch1  # then the target is reached: done
    unfrozen = offsets(planner(tiered).latest(batch0, ALL))  # what a run started now reads
    assert all(offsets(batch1)[k] < unfrozen[k] for k in unfrozen)


def test_read_committed_starts_between_the_stable_offset_and_the_end(tiered: Tiered) -> None:
    committed = {"isolation.level": "read_committed"}
    for step in range(1, 6):
        tiered.tier(step)
        probe = planner(tiered, **committed)
        probe.latest(probe.initial(), ALL)
        rlmm, ctx = probe._rlmm(), context_of(probe.opts)
        for tp in rlmm.partitions():
            lso, end = stable_end(rlmm, tp, ctx), remote_bounds(rlmm, tp)[1]
            if lso < end:  # a transaction open at the remote end: start inside it
                start = json.dumps({TOPIC: {str(tp.partition): lso + 1}})
                query = planner(tiered, startingOffsets=start, **committed)
                batch0 = query.latest(query.initial(), ALL)
                assert offsets(batch0)[TOPIC, tp.partition] == lso + 1
                batch1 = query.latest(batch0, ALL)  # waits for the stable offset to pass it
                assert offsets(batch1)[TOPIC, tp.partition] == lso + 1
                return
    raise AssertionError("no tier step left a transaction open at the remote end")


def test_a_named_topic_not_tiered_yet_is_waited_for(tiered: Tiered) -> None:
    tiered.tier(2)
    query = StreamPlanner(parse_options({"store": tiered.bucket.as_uri(),
                                         "subscribe": f"{TOPIC},later"}))  # fmt: skip
    batch0 = query.latest(query.initial(), ALL)
    assert {t for t, _ in offsets(batch0)} == {TOPIC}
