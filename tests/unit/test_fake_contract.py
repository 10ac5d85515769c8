"""The fake services of the adapters' unit tests answer as the real service does (issue 33).

The HTTP router tests (``tests/unit/api/fake.py``) and the listener tests
(``tests/unit/listener/support.py``) run against hand-written fakes; a fake that drifts from
the real service makes those tests prove the wrong thing. Each case here is written in terms of
the subject's own bounds and runs, unchanged, against both fakes and against the real
:class:`GatewayService` on the demo bucket: the bounds of a partition, fetches at its start, in
a batch, at its end and past it, at least one batch under any ``max_bytes``, unknown topics and
partitions, ListOffsets (earliest, latest for both isolation levels, max timestamp, a time past
the newest record), read_committed's last stable offset, and the records decoded from a fetch.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from gateway.deadline import Deadline
from gateway.demo import DemoBucket
from gateway.errors import (
    InvalidRequestError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from gateway.kafka.batch import iter_batches
from gateway.service.types import FetchResult, IsolationLevel
from tests.unit.api import fake as api_fake
from tests.unit.listener import support as listener_fake
from tests.unit.service.support import demo_settings, ready_service

RU, RC = IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED
FAR_FUTURE_MS = 4_102_444_800_000  # 2100-01-01


@dataclass(frozen=True)
class Subject:
    """A service, the partition with records the cases read, and how to count its batches."""

    service: Any
    topic: str
    partition: int
    framed: bool  # its batches are real v2 batches (the API fake's are opaque bytes)
    decodes: bool  # it has ``decode``


@asynccontextmanager
async def _real(demo: DemoBucket) -> AsyncIterator[Subject]:
    async with ready_service(demo_settings(demo)) as service:
        yield Subject(service, "orders", 0, framed=True, decodes=True)


@asynccontextmanager
async def _api(demo: DemoBucket) -> AsyncIterator[Subject]:
    yield Subject(api_fake.FakeService(), api_fake.TOPIC, 0, framed=False, decodes=True)


@asynccontextmanager
async def _listener(demo: DemoBucket) -> AsyncIterator[Subject]:
    yield Subject(listener_fake.FakeService(), listener_fake.TOPIC, 0, framed=True, decodes=False)


SUBJECTS: dict[str, Callable[[DemoBucket], AbstractAsyncContextManager[Subject]]] = {
    "real service": _real,
    "api fake": _api,
    "listener fake": _listener,
}


@pytest.fixture(params=list(SUBJECTS))
async def subject(request: pytest.FixtureRequest, demo: DemoBucket) -> AsyncIterator[Subject]:
    async with SUBJECTS[request.param](demo) as s:
        yield s


def _deadline() -> Deadline:
    return Deadline.after(30)


async def _fetch(
    s: Subject, offset: int, max_bytes: int = 1 << 20, isolation: IsolationLevel = RU
) -> FetchResult:
    return await s.service.fetch(  # type: ignore[no-any-return]
        s.topic, s.partition, offset, max_bytes=max_bytes, isolation=isolation,
        deadline=_deadline(),
    )  # fmt: skip


def _batches(s: Subject, result: FetchResult) -> list[tuple[int, int]]:
    """(first offset, last offset) of every batch of ``result``."""
    if not s.framed:
        return [(part.first_offset, part.last_offset) for part in result.batches]
    return [
        (b.base_offset, b.last_offset) for part in result.batches for b in iter_batches(part.data)
    ]


async def _bounds(s: Subject) -> tuple[int, int]:
    info = await s.service.partition(s.topic, s.partition)
    assert info.topic == s.topic and info.partition == s.partition
    assert 0 <= info.remote_log_start_offset < info.remote_log_end_offset
    return info.remote_log_start_offset, info.remote_log_end_offset


async def test_the_partition_is_listed_with_its_bounds(subject: Subject) -> None:
    start, end = await _bounds(subject)
    listed = {p.partition: p for p in await subject.service.partitions(subject.topic)}
    info = listed[subject.partition]
    assert (info.remote_log_start_offset, info.remote_log_end_offset) == (start, end)
    assert info.topic_id in (await subject.service.topics())[subject.topic]


async def test_a_fetch_at_the_start_answers_the_batch_holding_it(subject: Subject) -> None:
    start, end = await _bounds(subject)
    result = await _fetch(subject, start)
    batches = _batches(subject, result)
    assert batches and batches[0][0] <= start <= batches[0][1]
    assert all(a[1] < b[0] for a, b in itertools.pairwise(batches))
    assert result.next_offset == batches[-1][1] + 1 <= end
    assert (result.log_start_offset, result.log_end_offset) == (start, end)
    assert result.aborted_transactions is None and result.last_stable_offset is None


async def test_a_fetch_inside_a_batch_answers_that_whole_batch(subject: Subject) -> None:
    start, _ = await _bounds(subject)
    first = _batches(subject, await _fetch(subject, start, max_bytes=1))[0]
    inside = first[0] + 1
    if inside > first[1]:
        pytest.skip("the first batch holds one record")
    assert _batches(subject, await _fetch(subject, inside, max_bytes=1))[0] == first


@pytest.mark.parametrize(("offset", "max_bytes"), [(-1, 1 << 20), (0, 0), (0, -1)])
async def test_a_negative_offset_or_no_max_bytes_is_a_bad_request(
    subject: Subject, offset: int, max_bytes: int
) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        await _fetch(subject, offset, max_bytes=max_bytes)
    assert caught.value.parameter == ("offset" if offset < 0 else "max_bytes")


@pytest.mark.parametrize("max_bytes", [1, 64])
async def test_at_least_one_batch_whatever_max_bytes(subject: Subject, max_bytes: int) -> None:
    start, _ = await _bounds(subject)
    result = await _fetch(subject, start, max_bytes=max_bytes)
    batches = _batches(subject, result)
    assert len(batches) == 1
    assert result.next_offset == batches[0][1] + 1


async def test_a_fetch_at_the_end_answers_nothing(subject: Subject) -> None:
    start, end = await _bounds(subject)
    result = await _fetch(subject, end)
    assert result.batches == () and result.next_offset == end
    assert (result.log_start_offset, result.log_end_offset) == (start, end)


async def test_a_fetch_past_the_end_is_out_of_range_with_the_bounds(subject: Subject) -> None:
    start, end = await _bounds(subject)
    with pytest.raises(OffsetOutOfRangeError) as caught:
        await _fetch(subject, end + 1)
    assert (caught.value.log_start_offset, caught.value.log_end_offset) == (start, end)


@pytest.mark.parametrize("where", ["topic", "partition"])
async def test_unknown_topics_and_partitions(subject: Subject, where: str) -> None:
    topic = "no-such-topic" if where == "topic" else subject.topic
    partition = subject.partition if where == "topic" else 977
    with pytest.raises(UnknownTopicOrPartitionError):
        await subject.service.partition(topic, partition)
    with pytest.raises(UnknownTopicOrPartitionError):
        await subject.service.fetch(
            topic, partition, 0, max_bytes=1 << 20, isolation=RU, deadline=_deadline()
        )
    with pytest.raises(UnknownTopicOrPartitionError):
        await subject.service.list_offsets(topic, partition, "latest", _deadline())


async def test_list_offsets_earliest_latest_and_max_timestamp(subject: Subject) -> None:
    start, end = await _bounds(subject)
    svc, topic, p = subject.service, subject.topic, subject.partition
    assert (await svc.list_offsets(topic, p, "earliest", _deadline())).offset == start
    assert (await svc.list_offsets(topic, p, "latest", _deadline())).offset == end
    newest = await svc.list_offsets(topic, p, "max_timestamp", _deadline())
    assert start <= newest.offset < end and newest.timestamp >= 0
    past = await svc.list_offsets(topic, p, FAR_FUTURE_MS, _deadline())
    assert (past.offset, past.timestamp) == (-1, -1)
    first = await svc.list_offsets(topic, p, 0, _deadline())  # every record is at or after 0
    assert first.offset == start and first.timestamp >= 0


async def test_read_committed_stops_at_the_last_stable_offset(subject: Subject) -> None:
    start, end = await _bounds(subject)
    svc, topic, p = subject.service, subject.topic, subject.partition
    stable = (await svc.list_offsets(topic, p, "latest", _deadline(), isolation=RC)).offset
    assert start <= stable <= end
    if stable == start:
        pytest.skip("nothing is stable")
    result = await _fetch(subject, start, isolation=RC)
    assert result.last_stable_offset == stable
    assert result.aborted_transactions is not None
    assert _batches(subject, result)[-1][1] < stable
    assert result.next_offset <= stable


async def test_the_records_decoded_from_a_fetch(subject: Subject) -> None:
    if not subject.decodes:
        pytest.skip("this fake serves the listener, which sends batches as they are")
    start, _ = await _bounds(subject)
    inside = start + 1
    result = await _fetch(subject, inside, max_bytes=1 << 20)
    records = await subject.service.decode(result, inside, RU)
    offsets = [r.offset for r in records]
    assert offsets and offsets[0] == inside
    assert offsets == sorted(set(offsets)) and offsets[-1] < result.next_offset
    assert all(r.timestamp == r.record.timestamp for r in records)
