"""Fetch: the response encoder (byte for byte what kafka-python's schema encoder writes, with
the batches passed through as views, at every version served), cutting to ``max_bytes``, the
waiting rules, and topics by id (v13+): an id not served (unknown, an older incarnation, one
re-created under the read) never gets records."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.record import MemoryRecords

from gateway.errors import NotReadyError
from gateway.listener import codes
from gateway.listener.dispatch import VERSIONS, answer
from gateway.listener.fetch import READ_CONCURRENCY, fetch
from gateway.listener.fetch_plan import MAX_PARTITIONS
from gateway.listener.fetch_wire import TOPIC_IDS_FROM, PartitionAnswer, cut_to, encode_response
from gateway.listener.framing import FETCH, MalformedRequestError
from gateway.listener.sasl import Session
from gateway.service.types import AbortedTransaction
from tests.fakes.service import FakeService
from tests.unit.listener.secure import secured
from tests.unit.listener.support import (
    ABORTED,
    BATCH_BYTES,
    END,
    OLD_TOPIC_ID,
    PER_BATCH,
    TOPIC,
    TOPIC_ID,
    catalog,
    context,
    decoded,
    fake_service,
    fetches,
    request,
    unframe,
)

SERVED = range(VERSIONS[FETCH][0], VERSIONS[FETCH][1] + 1)
BY_ID = [v for v in SERVED if v >= TOPIC_IDS_FROM]


def _library_encoding(version: int, answers: list[PartitionAnswer]) -> bytes:
    r = FetchResponse[version]
    partitions = [
        r.FetchableTopicResponse.PartitionData(
            partition_index=a.partition,
            error_code=a.error,
            high_watermark=a.high_watermark,
            last_stable_offset=a.high_watermark
            if a.last_stable_offset is None
            else a.last_stable_offset,
            log_start_offset=a.log_start_offset,
            aborted_transactions=None
            if a.aborted is None
            else [
                r.FetchableTopicResponse.PartitionData.AbortedTransaction(
                    producer_id=t.producer_id, first_offset=t.first_offset
                )
                for t in a.aborted
            ],
            preferred_read_replica=-1,
            records=b"".join(bytes(b) for b in a.records),
        )
        for a in answers
    ]
    body = r(
        throttle_time_ms=0,
        error_code=0,
        session_id=0,
        responses=[r.FetchableTopicResponse(topic=TOPIC, topic_id=TOPIC_ID, partitions=partitions)],
        node_endpoints=[],
    )
    body.with_header(correlation_id=42)
    return bytes(body.encode(header=True, framed=True))


def test_every_version_kafka_python_decodes_from_4_is_served() -> None:
    """Fetch 4-18: the versions of kafka-python's schemas (Kafka's JSON definitions) from the
    baseline of Kafka 4 (isolation levels); the encoder below is compared at each."""
    assert (min(SERVED), max(SERVED)) == (4, FetchRequest.max_version) == (4, 18)
    assert list(range(13, 19)) == BY_ID


@pytest.mark.parametrize("version", SERVED)
def test_the_encoding_is_kafka_pythons_and_passes_the_batches_through(version: int) -> None:
    views = [memoryview(BATCH_BYTES[0]), memoryview(BATCH_BYTES[1] + BATCH_BYTES[2])]
    answers = [
        PartitionAnswer(0, codes.NONE, END, 0, (AbortedTransaction(7, 3),), views),
        PartitionAnswer(1, codes.OFFSET_OUT_OF_RANGE, END, 0, None, []),
        PartitionAnswer(2, codes.NONE, END, 0, (), []),
        PartitionAnswer(3, codes.NONE, END, 0, (), [], END - PER_BATCH),
    ]
    key = TOPIC_ID if version >= TOPIC_IDS_FROM else TOPIC
    buffers = encode_response(version, 42, [(key, answers)])
    assert b"".join(bytes(b) for b in buffers) == _library_encoding(version, answers)
    assert any(b is views[0] for b in buffers)
    assert any(b is views[1] for b in buffers)
    decoded = FetchResponse[version].decode(unframe(buffers), version=version, header=True)
    if version >= TOPIC_IDS_FROM:
        assert decoded.responses[0].topic_id == TOPIC_ID
    else:
        assert decoded.responses[0].topic == TOPIC
    got = decoded.responses[0].partitions[0]
    offsets = _record_offsets(got.records)
    assert offsets == list(range(3 * PER_BATCH))
    wrong = TOPIC if version >= TOPIC_IDS_FROM else TOPIC_ID
    with pytest.raises(ValueError, match="names a topic by"):
        encode_response(version, 42, [(wrong, answers)])


def test_cut_to_keeps_whole_batches_within_the_budget() -> None:
    run = memoryview(b"".join(BATCH_BYTES[:3]))
    one, two = len(BATCH_BYTES[0]), len(BATCH_BYTES[0]) + len(BATCH_BYTES[1])
    assert cut_to([run], two - 1) == [run[:one]]
    assert [bytes(b) for b in cut_to([run], two)] == [bytes(run[:two])]
    assert cut_to([run], one - 1) == []
    assert cut_to([run], len(run)) == [run]
    second = memoryview(BATCH_BYTES[3])
    assert [bytes(b) for b in cut_to([run, second], len(run) + 5)] == [bytes(run)]


def _fetch_request(
    partitions: list[tuple[int, int, int]],
    *,
    max_bytes: int,
    wait_ms: int,
    isolation: int = 0,
    version: int = 12,
    topics: list[uuid.UUID] | None = None,
) -> bytes:
    """A consumer's Fetch at ``version`` (kafka-python's request class): ``partitions`` of
    ``t`` (by name to v12, by its id from v13), or of each of ``topics`` (ids)."""
    r = FetchRequest[version]
    entries = [
        r.FetchTopic.FetchPartition(
            partition=p, fetch_offset=o, partition_max_bytes=m, current_leader_epoch=-1,
            last_fetched_epoch=-1, log_start_offset=-1,
        )
        for p, o, m in partitions
    ]  # fmt: skip
    if version < TOPIC_IDS_FROM:
        asked = [r.FetchTopic(topic=TOPIC, partitions=entries)]
    else:
        asked = [r.FetchTopic(topic_id=t, partitions=entries) for t in topics or [TOPIC_ID]]
    message = r(
        replica_id=-1,
        replica_state=r.ReplicaState(replica_id=-1, replica_epoch=-1),
        max_wait_ms=wait_ms,
        min_bytes=1,
        max_bytes=max_bytes,
        isolation_level=isolation,
        session_id=0,
        session_epoch=-1,
        topics=asked,
        forgotten_topics_data=[],
        rack_id="",
    )
    return request(message)


async def _fetch(service: Any, payload: bytes) -> Any:
    ctx = context(service)
    request = decoded(payload)
    reply = await fetch(ctx, request)
    if any(isinstance(b, memoryview) for b in reply.buffers):  # views of what was read
        assert ctx.budget.in_use > 0  # its share of inflight_bytes is held until sent
    reply.release()
    assert ctx.budget.in_use == 0
    version = request.api_version
    return FetchResponse[version].decode(unframe(reply), version=version, header=True)


def _record_offsets(records: object) -> list[int]:
    assert isinstance(records, bytes | bytearray | memoryview), type(records)
    data = records
    return [r.offset for b in MemoryRecords(bytes(data)) for r in b]


def _offsets(partition: object) -> list[int]:
    return _record_offsets(partition.records)


def test_max_bytes_is_shared_and_the_first_partition_with_data_is_never_cut() -> None:
    size = len(BATCH_BYTES[0])
    payload = _fetch_request([(0, 0, 10_000), (1, 0, 10_000)], max_bytes=size + 1, wait_ms=500)
    response = asyncio.run(_fetch(fake_service(), payload))
    first, second = response.responses[0].partitions
    assert _offsets(first) == list(range(PER_BATCH))  # one batch fits max_bytes
    assert _offsets(second) == []  # nothing left: no records, no error, asked again later
    assert (second.error_code, second.high_watermark) == (0, END)
    small = _fetch_request([(0, 0, 1)], max_bytes=1, wait_ms=500)
    response = asyncio.run(_fetch(fake_service(), small))
    assert _offsets(response.responses[0].partitions[0]) == list(range(PER_BATCH))


def test_offsets_outside_the_remote_log_and_the_end() -> None:
    payload = _fetch_request([(0, END, 1000), (1, END + 1, 1000)], max_bytes=1 << 20, wait_ms=0)
    at_end, past = asyncio.run(_fetch(fake_service(), payload)).responses[0].partitions
    assert (at_end.error_code, at_end.high_watermark, _offsets(at_end)) == (0, END, [])
    assert (past.error_code, past.high_watermark, past.log_start_offset) == (1, END, 0)
    payload = _fetch_request([(1, -1, 1000)], max_bytes=1 << 20, wait_ms=0)
    (negative,) = asyncio.run(_fetch(fake_service(), payload)).responses[0].partitions
    assert negative.error_code == codes.OFFSET_OUT_OF_RANGE


def test_read_committed_carries_the_aborted_transactions() -> None:
    payload = _fetch_request([(0, 0, 1000)], max_bytes=1 << 20, wait_ms=0, isolation=1)
    (p,) = asyncio.run(_fetch(fake_service(), payload)).responses[0].partitions
    assert [(t.producer_id, t.first_offset) for t in p.aborted_transactions] == [(7, 3)]
    assert p.last_stable_offset == END
    payload = _fetch_request([(0, 0, 1000)], max_bytes=1 << 20, wait_ms=0, isolation=0)
    (p,) = asyncio.run(_fetch(fake_service(), payload)).responses[0].partitions
    assert p.aborted_transactions is None


def test_read_committed_stops_at_the_last_stable_offset_and_says_so() -> None:
    """A transaction open at the remote tail: read_committed reads up to the remote last stable
    offset and says it (librdkafka's end of partition is there); at it, no records, no error
    and the bounds, as a broker at its LSO; read_uncommitted reads on to the end."""
    stable = END - 2 * PER_BATCH
    service = fake_service(stable=stable)
    payload = _fetch_request([(0, 0, 1 << 20)], max_bytes=1 << 20, wait_ms=0, isolation=1)
    (p,) = asyncio.run(_fetch(service, payload)).responses[0].partitions
    assert (p.error_code, p.high_watermark, p.last_stable_offset) == (0, END, stable)
    assert _offsets(p) == list(range(stable))
    payload = _fetch_request([(0, stable, 1 << 20)], max_bytes=1 << 20, wait_ms=0, isolation=1)
    (p,) = asyncio.run(_fetch(service, payload)).responses[0].partitions
    assert (p.error_code, p.high_watermark, p.last_stable_offset) == (0, END, stable)
    assert (p.log_start_offset, _offsets(p)) == (0, [])
    payload = _fetch_request([(0, stable, 1 << 20)], max_bytes=1 << 20, wait_ms=0, isolation=0)
    (p,) = asyncio.run(_fetch(service, payload)).responses[0].partitions
    assert (p.high_watermark, p.last_stable_offset) == (END, END)
    assert _offsets(p) == list(range(stable, END))


async def _settle(task: asyncio.Future[Any], seconds: float = 0.2) -> None:
    """Give a Fetch that must now be waiting every chance to go on wrongly: ``seconds`` in
    which it may run, not a count of event-loop turns (a verdict that held only for so many
    turns could pass on an implementation that goes wrong one turn later). A right one cannot
    go on, so no verdict depends on this time elapsing first."""
    await asyncio.wait({task}, timeout=seconds)


def test_past_max_wait_a_response_waits_for_data_on_its_way() -> None:
    """Partition 0 answers at once with nothing (at its end); partition 1's data is held back.
    With max_wait_ms 0 long past, the response still waits for partition 1's data."""

    async def run() -> None:
        service = fake_service(gates={1: asyncio.Event()})
        payload = _fetch_request([(0, END, 1000), (1, 0, 1000)], max_bytes=1 << 20, wait_ms=0)
        task = asyncio.ensure_future(_fetch(service, payload))
        while len(fetches(service)) < 2:
            await asyncio.sleep(0)
        await _settle(task)
        assert not task.done()
        service.gates[1].set()
        response = await task
        at_end, data = response.responses[0].partitions
        assert _offsets(at_end) == [] and at_end.error_code == 0
        assert _offsets(data)[:PER_BATCH] == list(range(PER_BATCH))

    asyncio.run(run())


def test_at_max_wait_what_is_ready_goes_and_the_rest_answers_empty() -> None:
    """A partition not ready answers its real bounds (clients store them: -1 as aiokafka's
    highwater would end a read-until-highwater loop early), no records and no error."""

    async def run() -> None:
        gate = asyncio.Event()  # never set: partition 1 is still reading
        service = fake_service(gates={1: gate})
        payload = _fetch_request([(0, 0, 1000), (1, 0, 1000)], max_bytes=1 << 20, wait_ms=0)
        response = await _fetch(service, payload)
        ready, waiting = response.responses[0].partitions
        assert _offsets(ready)[:PER_BATCH] == list(range(PER_BATCH))
        got = (waiting.error_code, waiting.high_watermark, waiting.last_stable_offset)
        assert got == (0, END, END)
        assert (waiting.log_start_offset, _offsets(waiting)) == (0, [])

    asyncio.run(run())


def test_a_fetch_with_nothing_to_say_is_held_until_max_wait() -> None:
    async def held() -> None:
        ctx = context(fake_service())
        payload = _fetch_request([(0, END, 1000)], max_bytes=1 << 20, wait_ms=300)
        task = asyncio.ensure_future(fetch(ctx, decoded(payload)))
        while not ctx.budget.stats.released_bytes and not task.done():
            await asyncio.sleep(0.01)
        reply = await task
        assert ctx.budget.stats.released_bytes > 0  # given back before the hold, not after
        reply.release()

    asyncio.run(held())
    payload = _fetch_request([(0, END, 1000), (1, END, 1000)], max_bytes=1 << 20, wait_ms=300)
    start = time.monotonic()
    response = asyncio.run(_fetch(fake_service(), payload))
    assert time.monotonic() - start >= 0.3
    assert [_offsets(p) for p in response.responses[0].partitions] == [[], []]
    payload = _fetch_request([(0, 0, 1000)], max_bytes=1 << 20, wait_ms=60_000)
    start = time.monotonic()
    response = asyncio.run(_fetch(fake_service(), payload))  # data: answered at once
    assert time.monotonic() - start < 30
    assert _offsets(response.responses[0].partitions[0])


def test_an_overloaded_fetch_answers_a_retriable_error_per_partition() -> None:
    async def run() -> object:
        ctx = context(fake_service(), request_timeout_ms=1)
        held = await ctx.budget.acquire(ctx.budget.capacity, ctx.deadline())
        try:
            payload = _fetch_request([(0, 0, 1000), (1, 0, 1000)], max_bytes=1000, wait_ms=0)
            reply = await fetch(ctx, decoded(payload))
        finally:
            ctx.budget.release(held)
        return FetchResponse[12].decode(unframe(reply), version=12, header=True)

    response = asyncio.run(run())
    first, second = response.responses[0].partitions
    assert (first.error_code, first.high_watermark, _offsets(first)) == (
        codes.KAFKA_STORAGE_ERROR, END, [],
    )  # fmt: skip
    # the second waits for the first's share (the request's whole max_bytes): refused in turn,
    # or, once the response goes with the first's error, not read; either way no records and
    # its real high watermark (never -1: a client would store it)
    got = (second.error_code, second.high_watermark, _offsets(second))
    assert got in ((codes.KAFKA_STORAGE_ERROR, END, []), (codes.NONE, END, [])), got


def test_more_than_max_partitions_is_a_malformed_request() -> None:
    many = [(p, 0, 1000) for p in range(MAX_PARTITIONS + 1)]
    with pytest.raises(MalformedRequestError, match="more than 1000 partitions"):
        asyncio.run(_fetch(fake_service(), _fetch_request(many, max_bytes=1 << 20, wait_ms=0)))
    copies = [(0, 0, 1000)] * (MAX_PARTITIONS + 1)  # duplicates count: they are entries
    with pytest.raises(MalformedRequestError):
        asyncio.run(_fetch(fake_service(), _fetch_request(copies, max_bytes=1 << 20, wait_ms=0)))


def test_a_partition_named_twice_is_read_and_answered_once_at_its_first_occurrence() -> None:
    service = fake_service()
    entries = [(0, 0, 1000), (1, 0, 1000)] + [(0, 3, 1000)] * (MAX_PARTITIONS - 2)
    payload = _fetch_request(entries, max_bytes=1 << 20, wait_ms=0)
    response = asyncio.run(_fetch(service, payload))
    first, second = response.responses[0].partitions
    assert (first.partition_index, second.partition_index) == (0, 1)
    assert _offsets(first)[0] == 0  # the first occurrence's offset
    assert sorted(c[:2] for c in fetches(service)) == [(0, 0), (1, 0)]


def test_the_reads_of_one_request_are_bounded_and_its_failures_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    service = fake_service(present=tuple(range(40)))
    wanted = [(p, 0, 1000) for p in range(40)] + [(p, 0, 1000) for p in range(40, 400)]
    payload = _fetch_request(wanted, max_bytes=1 << 20, wait_ms=60_000)  # every read ends
    with caplog.at_level(logging.INFO, logger="gateway.listener.fetch"):
        response = asyncio.run(_fetch(service, payload))
    partitions = response.responses[0].partitions
    assert len(fetches(service)) == 400
    assert 1 < service.most_reading <= READ_CONCURRENCY
    assert all(_offsets(p) for p in partitions[:40])
    unknown = [p.error_code for p in partitions[40:]]
    assert unknown == [codes.UNKNOWN_TOPIC_OR_PARTITION] * 360
    lines = [r for r in caplog.records if r.name == "gateway.listener.fetch"]
    assert len(lines) == 1 and "360 partition(s) failed" in lines[0].getMessage()


def test_the_reservation_is_what_is_read_and_is_released_down_to_the_answer() -> None:
    async def run() -> None:
        ctx = context(fake_service())
        payload = _fetch_request([(0, 0, 8 << 20)], max_bytes=64 << 20, wait_ms=0)
        reply = await fetch(ctx, decoded(payload))
        answer = sum(b.nbytes for b in reply.buffers if isinstance(b, memoryview))
        assert 0 < ctx.budget.in_use <= answer  # not the 8 MiB asked for
        reply.release()
        assert ctx.budget.in_use == 0
        # max_bytes is shared in request order: one partition takes it all, the next one
        # reserves what is left of it, not its own partition_max_bytes again
        service = fake_service(gates={0: asyncio.Event()})
        ctx = context(service)
        both = _fetch_request([(0, 0, 5000), (1, 0, 5000)], max_bytes=6000, wait_ms=60_000)
        task = asyncio.ensure_future(fetch(ctx, decoded(both)))
        while len(fetches(service)) < 2:
            await asyncio.sleep(0)
        assert [c[2] for c in fetches(service)] == [5000, 1000]
        assert ctx.budget.in_use == 6000
        service.gates[0].set()
        (await task).release()
        assert ctx.budget.in_use == 0

    asyncio.run(run())


@pytest.mark.parametrize("first_at_end", [False, True])
def test_a_spent_max_bytes_reads_no_more_partitions(first_at_end: bool) -> None:
    """max_bytes spent by the first partition's records: the next one waits for that read
    (it may give bytes back), then is not read at all (no batch outside inflight_bytes, to be
    cut away) and answers no records, no error and its bounds. When the first read finds
    nothing (at its end), its bytes come back and the next partition is read."""
    spent = len(BATCH_BYTES[0]) + len(BATCH_BYTES[1])  # two whole batches, exactly

    async def run() -> tuple[Any, list[tuple[int, int, int]], int]:
        service = fake_service(gates={0: asyncio.Event()})
        ctx = context(service)
        first = END if first_at_end else 0
        payload = _fetch_request([(0, first, 1 << 20), (1, 0, 1 << 20)], max_bytes=spent,
                                 wait_ms=60_000)  # fmt: skip
        task = asyncio.ensure_future(fetch(ctx, decoded(payload)))
        while not fetches(service):
            await asyncio.sleep(0)
        await _settle(task)
        waiting = list(fetches(service))  # partition 1 waits on partition 0's read
        service.gates[0].set()
        reply = await task
        reply.release()
        assert ctx.budget.in_use == 0
        response = FetchResponse[12].decode(unframe(reply), version=12, header=True)
        return response, waiting, len(fetches(service))

    response, waiting, reads = asyncio.run(run())
    assert waiting == [(0, END if first_at_end else 0, spent)]
    first, second = response.responses[0].partitions
    got = [(p.error_code, p.high_watermark, p.log_start_offset, _offsets(p))
           for p in (first, second)]  # fmt: skip
    if first_at_end:
        assert reads == 2
        assert got == [(0, END, 0, []), (0, END, 0, list(range(2 * PER_BATCH)))]
    else:
        assert reads == 1  # partition 1 was not read
        assert got == [(0, END, 0, list(range(2 * PER_BATCH))), (0, END, 0, [])]


def test_reads_waiting_for_the_byte_budget_share_max_bytes_and_do_not_each_take_it() -> None:
    """The budget is full when the request comes: both reads wait for it, and between them
    reserve at most the request's max_bytes (before, each reserved all of it, holding twice
    max_bytes of inflight_bytes just when it was scarce)."""
    total = 4 * len(BATCH_BYTES[0])

    async def run() -> list[tuple[int, int, int]]:
        service = fake_service()
        ctx = context(service)
        blocker = await ctx.budget.acquire(ctx.budget.capacity, ctx.deadline())
        payload = _fetch_request([(0, 0, 1 << 20), (1, 0, 1 << 20)], max_bytes=total,
                                 wait_ms=5_000)  # fmt: skip
        task = asyncio.ensure_future(fetch(ctx, decoded(payload)))
        await _settle(task)
        assert fetches(service) == []  # both are waiting for the budget
        ctx.budget.release(blocker)
        reply = await task
        reply.release()
        assert ctx.budget.in_use == 0
        return fetches(service)

    calls = asyncio.run(run())
    assert calls and sum(c[2] for c in calls) <= total, calls


class _BoundsBug(FakeService):
    async def partition(self, topic: str, partition: int) -> Any:
        if partition == 1:
            raise KeyError("a bug in the service")
        return await super().partition(topic, partition)


def test_a_bug_in_the_bounds_of_a_partition_not_read_is_its_answer_only() -> None:
    """max_bytes spent by partition 0, partition 1 is not read and answers its bounds; when
    those fail with an unexpected error, that partition says UNKNOWN_SERVER_ERROR and the
    response goes (before this, the whole Fetch failed)."""
    spent = len(BATCH_BYTES[0]) + len(BATCH_BYTES[1])
    payload = _fetch_request([(0, 0, 1 << 20), (1, 0, 1 << 20)], max_bytes=spent, wait_ms=500)
    first, second = asyncio.run(_fetch(_BoundsBug(catalog()), payload)).responses[0].partitions
    assert (first.error_code, _offsets(first)) == (codes.NONE, list(range(2 * PER_BATCH)))
    assert (second.error_code, _offsets(second)) == (codes.UNKNOWN_SERVER_ERROR, [])


def test_past_the_cap_a_fetch_with_nothing_answers_a_retriable_error() -> None:
    """Nothing ready at max_wait_ms: the response waits for the first answer, but not past
    the cap below request_timeout_ms; then the partitions still reading say
    KAFKA_STORAGE_ERROR (retriable), with their real bounds."""

    async def run() -> object:
        service = fake_service(gates={0: asyncio.Event()})  # never set
        ctx = context(service, request_timeout_ms=500)
        payload = _fetch_request([(0, 0, 1000)], max_bytes=1 << 20, wait_ms=0)
        reply = await asyncio.wait_for(fetch(ctx, decoded(payload)), 20)
        reply.release()
        assert ctx.budget.in_use == 0
        return FetchResponse[12].decode(unframe(reply), version=12, header=True)

    start = time.monotonic()
    (p,) = asyncio.run(run()).responses[0].partitions
    assert time.monotonic() - start < 20
    assert (p.error_code, p.high_watermark, p.log_start_offset) == (codes.KAFKA_STORAGE_ERROR,
                                                                    END, 0)  # fmt: skip
    assert _offsets(p) == []


# --- topics by id (v13+) ---------------------------------------------------------------------


@pytest.mark.parametrize("isolation", [0, 1])
@pytest.mark.parametrize("version", BY_ID)
def test_from_v13_topics_are_named_by_id_in_the_request_and_the_answer(
    version: int, isolation: int
) -> None:
    stable = END - 2 * PER_BATCH
    service = fake_service(stable=stable)
    payload = _fetch_request(
        [(0, 0, 10_000), (1, 3, 10_000)],
        max_bytes=1 << 20, wait_ms=0, isolation=isolation, version=version,
    )  # fmt: skip
    response = asyncio.run(_fetch(service, payload))
    (topic,) = response.responses
    assert topic.topic_id == TOPIC_ID
    first, second = topic.partitions
    last = stable if isolation else END
    assert (first.partition_index, _offsets(first)) == (0, list(range(last)))
    assert (second.partition_index, _offsets(second)) == (1, list(range(PER_BATCH, last)))
    assert (first.error_code, first.high_watermark, first.last_stable_offset) == (0, END, last)
    aborted = first.aborted_transactions
    if isolation:  # the service's aborted transactions, each field in its place
        assert [(t.producer_id, t.first_offset) for t in aborted] == [
            (a.producer_id, a.first_offset) for a in ABORTED
        ]
    else:
        assert aborted is None
    assert sorted(c[:2] for c in fetches(service)) == [(0, 0), (1, 3)]


@pytest.mark.parametrize("version", [13, 18])
def test_an_id_not_served_answers_unknown_topic_id_and_is_not_read(version: int) -> None:
    """An unknown id, and the id of an older incarnation of ``t`` still in the bucket (the
    service reads a name's newest incarnation only): UNKNOWN_TOPIC_ID for each partition,
    nothing read; the id served, in the same request, is read."""
    service = fake_service()
    stranger = uuid.UUID("5eed0000-0000-4000-8000-00000000000f")
    payload = _fetch_request(
        [(0, 0, 10_000), (1, 0, 10_000)],
        max_bytes=1 << 20, wait_ms=60_000, version=version,
        topics=[stranger, OLD_TOPIC_ID, TOPIC_ID],
    )  # fmt: skip
    start = time.monotonic()
    response = asyncio.run(_fetch(service, payload))
    assert time.monotonic() - start < 30  # errors and data: answered at once
    got = [(t.topic_id, p.partition_index, p.error_code, bool(_offsets(p)))
           for t in response.responses for p in t.partitions]  # fmt: skip
    unknown = codes.UNKNOWN_TOPIC_ID
    assert got == [
        (stranger, 0, unknown, False),
        (stranger, 1, unknown, False),
        (OLD_TOPIC_ID, 0, unknown, False),
        (OLD_TOPIC_ID, 1, unknown, False),
        (TOPIC_ID, 0, 0, True),
        (TOPIC_ID, 1, 0, True),
    ]
    assert sorted(c[:2] for c in fetches(service)) == [(0, 0), (1, 0)]  # only TOPIC_ID's


def test_a_topic_recreated_under_the_read_never_answers_the_new_incarnations_records() -> None:
    """The id asked is the newest when looked up, but the read (by name) finds another
    incarnation: UNKNOWN_TOPIC_ID and no records, its share of inflight_bytes given back; a
    partition not read in time does not take the other incarnation's bounds either."""
    service = fake_service(recreate=True)
    payload = _fetch_request([(0, 0, 1 << 20)], max_bytes=1 << 20, wait_ms=0, version=16)
    (p,) = asyncio.run(_fetch(service, payload)).responses[0].partitions
    assert (p.error_code, _offsets(p), p.high_watermark) == (codes.UNKNOWN_TOPIC_ID, [], -1)
    assert fetches(service)  # it was read, and not answered

    async def late() -> Any:
        held = fake_service(recreate=True, gates={1: asyncio.Event()})  # never set
        both = _fetch_request(
            [(0, 0, 1 << 20), (1, 0, 1 << 20)], max_bytes=1 << 20, wait_ms=0, version=16
        )
        return await _fetch(held, both)

    first, second = asyncio.run(late()).responses[0].partitions
    assert [first.error_code, second.error_code] == [codes.UNKNOWN_TOPIC_ID] * 2
    assert (second.high_watermark, _offsets(second)) == (-1, [])


@pytest.mark.parametrize("recreated", [False, True])
def test_a_recreated_topics_bounds_and_out_of_range_verdict_are_not_the_ids(
    recreated: bool,
) -> None:
    """A read by id that ends in OFFSET_OUT_OF_RANGE (past the end) or at the last stable
    offset (read_committed) of another incarnation answers UNKNOWN_TOPIC_ID with no bounds:
    the other log's out-of-range verdict would fire the client's auto.offset.reset. The same
    reads of the id's own incarnation answer their bounds."""
    service = fake_service(recreate=recreated, stable=2 * PER_BATCH)
    past_end = _fetch_request([(0, END + 5, 1 << 20)], max_bytes=1 << 20, wait_ms=0, version=16)
    pending = _fetch_request(
        [(1, 3 * PER_BATCH, 1 << 20)], max_bytes=1 << 20, wait_ms=0, isolation=1, version=16
    )
    (out,) = asyncio.run(_fetch(service, past_end)).responses[0].partitions
    (held,) = asyncio.run(_fetch(service, pending)).responses[0].partitions
    got = [(p.error_code, p.high_watermark, p.log_start_offset, p.last_stable_offset)
           for p in (out, held)]  # fmt: skip
    if recreated:
        assert got == [(codes.UNKNOWN_TOPIC_ID, -1, -1, -1)] * 2
    else:
        assert got == [
            (codes.OFFSET_OUT_OF_RANGE, END, 0, END),
            (codes.NONE, END, 0, 2 * PER_BATCH),
        ]
    assert [c[:2] for c in fetches(service)] == [(0, END + 5), (1, 3 * PER_BATCH)]  # both read


def test_while_the_catalog_is_not_loaded_an_id_answers_its_error() -> None:
    class Loading(FakeService):
        async def topics(self) -> dict[str, list[uuid.UUID]]:
            raise NotReadyError("the catalog of remote segments is not loaded yet")

    service = Loading(catalog())
    payload = _fetch_request([(0, 0, 1 << 20)], max_bytes=1 << 20, wait_ms=0, version=13)
    (p,) = asyncio.run(_fetch(service, payload)).responses[0].partitions
    assert (p.error_code, _offsets(p)) == (codes.LEADER_NOT_AVAILABLE, [])
    assert fetches(service) == []


def test_by_id_the_acl_is_the_topics_and_a_refused_topic_is_not_read(tmp_path: Path) -> None:
    """bob may describe ``t`` but not read it: its id answers TOPIC_AUTHORIZATION_FAILED, as
    its name does to v12 (``test_acl.py``); alice reads it."""
    sec = asyncio.run(secured(tmp_path))
    service = fake_service()
    ctx = replace(context(service, **sec.settings_args), access=sec.access)
    payload = _fetch_request([(0, 0, 1 << 20)], max_bytes=1 << 20, wait_ms=0, version=15)

    def ask(who: str) -> Any:
        reply = asyncio.run(answer(ctx, payload, Session("127.0.0.1", who)))
        assert reply is not None
        reply.release()
        (p,) = (
            FetchResponse[15]
            .decode(unframe(reply), version=15, header=True)
            .responses[0]
            .partitions
        )
        return p.error_code, bool(_offsets(p))

    assert ask("User:bob") == (codes.TOPIC_AUTHORIZATION_FAILED, False)
    assert fetches(service) == []
    assert ask("User:alice") == (codes.NONE, True)


def test_a_null_topic_id_is_a_malformed_request() -> None:
    payload = _fetch_request([(0, 0, 1000)], max_bytes=1 << 20, wait_ms=0, version=13)
    request = decoded(payload)
    request.body.topics[0].topic_id = None
    with pytest.raises(MalformedRequestError, match="topic id is null"):
        asyncio.run(fetch(context(fake_service()), request))
