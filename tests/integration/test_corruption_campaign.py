"""Issue 13's corruption campaign: one flipped byte at a time, every answer is either the
records as written or a typed error (:mod:`tests.integration.campaign` has the harness; run
``python -m tests.integration.campaign`` for the table alone).

Event-loop lag. The issue asks for none above 100 ms. The wall-clock overshoot of a 10 ms
sleep is what a client feels, but on a loaded 2-core machine the OS alone stretches it past
100 ms now and then (10 of 9,000 flips in one slow run, while the loop thread never computed
for more than 9 ms between two ticks). So both runs assert on the loop thread's CPU time
between two ticks: only code running on the loop makes it large (waiting for a core or for
the GIL costs no CPU time), so load cannot fail it; it does not see a loop blocked without
computing (a sleep, a lock), which the ``hang`` verdict catches when it lasts. The ``slow`` run
also asserts on the wall clock, counting a flip only when its lag reproduces: each flip above
100 ms runs again alone, and a loop-blocking path is blocking again, while scheduling noise
rarely strikes the same flip twice.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections import Counter
from collections.abc import Callable
from typing import Any, cast

import pytest

from gateway.service.core import GatewayService
from gateway.service.types import FetchedRecord, FetchResult, IsolationLevel
from tests.integration.campaign import (
    KINDS,
    LAG_LIMIT_MS,
    Fixture,
    PartitionOracle,
    Problem,
    assert_no_bad_answer,
    build_fixture,
    control_flips,
    every_byte_flips,
    fresh_service,
    lagging,
    report,
    run_campaign,
    sample_flips,
    service_settings,
    smallest_segment,
    table,
    walk,
)

SAMPLED_FLIPS = 600  # 50 per (topic, kind) cell; the slow run samples 2,000 more
SLOW_FLIPS = 2000
SEED = int(os.environ.get("CAMPAIGN_SEED", "13"))
WORKERS = min(4, os.cpu_count() or 2)


@pytest.fixture(scope="module")
def fixture(tmp_path_factory: pytest.TempPathFactory) -> Fixture:
    return build_fixture(tmp_path_factory.mktemp("campaign"))


def test_an_undamaged_bucket_reads_as_written(fixture: Fixture) -> None:
    """The oracle's own check: with nothing flipped, every walk and probe of every topic, at
    every max_bytes, equals what was written."""
    outcomes = run_campaign(fixture, control_flips(fixture), workers=WORKERS)
    assert {o.verdict for o in outcomes} == {"same"}, report(fixture, outcomes)


def test_the_harness_classifies_hangs_crashes_and_exceptions(fixture: Fixture) -> None:
    """A flip that blocks its event loop is killed and called a hang, a worker that dies and
    an exception that is not a GatewayError are untyped; the flips after them still run."""
    base = control_flips(fixture)
    flips = [
        dataclasses.replace(base[0], index=0, sabotage="block"),
        dataclasses.replace(base[1], index=1, sabotage="exit"),
        dataclasses.replace(base[2], index=2, sabotage="raise"),
        dataclasses.replace(base[3], index=3),
    ]
    # the timeout only has to outlast one unharmed flip (~0.1 s): generous for a loaded machine
    outcomes = run_campaign(fixture, flips, workers=2, flip_timeout=10)
    assert [o.verdict for o in outcomes] == ["hang", "untyped", "untyped", "same"]
    assert "last step: open the service" in outcomes[0].problems[0].detail
    assert outcomes[1].label == "worker process died"
    assert outcomes[2].label == "untyped:RuntimeError"


class _Tampered:
    """A service whose answers are changed after the fact, to show the walk notices."""

    def __init__(
        self,
        svc: GatewayService,
        records: Callable[[list[FetchedRecord]], list[FetchedRecord]] = lambda r: r,
        result: Callable[[FetchResult], FetchResult] = lambda r: r,
        uncommitted: bool = False,
    ) -> None:
        self.svc, self.records, self.result, self.uncommitted = svc, records, result, uncommitted

    async def fetch(self, *args: Any, **kwargs: Any) -> FetchResult:
        return self.result(await self.svc.fetch(*args, **kwargs))

    async def decode(
        self, result: FetchResult, offset: int, isolation: IsolationLevel
    ) -> list[FetchedRecord]:
        if self.uncommitted:
            isolation = IsolationLevel.READ_UNCOMMITTED
        return self.records(await self.svc.decode(result, offset, isolation))


def test_the_walk_notices_wrong_answers(fixture: Fixture) -> None:
    topic = "plain.v1-raw"
    part = fixture.oracles[topic][0]

    def changed_value(records: list[FetchedRecord]) -> list[FetchedRecord]:
        first = records[0]
        record = cast(Any, first.record)
        fake = type("R", (), {"key": record.key, "value": b"changed", "headers": record.headers})
        return [dataclasses.replace(first, record=fake()), *records[1:]]

    def older_epoch(records: list[FetchedRecord]) -> list[FetchedRecord]:
        return [dataclasses.replace(r, leader_epoch=(r.leader_epoch or 0) + 1) for r in records]

    cases: list[tuple[dict[str, Any], IsolationLevel, str]] = [
        ({"records": lambda r: r[:-1]}, IsolationLevel.READ_UNCOMMITTED, "missing records"),
        (
            {"records": lambda r: [*r, r[-1]]},
            IsolationLevel.READ_UNCOMMITTED,
            "repeated or reordered records",
        ),
        ({"records": changed_value}, IsolationLevel.READ_UNCOMMITTED, "changed value"),
        ({"records": older_epoch}, IsolationLevel.READ_UNCOMMITTED, "changed leader_epoch"),
        (
            {"uncommitted": True},
            IsolationLevel.READ_COMMITTED,
            "aborted records under read_committed",
        ),
        (
            {"result": lambda r: dataclasses.replace(r, log_end_offset=r.log_end_offset - 1)},
            IsolationLevel.READ_UNCOMMITTED,
            "wrong log bounds",
        ),
        (
            {"result": lambda r: dataclasses.replace(r, next_offset=r.next_offset + 3)},
            IsolationLevel.READ_UNCOMMITTED,
            "missing records",
        ),
    ]

    async def walks() -> list[list[Problem]]:
        found: list[list[Problem]] = []
        settings = service_settings(fixture.buckets / topic, fixture.key_pair_spec)
        async with fresh_service(settings) as svc:
            assert isinstance(svc, GatewayService)
            assert await walk(svc, part, IsolationLevel.READ_COMMITTED, 2048, lambda _: None) == []
            for tamper, isolation, _ in cases:
                fake = cast(GatewayService, _Tampered(svc, **tamper))
                found.append(await walk(fake, part, isolation, 2048, lambda _: None))
        return found

    problems = asyncio.run(walks())
    for found, (_, _, label) in zip(problems, cases, strict=True):
        assert found and found[0].verdict == "wrong", label
        assert found[0].label == label, found


def test_the_oracle_follows_kafka_list_offsets(fixture: Fixture) -> None:
    part: PartitionOracle = fixture.oracles["sealed.eu-1"][0]
    first_offset, first_ts, first_epoch = part.stamps[0]
    assert part.for_timestamp(first_ts - 1000).offset == first_offset
    assert part.for_timestamp(10**15).offset == -1
    for offset, ts, _ in part.stamps:
        hit = part.for_timestamp(ts)
        assert hit.timestamp >= ts and hit.offset <= offset
        assert all(t < ts for o, t, _ in part.stamps if o < hit.offset)
        assert hit.leader_epoch == next(e for o, _, e in part.stamps if o == hit.offset)
    assert first_epoch == 0 and part.last_epoch == 5


def _sampled(fixture: Fixture, count: int, seed: int) -> None:
    flips = sample_flips(fixture, count, seed)
    cells = Counter((f.topic, f.kind) for f in flips)
    assert set(cells) == {(t, k) for t in fixture.topics() for k in KINDS}
    assert min(cells.values()) >= count // len(cells)
    outcomes = run_campaign(fixture, flips, workers=WORKERS)
    assert_no_bad_answer(fixture, outcomes)
    assert lagging(outcomes, cpu=True) == 0, table(outcomes)


@pytest.mark.timeout(1800)
def test_sampled_flips_give_the_records_as_written_or_a_typed_error(fixture: Fixture) -> None:
    _sampled(fixture, SAMPLED_FLIPS, SEED)


@pytest.mark.slow
@pytest.mark.timeout(7200)
def test_more_sampled_flips_give_the_records_as_written_or_a_typed_error(
    fixture: Fixture,
) -> None:
    _sampled(fixture, SLOW_FLIPS, SEED + 2)  # SEED + 1: the readers campaign's slow run


@pytest.mark.slow
@pytest.mark.timeout(7200)
def test_every_byte_of_one_segment(fixture: Fixture) -> None:
    """Every byte of the three objects of the smallest segment of the untransformed topic
    (where the batch framing is in plain sight), with three masks."""
    objects = smallest_segment(fixture, "plain.v1-raw")
    flips = every_byte_flips(fixture, objects, (0x01, 0x80, 0xFF), SEED)
    outcomes = run_campaign(fixture, flips, workers=WORKERS)
    assert_no_bad_answer(fixture, outcomes)
    assert lagging(outcomes, cpu=True) == 0, table(outcomes)
    slow = [o.flip for o in outcomes if o.lag_ms > LAG_LIMIT_MS]
    again = run_campaign(fixture, slow, workers=1) if slow else []
    assert lagging(again) == 0, f"wall-clock lag above {LAG_LIMIT_MS} ms, twice\n{table(again)}"
