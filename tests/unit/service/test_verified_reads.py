"""Warm answers are slices of verified runs (issue 30): whatever order reads come in, a warm
service answers every fetch with exactly the bytes and ``next_offset`` of a service that keeps
nothing (each fetch read cold from the bucket), for every topic of the demo (plain,
producer-compressed, zstd-chunked, compressed and encrypted with transactions), read_committed
included."""

from __future__ import annotations

import random
import uuid

import pytest

from gateway.cache.verified import CacheMemory, VerifiedRun, VerifiedRuns
from gateway.config import Settings
from gateway.deadline import Deadline
from gateway.demo import DemoBucket
from gateway.errors import CorruptRecordError, GatewayError
from gateway.kafka.batch import RecordBatch
from gateway.kafka.builder import RecordInput, build_batch
from gateway.service.core import GatewayService
from gateway.service.types import IsolationLevel
from tests.unit.service.support import ready_service

RU, RC = IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED
SEED = 30  # the walks are reproducible: one seed, printed by the failure's parameters


def _settings(demo: DemoBucket, *, cache: bool) -> Settings:
    return Settings(
        store=demo.store_url,
        key_prefix=demo.key_prefix,
        key_pairs=[demo.key_pair_spec],
        chunk_cache_bytes=(64 << 20) if cache else 0,
    )


Answer = tuple[bytes, int, int]


async def _answer(
    svc: GatewayService,
    topic: str,
    partition: int,
    offset: int,
    max_bytes: int,
    iso: IsolationLevel,
) -> Answer:
    result = await svc.fetch(
        topic, partition, offset, max_bytes=max_bytes, isolation=iso, deadline=Deadline.after(30)
    )
    data = b"".join(bytes(p.data) for p in result.batches)  # parts split where runs do
    return data, result.next_offset, result.log_end_offset


async def _requests(
    svc: GatewayService, rng: random.Random, count: int
) -> list[tuple[str, int, int, int, IsolationLevel]]:
    """Random fetches over every partition of the demo: random offsets, page walks (each
    from where the last ended), sizes from one byte to a few hundred KiB."""
    parts = [(t, p.partition) for t in sorted(await svc.topics()) for p in await svc.partitions(t)]
    out: list[tuple[str, int, int, int, IsolationLevel]] = []
    for _ in range(count):
        topic, partition = rng.choice(parts)
        info = await svc.partition(topic, partition)
        lo, hi = info.remote_log_start_offset, info.remote_log_end_offset
        iso = RC if topic == "payments" and rng.random() < 0.5 else RU
        max_bytes = rng.choice([1, 600, 4096, 20_000, 70_000, 300_000])
        offset = rng.randrange(lo, hi) if hi > lo else lo
        out.append((topic, partition, offset, max_bytes, iso))
    return out


@pytest.mark.parametrize("seed", [SEED, SEED + 1])
async def test_warm_answers_equal_cold_answers(demo: DemoBucket, seed: int) -> None:
    rng = random.Random(seed)
    async with (
        ready_service(_settings(demo, cache=True)) as warm,
        ready_service(_settings(demo, cache=False)) as cold,
    ):
        requests = await _requests(warm, rng, 120)
        for topic, partition, start, max_bytes, iso in requests:
            offset = start
            # a walk of a few pages from the random offset, and the same offset again later
            for _ in range(rng.randrange(1, 5)):
                try:
                    got = await _answer(warm, topic, partition, offset, max_bytes, iso)
                except GatewayError as exc:  # the cold service must fail the same way
                    with pytest.raises(type(exc)):
                        await _answer(cold, topic, partition, offset, max_bytes, iso)
                    break
                want = await _answer(cold, topic, partition, offset, max_bytes, iso)
                assert got == want, (topic, partition, offset, max_bytes, iso)
                if got[1] >= got[2] or got[1] == offset:
                    break
                offset = got[1]
        assert warm.source.runs.stats().hits > 0
        assert cold.source.runs.stats().entries == 0


def _run(*sizes: int, first: int = 100, position: int = 1000) -> VerifiedRun:
    """A run of batches of ``sizes`` bytes, two offsets each, from offset ``first``."""
    data = bytearray()
    batches: list[RecordBatch] = []
    for size in sizes:
        value = bytes(size)
        batch = build_batch(first + 2 * len(batches), [RecordInput(value), RecordInput(value)])
        batches.append(RecordBatch(memoryview(batch), position + len(data)))
        data += batch
    return VerifiedRun.of(memoryview(bytes(data)), position, batches)


def test_a_run_answers_by_table() -> None:
    run = _run(300, 300, 300)
    sizes = [run.ends[0], run.ends[1] - run.ends[0], run.ends[2] - run.ends[1]]
    assert run.first_offset == 100 and run.last_offset == 105
    assert run.index_of(99) == 0 and run.index_of(101) == 0 and run.index_of(102) == 1
    assert run.index_of(106) == 3
    assert run.fit(0, sizes[0] - 1) == 0  # not even the first whole batch
    assert run.fit(0, sizes[0] + sizes[1]) == 2
    assert run.fit(1, 1 << 20) == 3
    run.check_follows(102, 1, "k")
    with pytest.raises(CorruptRecordError, match="contiguous"):
        run.check_follows(103, 1, "k")


def test_runs_are_found_by_offset_and_forgotten_when_evicted() -> None:
    segment = uuid.UUID(int=7)
    a, b = _run(300, 300, first=0), _run(300, 300, first=4)
    runs = VerifiedRuns(CacheMemory(a.charge + b.charge))
    runs.add(segment, a)
    runs.add(segment, b)
    assert runs.find(segment, 1) is a and runs.find(segment, 5) is b
    assert runs.find(segment, 8) is None
    c = _run(300, first=8)
    runs.add(segment, c)  # evicts the least recently used: a
    assert runs.find(segment, 1) is None and runs.find(segment, 9) is c
    assert runs._firsts[segment] == [4, 8]
    assert runs.drop(segment) == 2 and runs.find(segment, 5) is None


def test_a_view_of_a_much_larger_buffer_is_copied_out() -> None:
    run = _run(300)
    data = bytes(run.data) + bytes(1 << 20)  # one batch, then 1 MiB the run does not hold
    batch = RecordBatch(memoryview(data)[: len(run.data)], run.position)
    held = VerifiedRun.of(memoryview(data), run.position, [batch])
    assert isinstance(held.data.obj, bytes) and len(held.data.obj) == len(run.data)
    assert held.charge < 64 << 10


def test_units_and_runs_share_one_budget() -> None:
    """CacheMemory: loaded units (2-part keys) and runs in one LRU; evicting a run takes it
    out of the segment's index, evicting a unit does not touch the runs."""
    segment = uuid.UUID(int=9)
    run = _run(300, first=0)
    memory = CacheMemory(run.charge + 1000)
    runs = VerifiedRuns(memory)
    runs.add(segment, run)
    memory[(segment, ~0)] = bytes(900)  # a unit
    assert runs.find(segment, 0) is run and len(memory) == 2
    memory[(segment, ~4096)] = bytes(900)  # evicts the least recently used: the first unit
    assert (segment, ~0) not in memory and runs.find(segment, 0) is run
    memory[(segment, ~8192)] = bytes(run.charge)  # now the run must go
    assert runs.find(segment, 0) is None and segment not in runs._firsts
