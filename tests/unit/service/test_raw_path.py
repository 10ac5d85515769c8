"""The raw-batches path of issue 15: batches stay views of the bytes read, a warm fetch makes
no thread hand-off (in-memory catalog), a writer holding the RLMM never blocks the event loop,
and every batch served has its CRC checked exactly once."""

from __future__ import annotations

import asyncio
import itertools
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from gateway.deadline import Deadline
from gateway.demo import DemoBucket
from gateway.kafka.batch import RecordBatch, iter_batches
from gateway.kafka.builder import RecordInput, build_batch
from gateway.metadata.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    SegmentState,
    TopicIdPartition,
)
from gateway.read.framing import SegmentBounds, SegmentFramer
from gateway.service.committed import _cut_before, visible_prefix
from gateway.service.core import GatewayService
from gateway.service.runs import SegmentRead, frame_window
from gateway.service.stable import StableBounds
from gateway.service.types import FetchedBatches, IsolationLevel
from tests.unit.service.support import demo_settings, ready_service

RU = IsolationLevel.READ_UNCOMMITTED


def _segment(batches: int = 12) -> bytes:
    out, offset = bytearray(), 0
    for i in range(batches):
        records = [RecordInput(b"v%d" % n * (3 + i), key=b"k") for n in range(1 + i % 4)]
        out += build_batch(offset, records, partition_leader_epoch=0)
        offset += len(records)
    return bytes(out)


@pytest.mark.parametrize("cuts", [(), (7,), (61, 62, 200), (3, 50, 51, 52, 400, 401)])
def test_frame_window_keeps_batches_as_views_of_the_window(cuts: tuple[int, ...]) -> None:
    segment = _segment()
    last = list(iter_batches(segment))[-1].last_offset
    framer = SegmentFramer(SegmentBounds("seg.log", 0, last, len(segment), ((0, 0),)))
    edges = [0, *(c for c in cuts if c < len(segment)), len(segment)]
    boundary, served = 0, bytearray()
    for lo, hi in itertools.pairwise(edges):
        window = bytearray(segment[lo:hi])  # mutable: a view shows a later change, a copy not
        framed = frame_window(framer, window, boundary)
        boundary = framed.boundary
        for run in framed.runs:
            ends_in_window = run.base >= lo
            if ends_in_window:  # framed in place: a view of this window
                assert run.buffer.obj is window
            for batch in run.batches:
                at = batch.position - run.base
                assert bytes(run.buffer[at : at + batch.size_in_bytes]) == bytes(batch.view)
                served += run.buffer[at : at + batch.size_in_bytes]
        if framed.runs and framed.runs[-1].base >= lo:
            window[framed.runs[-1].base - lo] ^= 0xFF  # the view sees it: no copy was made
            assert framed.runs[-1].buffer[0] == window[framed.runs[-1].base - lo]
            window[framed.runs[-1].base - lo] ^= 0xFF
    framer.finish()
    assert bytes(served) == segment


@pytest.fixture
async def service(demo: DemoBucket) -> AsyncIterator[GatewayService]:
    async with ready_service(demo_settings(demo)) as svc:
        yield svc


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the functions handed to a thread (``asyncio.to_thread``,
    ``run_in_executor``) from now on."""
    seen: list[str] = []
    to_thread = asyncio.to_thread
    run_in_executor = asyncio.BaseEventLoop.run_in_executor

    async def counted(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        seen.append(getattr(fn, "__qualname__", repr(fn)))
        return await to_thread(fn, *args, **kwargs)

    def counted_run(self: Any, executor: Any, fn: Any, *args: Any) -> Any:
        seen.append(getattr(fn, "__qualname__", repr(fn)))
        return run_in_executor(self, executor, fn, *args)

    monkeypatch.setattr(asyncio, "to_thread", counted)
    monkeypatch.setattr(asyncio.BaseEventLoop, "run_in_executor", counted_run)
    yield seen


async def _fetch(svc: GatewayService, offset: int = 0, max_bytes: int = 4096) -> int:
    result = await svc.fetch(
        "orders", 0, offset, max_bytes=max_bytes, isolation=RU, deadline=Deadline.after(10)
    )
    return sum(len(b.data) for b in result.batches)


async def test_a_warm_fetch_makes_no_thread_hand_off(
    service: GatewayService, hops: list[str]
) -> None:
    """Before: at least four ``to_thread`` calls per fetch for microsecond lookups."""
    await _fetch(service)  # warms the indexes and chunks
    hops.clear()
    assert await _fetch(service) > 0
    assert hops == []


async def test_a_writer_holding_the_catalog_never_blocks_the_event_loop(
    service: GatewayService, hops: list[str]
) -> None:
    """While a writer holds the RLMM's lock, a fetch's reads wait in a thread: the event loop
    keeps running (here: it releases the writer)."""
    await _fetch(service)
    held, release, released_by_loop = threading.Event(), threading.Event(), []

    def writer() -> None:
        with service.rlmm.batch():
            held.set()
            released_by_loop.append(release.wait(timeout=30))

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        held.wait()
        hops.clear()
        fetch = asyncio.create_task(_fetch(service))
        await asyncio.sleep(0)  # the fetch runs up to its first read of the catalog
        release.set()  # only reached if that read did not block the loop
        assert await fetch > 0
    finally:
        release.set()
        thread.join()
    assert released_by_loop == [True]
    assert hops  # the reads went to a thread


async def test_a_batch_is_checked_when_it_is_read_and_never_again(
    service: GatewayService, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked: list[int] = []
    ensure_valid = RecordBatch.ensure_valid

    def counted(batch: RecordBatch) -> None:
        checked.append(batch.base_offset)
        ensure_valid(batch)

    monkeypatch.setattr(RecordBatch, "ensure_valid", counted)
    cold = await service.fetch(
        "orders", 0, 0, max_bytes=1 << 20, isolation=RU, deadline=Deadline.after(10)
    )
    served = [b.base_offset for part in cold.batches for b in iter_batches(part.data)]
    assert served
    assert set(served) <= set(checked)  # the window read may hold a few more than served
    assert len(checked) == len(set(checked))
    checked.clear()
    warm = await service.fetch(
        "orders", 0, 0, max_bytes=1 << 20, isolation=RU, deadline=Deadline.after(10)
    )
    assert [bytes(p.data) for p in warm.batches] == [bytes(p.data) for p in cold.batches]
    assert checked == []  # sliced from the verified runs


def _read(segment: bytes, split: int) -> SegmentRead:
    """A read of ``segment`` as two parts, views of two buffers split at batch ``split``."""
    batches = list(iter_batches(segment))
    cut = batches[split].position
    head, tail = memoryview(bytearray(segment[:cut])), memoryview(bytearray(segment[cut:]))
    meta = _meta(batches[-1].last_offset, len(segment))
    parts = (
        FetchedBatches(0, head, batches[0].base_offset, batches[split - 1].last_offset),
        FetchedBatches(0, tail, batches[split].base_offset, batches[-1].last_offset),
    )
    return SegmentRead(meta, parts, (0, cut))


def _meta(end: int, size: int) -> RemoteLogSegmentMetadata:
    tp = TopicIdPartition(uuid.UUID(int=1), 0, "t")
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tp, uuid.UUID(int=2)), 0, end, 0, 0, 0, ((0, 0),), size,
        state=SegmentState.COPY_SEGMENT_FINISHED,
    )  # fmt: skip


@pytest.mark.parametrize("cut_batch", [1, 3, 4, 5, 9, 11])
def test_cut_before_keeps_views_of_the_batches_before_the_offset(cut_batch: int) -> None:
    segment = _segment()
    read = _read(segment, 4)
    offset = read.batches[cut_batch].base_offset
    (out,) = _cut_before([read], offset)
    kept = [b for b in read.batches if b.base_offset < offset]
    assert [(b.position, bytes(b.view)) for b in out.batches] == [
        (b.position, bytes(b.view)) for b in kept
    ]
    assert b"".join(bytes(p.data) for p in out.parts) == b"".join(bytes(b.view) for b in kept)
    assert out.last_offset == kept[-1].last_offset
    assert out.parts[-1].last_offset == kept[-1].last_offset
    for part, original in zip(out.parts, read.parts, strict=False):
        assert isinstance(part.data, memoryview)
        assert part.data.obj is original.data.obj  # type: ignore[union-attr]


def _mixed(transactional: set[int]) -> SegmentRead:
    """Twelve batches of two records, those numbered in ``transactional`` from a transactional
    producer, as a read of two parts."""
    out, offset = bytearray(), 0
    for i in range(12):
        records = [RecordInput(b"v", key=b"k"), RecordInput(b"w", key=b"k")]
        if i in transactional:
            out += build_batch(offset, records, producer_id=7, producer_epoch=0,
                               base_sequence=offset, transactional=True)  # fmt: skip
        else:
            out += build_batch(offset, records)
        offset += 2
    return _read(bytes(out), 4)


@pytest.mark.parametrize(
    ("transactional", "stable", "kept"),
    [
        (set(), 24, None),  # nothing transactional, all below the stable offset: all of it
        (set(), 10, 10),  # cut at the last stable offset
        ({5}, 24, 10),  # up to the first transactional batch
        ({5, 7}, 8, 8),  # the stable offset first
        ({0}, 24, 0),  # a transactional first batch: nothing proven
    ],
)
def test_visible_prefix_is_the_batches_read_committed_shows_without_the_txn_index(
    transactional: set[int], stable: int, kept: int | None
) -> None:
    """A read_committed fetch whose deadline passes while its aborted transactions are read
    answers the batches before the first transactional one (and before the last stable
    offset), and the offset it stopped at; none when no batch is left."""
    read = _mixed(transactional)
    shown = visible_prefix([read], StableBounds(0, 24, stable))
    if kept == 0:
        assert shown is None
        return
    assert shown is not None
    reads, cut = shown
    assert cut == kept
    want = [b for b in read.batches if kept is None or b.base_offset < kept]
    assert [b.base_offset for r in reads for b in r.batches] == [b.base_offset for b in want]
    assert not any(b.is_transactional for r in reads for b in r.batches)
