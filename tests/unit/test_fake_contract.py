"""The fake service (``tests/fakes/service.py``) answers as the real one: the same cases, value
by value, against :class:`~gateway.service.core.GatewayService` on the demo bucket and against
the fake holding the same data.

The fake's catalog is built from the broker's segment files the demo wrote before tiering them
(kafka-python's decoder; the last stable offset and the aborted transactions by brute force over
the batches), not from the service's answers; only the topic ids come from the service. The
demo has no transaction left open, so ``TransactionPendingError`` is not among the compared
answers (the fake's is checked by the adapters' tests); read_committed answers are compared,
with their last stable offset and aborted transactions. Of those, the ones that begin in the
batches read: the service, as Kafka, also names transactions up to the next offset index entry
past the read (an upper bound the fake, without indexes, does not know); a consumer ignores
them.
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from kafka.record import MemoryRecords

from gateway.deadline import Deadline
from gateway.demo import DemoBucket
from gateway.errors import GatewayError, OffsetOutOfRangeError
from gateway.service.core import GatewayService
from gateway.service.protocol import Service
from gateway.service.types import AbortedTransaction, FetchResult, IsolationLevel
from tests.fakes.service import FakeBatch, FakePartition, FakeService, FakeTopic
from tests.unit.service.support import demo_settings, ready_service

RU, RC = IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED
PARTITIONS = [("orders", 0), ("clicks.v2-raw", 2), ("payments", 1), ("inventory", 0)]
TOPICS = {"orders": (0, 1), "clicks.v2-raw": (0, 1, 2), "audit": (0,), "payments": (0, 1),
          "inventory": (0,)}  # fmt: skip


def partition_from_files(segment_dir: Path) -> FakePartition:
    """A partition as the broker wrote it: its batches, leader epoch lineage (each epoch from
    its first batch), last stable offset (the first transactional batch of a producer with no
    later marker) and aborted transactions (each from its first batch)."""
    batches: list[FakeBatch] = []
    epochs: list[tuple[int, int]] = []
    aborted: dict[AbortedTransaction, int] = {}  # -> its marker's offset
    open_: dict[int, int] = {}  # producer id -> first offset of its open transaction
    for log in sorted(segment_dir.glob("*.log")):
        segment = int(log.stem)
        data = log.read_bytes()
        records, pos = MemoryRecords(data), 0
        while (batch := records.next_batch()) is not None:
            size = 12 + struct.unpack_from(">i", data, pos + 8)[0]
            raw, pos = data[pos : pos + size], pos + size
            recs = list(batch)
            base, last = batch.base_offset, batch.base_offset + batch.last_offset_delta
            epoch = batch.leader_epoch if batch.leader_epoch >= 0 else None
            if epoch is not None and (not epochs or epochs[-1][0] != epoch):
                epochs.append((epoch, base))
            stamps = {r.offset: r.timestamp for r in recs}
            ts = tuple(stamps.get(o, -1) for o in range(base, last + 1))
            batches.append(FakeBatch(base, last, raw, ts, epoch, segment))
            if batch.is_control_batch:
                first = open_.pop(batch.producer_id, None)
                if first is not None and struct.unpack(">hh", recs[0].key)[1] == 0:  # ABORT
                    aborted[AbortedTransaction(batch.producer_id, first)] = base
            elif batch.is_transactional:
                open_.setdefault(batch.producer_id, base)
    stable = min(open_.values(), default=None)
    ordered = tuple(sorted(aborted, key=lambda a: a.first_offset))
    return FakePartition(batches, tuple(epochs), stable, ordered, markers=aborted)


async def fake_of(demo: DemoBucket, real: GatewayService) -> FakeService:
    """The fake over the demo's files; the topic ids, the stored sizes and segment counts (of
    encrypted, compressed uploads; a log's last segment is never tiered) from ``real``."""
    ids = await real.topics()
    catalog = {topic: FakeTopic(ids[topic]) for topic in TOPICS}
    for topic, parts in TOPICS.items():
        for p in parts:
            held = partition_from_files(demo.root / "segments" / f"{topic}-{p}")
            info = await real.partition(topic, p)
            held.size, held.segment_count = info.size, info.segment_count
            catalog[topic].partitions[p] = held
    return FakeService(catalog)


@pytest.fixture
async def both(demo: DemoBucket) -> AsyncIterator[tuple[GatewayService, FakeService]]:
    async with ready_service(demo_settings(demo)) as real:
        yield real, await fake_of(demo, real)


Answer = Any
Case = Callable[[Service], Any]


def _result(result: FetchResult) -> Answer:
    data = b"".join(bytes(b.data) for b in result.batches)
    firsts = [(b.first_offset, b.last_offset) for b in result.batches]
    aborted = None
    if result.aborted_transactions is not None:  # those that begin in the batches read
        aborted = sorted((a.producer_id, a.first_offset) for a in result.aborted_transactions
                         if a.first_offset < result.next_offset)  # fmt: skip
    return (result.topic, result.topic_id, result.partition, firsts and firsts[0][0],
            firsts and firsts[-1][1], data, result.next_offset, result.log_start_offset,
            result.log_end_offset, aborted, result.last_stable_offset)  # fmt: skip


async def answer(service: Service, ask: Case) -> Answer:
    """The answer, or the error's type and the fields the adapters read from it."""
    try:
        got = await ask(service)
    except GatewayError as exc:
        fields = (exc.log_start_offset, exc.log_end_offset, exc.topic_id) if isinstance(
            exc, OffsetOutOfRangeError) else getattr(exc, "parameter", None)  # fmt: skip
        return type(exc).__name__, fields
    if isinstance(got, FetchResult):
        return _result(got)
    return got


def _fetch(topic: str, partition: int, offset: int, max_bytes: int, isolation: IsolationLevel
           ) -> Case:  # fmt: skip
    return lambda s: s.fetch(topic, partition, offset, max_bytes=max_bytes, isolation=isolation,
                             deadline=Deadline.after(10))  # fmt: skip


def _offsets(topic: str, partition: int, spec: Any, isolation: IsolationLevel) -> Case:
    return lambda s: s.list_offsets(topic, partition, spec, Deadline.after(10),
                                    isolation=isolation)  # fmt: skip


async def test_topics_and_partitions(both: tuple[GatewayService, FakeService]) -> None:
    real, fake = both
    asked: list[Case] = [lambda s: s.topics()]
    asked += [lambda s, t=t: s.partitions(t) for t in TOPICS]
    asked += [lambda s: s.partitions("nope"), lambda s: s.partition("orders", 9)]
    for ask in asked:
        assert await answer(fake, ask) == await answer(real, ask)


def _fetch_cases(topic: str, partition: int, start: int, middle: int, end: int) -> list[Case]:
    cases = []
    for isolation in (RU, RC):
        for offset in (start, middle, end - 1, end, end + 1, end + 100):
            for max_bytes in (1, 3000, 1 << 20):
                cases.append(_fetch(topic, partition, offset, max_bytes, isolation))
    cases += [
        _fetch(topic, partition, -1, 1 << 20, RU),
        _fetch(topic, partition, start, 0, RU),
        _fetch(topic, 99, start, 1 << 20, RU),
        _fetch("nope", 0, 0, 1 << 20, RU),
    ]
    if start > 0:
        cases.append(_fetch(topic, partition, start - 1, 1 << 20, RU))
    return cases


def _offset_cases(topic: str, partition: int, stamps: list[int]) -> list[Case]:
    specs: list[Any] = ["earliest", "latest", "max_timestamp", "earliest_local",
                        "latest_tiered", "earliest_pending_upload", -1]  # fmt: skip
    specs += [stamps[0] - 1, stamps[0], stamps[len(stamps) // 2], stamps[-1], stamps[-1] + 1]
    cases = [_offsets(topic, partition, s, i) for s in specs for i in (RU, RC)]
    return [*cases, _offsets(topic, 99, "latest", RU), _offsets("nope", 0, "earliest", RU)]


@pytest.mark.parametrize(("topic", "partition"), PARTITIONS)
@pytest.mark.parametrize("kind", ["fetch", "list_offsets"])
async def test_the_fake_answers_as_the_service(
    both: tuple[GatewayService, FakeService], topic: str, partition: int, kind: str
) -> None:
    real, fake = both
    info = await real.partition(topic, partition)
    assert await answer(fake, lambda s: s.partition(topic, partition)) == info
    start, end = info.remote_log_start_offset, info.remote_log_end_offset
    if kind == "fetch":
        cases = _fetch_cases(topic, partition, start, (start + end) // 2, end)
    else:
        stamps = sorted({ts for b in fake.catalog[topic].partitions[partition].batches
                         for ts in b.timestamps if ts >= 0})  # fmt: skip
        cases = _offset_cases(topic, partition, stamps)
    for i, ask in enumerate(cases):
        want = await answer(real, ask)
        assert await answer(fake, ask) == want, i


async def test_a_read_committed_walk_ends_alike(
    both: tuple[GatewayService, FakeService],
) -> None:
    """payments-0 holds aborted transactions, some across a segment roll: a read_committed walk
    one batch at a time sees the same batches, aborted transactions and stable offsets."""
    real, fake = both
    for service_answers in (await _walk(real), await _walk(fake)):
        assert any(a[9] for a in service_answers)  # aborted transactions were met
    assert await _walk(fake) == await _walk(real)


async def _walk(service: Service) -> list[Answer]:
    offset, got = 0, []
    while True:
        answered = await answer(service, _fetch("payments", 0, offset, 1, RC))
        got.append(answered)
        if not isinstance(answered, tuple) or answered[6] == offset:
            return got
        offset = answered[6]
