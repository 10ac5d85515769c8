"""The corruption campaign through the Kafka listener (issue 19; harness:
:mod:`tests.integration.campaign_listener`): one flipped byte at a time, what a consumer gets
over the wire, read by kafka-python's record reader with every CRC checked, is the records as
written or a Kafka error code; 0 wrong answers, 0 hangs, no ``UNKNOWN_SERVER_ERROR``. About
0.06 s per flip on 2 workers (1,500 sampled flips took 91 s)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import struct
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from gateway.errors import OffsetOutOfRangeError
from gateway.service.core import GatewayService
from gateway.service.types import FetchedBatches, FetchResult, OffsetResult
from tests.integration.campaign import (
    KINDS,
    Fixture,
    Outcome,
    Problem,
    assert_no_bad_answer,
    build_fixture,
    control_flips,
    every_byte_flips,
    fresh_service,
    report,
    run_campaign,
    sample_flips,
    service_settings,
    smallest_segment,
    table,
)
from tests.integration.campaign_listener import check_listener, read_through_listener

SAMPLED_FLIPS = 480  # 40 per (topic, kind) cell; the slow run samples 1,500 more
SLOW_FLIPS = 1500
SEED = int(os.environ.get("CAMPAIGN_SEED", "19"))
WORKERS = min(4, os.cpu_count() or 2)
FLIP_TIMEOUT_S = 60.0  # a hang only: an unharmed flip takes ~0.3 s


@pytest.fixture(scope="module")
def fixture(tmp_path_factory: pytest.TempPathFactory) -> Fixture:
    return build_fixture(tmp_path_factory.mktemp("listener-campaign"))


def _run(fixture: Fixture, flips: Sequence[Any]) -> list[Outcome]:
    return run_campaign(fixture, flips, workers=WORKERS, flip_timeout=FLIP_TIMEOUT_S,
                        check=check_listener)  # fmt: skip


def test_an_undamaged_bucket_reads_as_written_through_the_listener(fixture: Fixture) -> None:
    """The oracle's own check: nothing flipped, every walk (both isolation levels, every
    max_bytes) and every ListOffsets probe of every topic equals what was written."""
    outcomes = _run(fixture, control_flips(fixture))
    assert {o.verdict for o in outcomes} == {"same"}, report(fixture, outcomes)


def _first_batch_dropped(result: FetchResult) -> FetchResult:
    data = b"".join(bytes(b.data) for b in result.batches)
    if not data:
        return result
    end = 12 + struct.unpack_from(">i", data, 8)[0]
    if end >= len(data):
        return result
    rest = FetchedBatches(0, data[end:], 0, 0)
    return dataclasses.replace(result, batches=(rest,))


def _last_byte_flipped(result: FetchResult) -> FetchResult:
    data = bytearray(b"".join(bytes(b.data) for b in result.batches))
    if not data:
        return result
    data[-1] ^= 0x01  # in the last record of the last batch: under its CRC
    return dataclasses.replace(result, batches=(FetchedBatches(0, bytes(data), 0, 0),))


class _Tampered:
    """The service, its answers changed after the fact: the walk must notice."""

    def __init__(
        self,
        svc: GatewayService,
        fetched: Callable[[FetchResult], FetchResult] = lambda r: r,
        offsets: Callable[[OffsetResult], OffsetResult] = lambda r: r,
        out_of_range: bool = False,
    ) -> None:
        self.svc, self.fetched, self.offsets = svc, fetched, offsets
        self.out_of_range = out_of_range

    async def fetch(self, *args: Any, **kwargs: Any) -> FetchResult:
        result = self.fetched(await self.svc.fetch(*args, **kwargs))
        if self.out_of_range and args[2] > 0:  # a log said to end before the offset asked
            raise OffsetOutOfRangeError("tampered", 0, args[2], topic_id=result.topic_id)
        return result

    async def list_offsets(self, *args: Any, **kwargs: Any) -> OffsetResult:
        return self.offsets(await self.svc.list_offsets(*args, **kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.svc, name)


def test_the_walk_over_the_wire_notices_wrong_answers(fixture: Fixture) -> None:
    """Each way of being wrong, made by a tampered service behind a real listener, is a
    ``wrong`` verdict with its label (so a campaign with none means none happened)."""
    topic = "plain.v1-raw"
    flip = control_flips(fixture)[0]
    assert flip.topic == topic
    cases: list[tuple[dict[str, Any], str]] = [
        ({"fetched": _first_batch_dropped}, "missing records"),
        ({"fetched": _last_byte_flipped}, "bad CRC served"),
        ({"fetched": lambda r: dataclasses.replace(r, aborted_transactions=(
            () if r.aborted_transactions is not None else None))},
         "aborted records under read_committed"),
        ({"fetched": lambda r: dataclasses.replace(r, log_end_offset=r.log_end_offset + 1)},
         "wrong log bounds"),
        ({"offsets": lambda r: dataclasses.replace(r, offset=r.offset + 1)},
         "wrong ListOffsets -2"),
        ({"out_of_range": True}, "out of range inside the log"),
    ]  # fmt: skip

    async def run() -> list[list[Problem]]:
        found: list[list[Problem]] = []
        settings = service_settings(fixture.buckets / topic, fixture.key_pair_spec)
        async with fresh_service(settings) as svc:
            assert isinstance(svc, GatewayService)
            oracles = fixture.oracles[topic]
            assert await read_through_listener(svc, settings, oracles, flip, lambda _: None) == []
            for tamper, _ in cases:
                fake: Any = _Tampered(svc, **tamper)
                found.append(await read_through_listener(fake, settings, oracles, flip,
                                                         lambda _: None))  # fmt: skip
        return found

    for problems, (_, label) in zip(asyncio.run(run()), cases, strict=True):
        assert problems and problems[0].verdict == "wrong", (label, problems)
        assert problems[0].label == label, problems


def _sampled(fixture: Fixture, count: int, seed: int) -> None:
    flips = sample_flips(fixture, count, seed)
    cells = Counter((f.topic, f.kind) for f in flips)
    assert set(cells) == {(t, k) for t in fixture.topics() for k in KINDS}
    outcomes = _run(fixture, flips)
    counts = assert_no_bad_answer(fixture, outcomes)
    assert counts["typed_error"] > 0, table(outcomes)  # the flips do damage what is read


@pytest.mark.timeout(1800)
def test_sampled_flips_give_a_consumer_the_records_as_written_or_an_error(
    fixture: Fixture,
) -> None:
    _sampled(fixture, SAMPLED_FLIPS, SEED)


@pytest.mark.slow
@pytest.mark.timeout(7200)
def test_more_sampled_flips_give_a_consumer_the_records_as_written_or_an_error(
    fixture: Fixture,
) -> None:
    _sampled(fixture, SLOW_FLIPS, SEED + 1)


@pytest.mark.slow
@pytest.mark.timeout(7200)
def test_every_byte_of_one_segment_through_the_listener(fixture: Fixture) -> None:
    """Every byte of the three objects of the smallest segment of the untransformed topic
    (the batch framing in plain sight), with three masks: ~9,000 flips."""
    objects = smallest_segment(fixture, "plain.v1-raw")
    outcomes = _run(fixture, every_byte_flips(fixture, objects, (0x01, 0x80, 0xFF), SEED))
    assert_no_bad_answer(fixture, outcomes)
