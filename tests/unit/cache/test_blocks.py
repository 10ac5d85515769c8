"""Untransformed segments are read and cached in aligned blocks, not whole chunks."""

from __future__ import annotations

import asyncio
import uuid
from array import array
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from gateway.cache.chunk_disk import ChunkDiskTier
from gateway.cache.chunks import ChunkCache
from gateway.cache.segments import SegmentSource
from gateway.cache.verified import CacheMemory, VerifiedRun, VerifiedRuns
from gateway.deadline import Deadline
from gateway.remote.chunk_index import Chunk
from gateway.remote.keyring import KeyRing
from gateway.remote.reader import RemoteSegment, SegmentReader
from gateway.remote.tiering import (
    TieringOptions,
)
from gateway.storage.retry import Retrier
from tests.unit.cache.helpers import KEY_PREFIX, Tiered, tier_demo, tiered_demo

CHUNK = 8192  # the segment's chunks: a cold read must not fetch one whole
BLOCK = 512
SID = uuid.UUID(int=1)


@pytest.fixture
async def plain(tmp_path: Path) -> AsyncIterator[Tiered]:
    async with tiered_demo(tmp_path, TieringOptions(chunk_size=CHUNK)) as (reader, remote, log):
        assert remote.transform.is_identity and remote.size > 2 * CHUNK
        yield reader, remote, log


async def test_a_cold_read_fetches_the_aligned_range_not_the_chunk(
    plain: tuple[SegmentReader, RemoteSegment, bytes],
) -> None:
    reader, remote, log = plain
    cache = ChunkCache(reader, max_bytes=1 << 20, readahead_bytes=0, block_bytes=BLOCK)
    assert await cache.read(remote, SID, 1000, 2100, Deadline.after(10)) == log[1000:2100]
    c = reader.counters
    assert (c.gets, c.bytes_fetched) == (1, 2560 - 512)  # blocks [512, 2560): 4 of them
    assert cache.stats().entries == 4
    # Inside those blocks: memory; one byte past them: only the missing block is fetched.
    assert await cache.read(remote, SID, 600, 2560, Deadline.after(10)) == log[600:2560]
    assert await cache.read(remote, SID, 2000, 2561, Deadline.after(10)) == log[2000:2561]
    assert (c.gets, c.bytes_fetched) == (2, 2048 + BLOCK)
    # The last block is short; a read past the end is clamped.
    end = len(log)
    assert await cache.read(remote, SID, end - 10, end + 999, Deadline.after(10)) == log[-10:]
    assert await cache.invalidate(SID) == 6 and cache.stats().entries == 0


async def test_concurrent_cold_reads_share_blocks_and_gets(
    plain: tuple[SegmentReader, RemoteSegment, bytes],
) -> None:
    reader, remote, log = plain
    cache = ChunkCache(reader, max_bytes=1 << 20, readahead_bytes=0, block_bytes=BLOCK)
    reads = await asyncio.gather(
        *(cache.read(remote, SID, 100, 5000, Deadline.after(10)) for _ in range(50))
    )
    assert set(reads) == {log[100:5000]}
    assert reader.counters.gets == 1 and cache.stats().loads == 1


async def test_forward_reads_read_blocks_ahead(
    plain: tuple[SegmentReader, RemoteSegment, bytes],
) -> None:
    reader, remote, log = plain
    cache = ChunkCache(reader, max_bytes=1 << 20, readahead_bytes=4 * BLOCK, block_bytes=BLOCK)
    await cache.read(remote, SID, 0, 2 * BLOCK, Deadline.after(10))
    await cache.read(remote, SID, BLOCK + 7, 3 * BLOCK, Deadline.after(10))
    await cache.settle()
    assert cache.stats().readahead_chunks == 4
    gets = reader.counters.gets
    got = await cache.read(remote, SID, 3 * BLOCK, 7 * BLOCK, Deadline.after(10))
    assert got == log[3 * BLOCK : 7 * BLOCK] and reader.counters.gets == gets


async def test_blocks_on_disk_survive_a_restart_but_not_a_new_block_size(
    plain: tuple[SegmentReader, RemoteSegment, bytes], tmp_path: Path
) -> None:
    reader, remote, log = plain

    def cache(block: int) -> ChunkCache:
        disk = ChunkDiskTier(tmp_path / "disk", 1 << 20)
        disk.open()
        return ChunkCache(
            reader, max_bytes=1 << 20, readahead_bytes=0, block_bytes=block, disk=disk
        )

    first = cache(BLOCK)
    assert await first.read(remote, SID, 0, 3000, Deadline.after(10)) == log[:3000]
    await first.settle()
    gets = reader.counters.gets
    again = cache(BLOCK)
    assert await again.read(remote, SID, 10, 2000, Deadline.after(10)) == log[10:2000]
    assert reader.counters.gets == gets  # from disk
    bigger = cache(4 * BLOCK)  # block 0 on disk holds 512 bytes, now it must hold 2048
    assert await bigger.read(remote, SID, 0, 3000, Deadline.after(10)) == log[:3000]
    assert reader.counters.gets == gets + 1


async def test_prefetch_loads_a_head_once_in_the_background(
    plain: tuple[SegmentReader, RemoteSegment, bytes],
) -> None:
    reader, remote, log = plain
    cache = ChunkCache(reader, max_bytes=1 << 20, readahead_bytes=0, block_bytes=BLOCK)
    assert cache.prefetch(remote, SID, 0, 4 * BLOCK) == 4
    assert cache.prefetch(remote, SID, 0, 4 * BLOCK) == 0  # already loading
    await cache.settle()
    gets = reader.counters.gets
    assert await cache.read(remote, SID, 0, 4 * BLOCK, Deadline.after(10)) == log[: 4 * BLOCK]
    assert reader.counters.gets == gets == 1


async def test_the_source_prefetches_the_head_of_a_segment(tmp_path: Path) -> None:
    demo = await tier_demo(tmp_path, TieringOptions(chunk_size=CHUNK))
    with ThreadPoolExecutor(2) as pool:
        reader = SegmentReader(demo.store, Retrier(), pool)
        cache = ChunkCache(reader, max_bytes=1 << 20, readahead_bytes=0, block_bytes=BLOCK)
        source = SegmentSource(
            reader, KeyRing(), key_prefix=KEY_PREFIX, executor=pool, chunk_cache=cache,
            index_cache_bytes=1 << 20,
        )  # fmt: skip
        await source.start()
        try:
            source.prefetch(demo.meta, 3 * BLOCK)
            await source.settle()
            assert cache.stats().entries == 3
            gets = reader.counters.gets
            got, size = await source.read(demo.meta, 0, 3 * BLOCK, Deadline.after(10))
            assert (got, size) == (demo.log[: 3 * BLOCK], len(demo.log))
            assert reader.counters.gets == gets == 2  # the manifest and one ranged GET
        finally:
            await source.aclose()


async def test_a_read_kept_as_verified_runs_leaves_its_units_room(
    plain: tuple[SegmentReader, RemoteSegment, bytes],
) -> None:
    """``keep=False`` (the fetch keeps what it read as verified runs): the units wholly inside
    the range are dropped; one the range only touches stays for the next read."""
    reader, remote, log = plain
    cache = ChunkCache(reader, max_bytes=1 << 20, readahead_bytes=0, block_bytes=BLOCK)
    got = await cache.read(remote, SID, 512, 2100, Deadline.after(10), keep=False)
    assert got == log[512:2100]
    assert cache.stats().entries == 1  # [2048, 2560): the next read begins inside it
    assert await cache.read(remote, SID, 2100, 2560, Deadline.after(10)) == log[2100:2560]
    assert reader.counters.gets == 1


async def test_read_ahead_evicted_before_its_use_shrinks_and_used_grows_back(
    plain: tuple[SegmentReader, RemoteSegment, bytes],
) -> None:
    """Read-ahead that memory evicts before the reader comes (more streams than the budget
    holds) is halved, down to none, and fetches nothing more; units read ahead and used grow
    it back to what was configured. Every read still returns exactly the segment's bytes."""
    reader, remote, log = plain
    b = 64  # blocks
    assert remote.size >= 160 * b
    cache = ChunkCache(reader, max_bytes=8 * b, readahead_bytes=4 * b, block_bytes=b)

    async def read(lo: int, hi: int) -> None:
        assert await cache.read(remote, SID, lo, hi, Deadline.after(10)) == log[lo:hi]
        await cache.settle()

    async def stream_evicted_ahead(at: int) -> None:
        """Forward reads at ``at`` whose read-ahead another range evicts before the next."""
        await read(at, at + b)
        await read(at + b + 8, at + 2 * b)  # forward: the units ahead are loaded
        await read(at + 8 * b, at + 16 * b)  # another reader fills memory
        await read(at + 2 * b, at + 3 * b)  # the unit read ahead is gone

    assert cache.readahead_bytes == 4 * b
    await stream_evicted_ahead(0)
    assert cache.stats().readahead_wasted == 1 and cache.readahead_bytes == 2 * b
    await stream_evicted_ahead(32 * b)
    assert cache.readahead_bytes == b
    await stream_evicted_ahead(64 * b)
    assert cache.readahead_bytes == 0  # below one unit: none
    ahead = cache.stats().readahead_chunks
    await read(96 * b, 97 * b)
    await read(97 * b + 8, 98 * b)  # forward, but no read-ahead now
    assert cache.stats().readahead_chunks == ahead
    for i in range(60):  # a lone reader: the probes' units are used, it grows back
        await read((98 + i) * b + 8, (99 + i) * b)
    assert cache.readahead_bytes == 4 * b
    assert cache.stats().readahead_chunks > ahead


async def test_no_prefetch_of_a_head_that_a_verified_run_holds(tmp_path: Path) -> None:
    """The next segment's head is not loaded ahead when its first offset is in a verified
    run already (a warm pass over a cache whose units were evicted fetches nothing)."""
    demo = await tier_demo(tmp_path, TieringOptions(chunk_size=CHUNK))
    runs = VerifiedRuns(CacheMemory(1 << 20))
    first = demo.meta.start_offset
    one = array("q", [first])
    held = VerifiedRun(0, memoryview(b"x"), array("q", [1]), one, one, 600)
    runs.add(demo.meta.segment_id.id, held)
    with ThreadPoolExecutor(2) as pool:
        reader = SegmentReader(demo.store, Retrier(), pool)
        chunks = ChunkCache(reader, max_bytes=1 << 20, readahead_bytes=4 * BLOCK)
        source = SegmentSource(
            reader, KeyRing(), key_prefix=KEY_PREFIX, executor=pool, chunk_cache=chunks,
            index_cache_bytes=1 << 20, runs=runs,
        )  # fmt: skip
        source.prefetch(demo.meta, 4 * BLOCK)
        await source.settle()
        assert chunks.stats().readahead_chunks == 0 and reader.counters.gets == 0
        runs.drop(demo.meta.segment_id.id)  # the same with no run: loaded
        source.prefetch(demo.meta, 4 * BLOCK)
        await source.settle()
        assert chunks.stats().readahead_chunks > 0
        await source.aclose()


async def test_read_ahead_still_loading_when_its_reader_comes_counts_as_used(
    plain: tuple[SegmentReader, RemoteSegment, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader that comes for a unit read ahead while its GET is still out joins the load:
    that read-ahead was not wasted, and it grows back (not halved)."""
    reader, remote, log = plain
    b = 64
    cache = ChunkCache(reader, max_bytes=64 * b, readahead_bytes=4 * b, block_bytes=b)
    cache._ahead_bytes = b  # shrunk earlier: one unit ahead
    gate = asyncio.Event()
    fetch = reader.read_chunks

    async def gated(segment: RemoteSegment, chunks: list[Chunk], deadline: Deadline) -> Any:
        if any(c.original_position == 2 * b for c in chunks):  # unit 2's GET waits
            await gate.wait()
        return await fetch(segment, chunks, deadline)

    monkeypatch.setattr(reader, "read_chunks", gated)
    await cache.read(remote, SID, 0, b, Deadline.after(10))
    await cache.read(remote, SID, b, 2 * b, Deadline.after(10))  # forward: unit 2 ahead
    assert cache.stats().readahead_chunks == 1 and len(cache._inflight) == 1  # it waits
    before = cache.readahead_bytes
    reading = asyncio.ensure_future(cache.read(remote, SID, 2 * b, 3 * b, Deadline.after(10)))
    await asyncio.sleep(0)  # it joined the load of unit 2 (nothing to time: it cannot finish)
    assert not reading.done()
    gate.set()
    assert await reading == log[2 * b : 3 * b]
    assert cache.stats().readahead_wasted == 0
    assert cache.readahead_bytes > before
    await cache.settle()
