"""The service over the demo bucket against an independent reading of the broker's files.

Expected records come from kafka-python's decoder run over the segment files the demo wrote
before tiering them; read_committed is computed by brute force (a transactional batch is
aborted when its producer's next marker is an ABORT), not from transaction indexes.
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kafka.record import MemoryRecords

from gateway.config import Settings
from gateway.deadline import Deadline
from gateway.demo import DemoBucket
from gateway.errors import (
    CorruptCheckpointError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from gateway.service.core import GatewayService
from gateway.service.offsets import check_epochs
from gateway.service.open import open_service
from gateway.service.types import IsolationLevel
from tests.fixtures.demo import copy_demo_bucket
from tests.unit.service.support import ready_service

RU, RC = IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED


@dataclass(frozen=True)
class Expected:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    epoch: int
    aborted: bool


def expected_records(segment_dir: Path) -> list[Expected]:
    batches = []
    for log in sorted(segment_dir.glob("*.log")):
        records = MemoryRecords(log.read_bytes())
        while (batch := records.next_batch()) is not None:
            batches.append((batch, list(batch)))
    outcome: dict[int, bool] = {}  # batch index -> aborted
    pending: dict[int, list[int]] = {}
    for i, (batch, recs) in enumerate(batches):
        if batch.is_control_batch:
            kind = struct.unpack(">hh", recs[0].key)[1]  # 0 ABORT, 1 COMMIT
            for j in pending.pop(batch.producer_id, []):
                outcome[j] = kind == 0
        elif batch.is_transactional:
            pending.setdefault(batch.producer_id, []).append(i)
    out = []
    for i, (batch, recs) in enumerate(batches):
        if batch.is_control_batch:
            continue
        for r in recs:
            out.append(
                Expected(
                    r.offset,
                    r.timestamp,
                    r.key,
                    r.value,
                    tuple((k, v) for k, v in r.headers),
                    batch.leader_epoch,
                    outcome.get(i, False),
                )
            )
    return out


@pytest.fixture
async def service(demo: DemoBucket) -> AsyncIterator[GatewayService]:
    settings = Settings(
        store=demo.store_url,
        key_prefix=demo.key_prefix,
        key_pairs=[demo.key_pair_spec],
        chunk_cache_bytes=1 << 20,
    )
    async with ready_service(settings) as svc:
        yield svc


async def walk(
    svc: GatewayService, topic: str, partition: int, isolation: IsolationLevel, max_bytes: int
) -> list[tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]]:
    info = await svc.partition(topic, partition)
    offset, got = info.remote_log_start_offset, []
    while offset < info.remote_log_end_offset:
        result = await svc.fetch(
            topic, partition, offset, max_bytes=max_bytes, isolation=isolation,
            deadline=Deadline.after(10),
        )  # fmt: skip
        assert result.next_offset > offset, "a walk must always move forward"
        for rec in await svc.decode(result, offset, isolation):
            got.append(
                (
                    rec.offset,
                    rec.timestamp,
                    rec.record.key,
                    rec.record.value,
                    tuple((k, v) for k, v in rec.record.headers),
                )
            )
        offset = result.next_offset
    return got


PARTITIONS = [
    ("orders", 0), ("orders", 1), ("clicks.v2-raw", 2), ("audit", 0), ("payments", 0),
    ("payments", 1), ("inventory", 0),
]  # fmt: skip


@pytest.mark.parametrize(("topic", "partition"), PARTITIONS)
@pytest.mark.parametrize("isolation", [RU, RC])
@pytest.mark.parametrize("max_bytes", [1, 3000, 1 << 20])
async def test_walk_returns_every_record_once(
    service: GatewayService,
    demo: DemoBucket,
    topic: str,
    partition: int,
    isolation: IsolationLevel,
    max_bytes: int,
) -> None:
    expected = expected_records(demo.root / "segments" / f"{topic}-{partition}")
    want = [
        (e.offset, e.timestamp, e.key, e.value, e.headers)
        for e in expected
        if isolation is RU or not e.aborted
    ]
    got = await walk(service, topic, partition, isolation, max_bytes)
    assert got == want
    if topic == "payments":
        assert any(e.aborted for e in expected)  # the case read_committed must handle


@pytest.mark.parametrize("block_bytes", [100, 777])
async def test_batches_spanning_many_read_units_are_whole(
    demo: DemoBucket, block_bytes: int
) -> None:
    """Untransformed segments read in units far smaller than their batches: every batch spans
    several units, and every walk is still whole."""
    settings = Settings(
        store=demo.store_url, key_prefix=demo.key_prefix, key_pairs=[demo.key_pair_spec],
        chunk_cache_bytes=1 << 20, block_bytes=block_bytes,
    )  # fmt: skip
    async with ready_service(settings) as svc:
        for topic, partition in [("orders", 0), ("inventory", 0)]:  # untransformed
            expected = expected_records(demo.root / "segments" / f"{topic}-{partition}")
            want = [(e.offset, e.timestamp, e.key, e.value, e.headers) for e in expected]
            for max_bytes in (1, 3000, 1 << 20):
                assert await walk(svc, topic, partition, RU, max_bytes) == want


async def test_leader_epochs_and_timestamps(service: GatewayService, demo: DemoBucket) -> None:
    expected = expected_records(demo.root / "segments" / "inventory-0")
    result = await service.fetch(
        "inventory", 0, 0, max_bytes=1 << 30, isolation=RU, deadline=Deadline.after(10)
    )
    records = await service.decode(result, 0, RU)
    assert [(r.offset, r.leader_epoch) for r in records] == [(e.offset, e.epoch) for e in expected]
    assert len({e.epoch for e in expected}) >= 3


async def test_list_offsets_equal_a_brute_force_search(
    service: GatewayService, demo: DemoBucket
) -> None:
    for topic, partition in PARTITIONS:
        seg = demo.root / "segments" / f"{topic}-{partition}"
        batches = []
        for log in sorted(seg.glob("*.log")):
            records = MemoryRecords(log.read_bytes())
            while (b := records.next_batch()) is not None:
                batches.append((b, list(b)))
        all_ts = sorted({r.timestamp for _, rs in batches for r in rs})
        probes = [all_ts[0] - 1, *all_ts[:: max(1, len(all_ts) // 25)], all_ts[-1], all_ts[-1] + 1]
        for ts in probes:
            want = (-1, -1, None)
            for b, rs in batches:  # control records count, as in Kafka
                if b.max_timestamp < ts:
                    continue
                hit = next((r for r in rs if r.timestamp >= ts), None)
                if hit is not None:
                    want = (hit.offset, hit.timestamp, b.leader_epoch)
                    break
            got = await service.list_offsets(topic, partition, ts, Deadline.after(10))
            assert (got.offset, got.timestamp, got.leader_epoch) == want, (topic, partition, ts)
        top = max(b.max_timestamp for b, _ in batches)
        first = next((b, rs) for b, rs in batches if b.max_timestamp == top)
        got = await service.list_offsets(topic, partition, "max_timestamp", Deadline.after(10))
        assert (got.offset, got.timestamp) == (
            next(r.offset for r in first[1] if r.timestamp == top),
            top,
        )
        last = max(r.offset for _, rs in batches for r in rs)
        latest = await service.list_offsets(topic, partition, "latest", Deadline.after(10))
        earliest = await service.list_offsets(topic, partition, "earliest", Deadline.after(10))
        assert (earliest.offset, latest.offset) == (0, last + 1)
        # the tiered-storage timestamps of a log that is all remote tier (-4, -6: its end,
        # -5: its highest offset, with the leader epoch of the batch holding it)
        holding = next(b for b, rs in batches if any(r.offset == last for r in rs))
        for spec, want in [
            ("earliest_local", (last + 1, -1, latest.leader_epoch)),
            ("earliest_pending_upload", (last + 1, -1, latest.leader_epoch)),
            ("latest_tiered", (last, -1, holding.leader_epoch)),
        ]:
            got = await service.list_offsets(topic, partition, spec, Deadline.after(10))  # type: ignore[arg-type]
            assert (got.offset, got.timestamp, got.leader_epoch) == want, (topic, spec)


async def test_a_disputed_epoch_lineage_refuses_the_answers_that_carry_epochs(
    service: GatewayService,
) -> None:
    """While the newest checkpoint disagrees with the epoch maps (one of them is damaged),
    EARLIEST, LATEST and a timestamp search are a typed 502, as the Spark planner's search,
    and the partition's info shows no epochs; what does not depend on the lineage (a fetch,
    whose batches are checked against their segment's map, and MAX_TIMESTAMP) still
    answers."""
    info = await service.partition("orders", 0)
    (tp,) = [t for t in service.rlmm.partitions(info.topic_id) if t.partition == 0]
    segment = service.rlmm.list_remote_log_segments(tp)[-1].segment_id.id
    assert (await service.partition("orders", 0)).leader_epochs
    before = await service.list_offsets("orders", 0, "max_timestamp", Deadline.after(5))
    # a checkpoint with an epoch 99 no segment's map has
    service.rlmm.dispute_epoch_lineage(tp, segment, [(0, 0), (99, 1)], "its.indexes")
    assert (await service.partition("orders", 0)).leader_epochs == ()  # Metadata: epoch -1
    for spec in ("earliest", "latest", 1_700_000_000_000):
        with pytest.raises(CorruptCheckpointError, match=r"in doubt.*its\.indexes.*epoch 99"):
            await service.list_offsets("orders", 0, spec, Deadline.after(5))  # type: ignore[arg-type]
    with pytest.raises(CorruptCheckpointError):  # as the Spark planner's search checks it
        check_epochs(service.rlmm, tp)
    top = await service.list_offsets("orders", 0, "max_timestamp", Deadline.after(5))
    assert (top.offset, top.timestamp) == (before.offset, before.timestamp)  # not in doubt
    assert before.offset > 0 and before.timestamp > 0
    page = await service.fetch("orders", 0, 0, max_bytes=1000, isolation=RU,
                               deadline=Deadline.after(5))  # fmt: skip
    assert page.batches


async def test_out_of_range_and_unknown(service: GatewayService) -> None:
    """Past the remote log end is out of range (at it, an empty answer: test_surprises)."""
    info = await service.partition("orders", 0)
    with pytest.raises(OffsetOutOfRangeError) as caught:
        await service.fetch(
            "orders", 0, info.remote_log_end_offset + 1, max_bytes=100, isolation=RU,
            deadline=Deadline.after(5),
        )  # fmt: skip
    assert (caught.value.log_start_offset, caught.value.log_end_offset) == (
        0,
        info.remote_log_end_offset,
    )
    assert caught.value.topic_id == info.topic_id  # the incarnation the bounds are of
    with pytest.raises(UnknownTopicOrPartitionError):
        await service.partition("nope", 0)
    with pytest.raises(UnknownTopicOrPartitionError):
        await service.partition("orders", 9)


async def test_one_batch_even_when_larger_than_max_bytes(service: GatewayService) -> None:
    result = await service.fetch(
        "orders", 0, 5, max_bytes=1, isolation=RU, deadline=Deadline.after(5)
    )
    assert len(result.batches) == 1
    assert result.batches[0].first_offset <= 5 <= result.batches[0].last_offset
    records = await service.decode(result, 5, RU)
    assert records and records[0].offset == 5
    assert result.next_offset == result.batches[0].last_offset + 1


async def test_max_bytes_holds_across_segments(service: GatewayService) -> None:
    segments = await service.segments("orders", 0)
    boundary = segments[1].start_offset
    for max_bytes in (200, 2000, 5000, 20000):
        result = await service.fetch(
            "orders", 0, boundary - 1, max_bytes=max_bytes, isolation=RU,
            deadline=Deadline.after(5),
        )  # fmt: skip
        sizes = [len(b.data) for b in result.batches]
        assert sum(sizes) <= max(max_bytes, sizes[0]), (max_bytes, sizes)


async def test_a_deleted_segment_is_out_of_range_not_an_empty_page(
    demo: DemoBucket, tmp_path: Path
) -> None:
    from gateway.storage.filesystem import FilesystemStore  # noqa: PLC0415

    copy = copy_demo_bucket(demo, tmp_path)
    settings = Settings(store=f"file://{copy}", key_prefix=demo.key_prefix,
                        key_pairs=[demo.key_pair_spec])  # fmt: skip
    async with open_service(settings) as svc:
        await svc.wait_ready()
        last = (await svc.segments("orders", 0))[-1]
        store = FilesystemStore(copy)
        async for info in store.list(demo.key_prefix):
            if last.segment_id in info.key and "orders-" in info.key:
                await store.delete(info.key)
        assert svc.scanner is not None
        await svc.scanner.scan()
        with pytest.raises(OffsetOutOfRangeError):
            await svc.fetch("orders", 0, last.start_offset + 1, max_bytes=100, isolation=RU,
                            deadline=Deadline.after(5))  # fmt: skip


async def test_a_failing_later_segment_does_not_sink_what_was_read(
    service: GatewayService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A response that would continue into a segment the store cannot serve ends with what
    it has; the next fetch, starting there, meets the failure."""
    from gateway.errors import StorageUnavailableError  # noqa: PLC0415
    from gateway.storage.filesystem import FilesystemStore  # noqa: PLC0415

    segments = await service.segments("audit", 0)
    first, second = segments[0], segments[1]
    real = FilesystemStore.get_range

    async def second_down(self: FilesystemStore, key: str, start: int, end: int) -> bytes:
        if second.segment_id in key and key.endswith(".log"):
            raise StorageUnavailableError(f"{key}: 503 SlowDown")
        return await real(self, key, start, end)

    monkeypatch.setattr(FilesystemStore, "get_range", second_down)
    result = await service.fetch(
        "audit", 0, first.start_offset, max_bytes=64 << 20, isolation=RU,
        deadline=Deadline.after(20),
    )  # fmt: skip
    assert result.batches and result.batches[-1].last_offset == first.end_offset
    assert result.next_offset == first.end_offset + 1 == second.start_offset
    with pytest.raises(StorageUnavailableError):
        await service.fetch("audit", 0, result.next_offset, max_bytes=100, isolation=RU,
                            deadline=Deadline.after(20))  # fmt: skip
